"""spore.Server / spore.serve: `spore serve` started from Python, answering KServe v2 and OpenAI requests, stopped
gracefully; bad options raise."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

import numpy as np
import pytest

import spore
from spore import nn


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


@pytest.fixture
def tensor_model(tmp_path):
    spore.set_seed(0)
    net = nn.SequentialCell(nn.Flatten(), nn.Dense(16, 3))
    path = spore.export(net, (("batch", 1, 4, 4), spore.float32), file_name=tmp_path / "tiny", file_format="ONNX")["path"]
    return net, path


def test_a_background_server_answers_kserve_and_stops(tensor_model):
    net, path = tensor_model
    x = np.random.default_rng(1).random((2, 1, 4, 4), dtype=np.float32)
    with spore.Server(path, port=0, access_log=False) as srv:
        assert srv.running and srv.port > 0
        with urllib.request.urlopen(srv.url + "/health", timeout=10) as r:
            assert r.status == 200
        out = post(srv.url + "/v2/models/tiny/infer",
                   {"inputs": [{"name": "x", "shape": [2, 1, 4, 4], "datatype": "FP32", "data": x.ravel().tolist()}]})
        y = np.array(out["outputs"][0]["data"], np.float32).reshape(out["outputs"][0]["shape"])
        np.testing.assert_allclose(y, net.set_train(False)(x).numpy(), rtol=1e-5, atol=1e-6)
    assert not srv.running
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(srv.url + "/health", timeout=2)


def test_an_llm_server_answers_openai_completions(tiny_gguf):
    with spore.Server(tiny_gguf, port=0, parallel=2, ctx=256, access_log=False) as srv:
        out = post(srv.url + "/v1/completions", {"model": "llama-2-tiny-random", "prompt": "Once upon a time",
                                                 "max_tokens": 8, "temperature": 0})
        assert out["object"] == "text_completion" and out["usage"]["completion_tokens"] == 8
        want = spore.llm.load(tiny_gguf).generate("Once upon a time", max_tokens=8)
        assert out["choices"][0]["text"] == want.text


def test_bad_options_and_models_raise(tmp_path):
    with pytest.raises(TypeError, match="unknown option"):
        spore.Server("x.onnx", prot=8080)
    with pytest.raises(ValueError, match="give a model"):
        spore.Server()
    with pytest.raises(spore.Error, match="not found"):
        spore.Server(tmp_path / "missing.onnx", port=0)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(spore.Error, match="bad"):
        spore.Server(bad, port=0, access_log=False)
    with pytest.raises(spore.Error, match="kv_type"):
        spore.Server("m.gguf", kv_type="f8")


def test_blocking_serve_stops_on_ctrl_c_and_python_keeps_its_signals(tensor_model, tmp_path):
    _, path = tensor_model
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent(f"""
        import signal, time
        import spore
        spore.serve({path!r}, port=0, access_log=False)
        print("returned", flush=True)
        try:  # Ctrl-C still reaches Python afterwards
            signal.raise_signal(signal.SIGINT)
            time.sleep(5)
            print("not interrupted")
        except KeyboardInterrupt:
            print("python got SIGINT")
    """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=os.environ)
    line = p.stdout.readline()
    assert line.startswith("listening on http://127.0.0.1:"), line + p.stderr.read()
    port = int(line.rsplit(":", 1)[1])
    for _ in range(200):  # ready once /health says so
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except urllib.error.URLError:
            pass
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert out.split("\n")[:2] == ["returned", "python got SIGINT"], out + err
    assert "stop requested: shutting down" in err
