"""spore.convert / spore.profile (spore/tools.py): the engine code `spore convert` and `spore profile` run
(src/deploy/convert.cpp, profile.cpp), so the Python report equals the CLI's --json report on the same input (every
field but the output path; profile: the fields that do not time anything). The model: SimpleNet trained 1 epoch on
the bundled digits with the CLI and exported with a symbolic batch."""
import json
import os
import subprocess

import numpy as np
import pytest

import spore
from spore.tools import convert, profile


def cli_json(cli, *args):
    p = subprocess.run([cli, *args, "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture
def model(tmp_path, spore_cli, digits):
    ck = tmp_path / "ck"
    subprocess.run([spore_cli, "train", "--model", "simplenet", "--dataset", digits, "--epochs", "1", "--ckpt-dir",
                    str(ck), "--no-progress"], check=True, capture_output=True, timeout=300)
    path = tmp_path / "m.onnx"
    subprocess.run([spore_cli, "export", "--model", "simplenet", "--ckpt", str(ck / "simplenet_epoch1.safetensors"),
                    "--input-shape", "x:batch,1,8,8", "-o", str(path)], check=True, capture_output=True, timeout=300)
    return str(path)


def samples(n, seed=0):
    return np.random.default_rng(seed).random((n, 1, 8, 8), dtype=np.float32)


def without_output(rep):
    rep = dict(rep)
    del rep["output"]
    return rep


def test_convert_fp16_equals_cli(model, spore_cli, digits, tmp_path):
    out = tmp_path / "f16.spore"
    rep = convert(model, out, precision_mode="allow_fp32_to_fp16", eval_data=digits)
    cli = cli_json(spore_cli, "convert", model, "-o", str(tmp_path / "f16_cli.spore"), "--precision-mode",
                   "allow_fp32_to_fp16", "--eval-data", digits)
    assert without_output(rep) == without_output(cli)
    assert rep["output"] == str(out) and rep["precision_mode"] == "allow_fp32_to_fp16"
    assert rep["ops_per_dtype_after"].get("f16", 0) > 0 and rep["size_ratio"] < 0.6
    assert rep["eval_samples"] > 0 and abs(rep["accuracy_delta_points"]) < 2
    # The converted file loads and computes what the source computes (f16 rounding apart).
    x = samples(4)
    y = spore.load(out)(x).numpy()
    ref = spore.load(model)(x).numpy()
    assert y.dtype == np.float32 and y.shape == (4, 10)
    np.testing.assert_allclose(y, ref, rtol=2e-2, atol=2e-2)


def test_convert_int8_calibrated_equals_cli(model, spore_cli, digits, tmp_path):
    rep = convert(model, str(tmp_path / "i8.spore"), quantize="int8", calib_data=digits, calib_samples=64,
                  calib_method="percentile", eval_data=digits)
    cli = cli_json(spore_cli, "convert", model, "-o", str(tmp_path / "i8_cli.spore"), "--quantize", "int8",
                   "--calib-data", digits, "--calib-samples", "64", "--calib-method", "percentile", "--eval-data",
                   digits)
    assert without_output(rep) == without_output(cli)
    assert rep["ops_quantized"] >= 1 and rep["compare_samples"] == 64 and rep["calib_method"] == "percentile"
    assert rep["size_after_bytes"] < rep["size_before_bytes"]
    assert rep["outputs"][0]["cosine"] > 0.99
    y = spore.load(tmp_path / "i8.spore")(samples(2)).numpy()
    assert y.shape == (2, 10) and np.isfinite(y).all()


def test_convert_calibration_array_equals_npy_directory(model, spore_cli, tmp_path):
    # Samples given as an array calibrate as the same samples in a directory of .npy files do.
    x = samples(12, seed=3)
    calib = tmp_path / "calib"
    calib.mkdir()
    np.save(calib / "a.npy", x[:5])
    for i in range(5, 12):
        np.save(calib / f"b{i:02d}.npy", x[i])  # one sample without its batch dim
    rep = convert(model, tmp_path / "arr.spore", quantize="int8", calib_data=x, input_scale=2.0)
    also = convert(model, tmp_path / "ten.spore", quantize="int8", calib_data=spore.tensor(x), input_scale=2.0)
    cli = cli_json(spore_cli, "convert", model, "-o", str(tmp_path / "dir.spore"), "--quantize", "int8",
                   "--calib-data", str(calib), "--input-scale", "2")
    assert rep["compare_samples"] == 12 and rep["compare_inputs"] == "given samples [12,1,8,8]"
    for k in ("outputs", "ops_per_dtype_after", "ops_quantized", "weights_quantized", "size_after_bytes",
              "compare_samples"):
        assert rep[k] == cli[k], k
        assert also[k] == cli[k], k


def test_convert_weight_int8_onnx_and_input_shape(model, spore_cli, tmp_path):
    rep = convert(model, tmp_path / "w8.onnx", quantize="weight_int8", precision_mode="allow_mix_precision",
                  mix_dtype="bf16", input_shape={"x": (2, 1, 8, 8)}, optimize_level=0)
    cli = cli_json(spore_cli, "convert", model, "-o", str(tmp_path / "w8_cli.onnx"), "--quantize", "weight_int8",
                   "--precision-mode", "allow_mix_precision", "--mix-dtype", "bf16", "--input-shape", "x:2,1,8,8",
                   "--optimize-level", "0")
    assert without_output(rep) == without_output(cli)
    assert rep["mix_dtype"] == "bf16" and rep["weights_quantized"] >= 1
    assert rep["compare_inputs"] == "seeded random inputs in [0, 1)"
    assert spore.load(tmp_path / "w8.onnx").inputs[0][2] == (2, 1, 8, 8)


def test_profile(model, spore_cli, tmp_path):
    trace = tmp_path / "trace.json"
    rep = profile(model, batch=4, runs=3, warmup=1, trace=trace)
    cli = cli_json(spore_cli, "profile", model, "--batch", "4", "--iters", "3", "--warmup", "1", "--no-trace")
    assert set(rep) == set(cli) and set(rep["memory"]) == set(cli["memory"])
    for k in ("kernels", "batch", "iters", "warmup", "events", "mode", "opt_level", "precision_mode", "arena_bytes",
              "planned_peak_bytes", "weights_bytes", "threads"):
        assert rep[k] == cli[k], k
    assert {t["op"] for t in rep["top"]} == {t["op"] for t in cli["top"]}
    assert rep["memory"]["live_at_peak"] == cli["memory"]["live_at_peak"]
    assert rep["kernels"] > 0 and rep["peak_bytes"] > 0 and rep["top"] and rep["total_ms"] > 0
    assert abs(sum(t["pct"] for t in rep["top"]) - 100) < 1e-6
    assert rep["trace"] == str(trace) and cli["trace"] == ""
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e.get("cat") == "kernel" for e in events) == rep["events"]


def test_profile_inputs_top_and_train(model, spore_cli, tmp_path):
    np.save(tmp_path / "x.npy", samples(5))
    from_file = profile(model, inputs={"x": tmp_path / "x.npy"}, runs=1, warmup=0)
    from_array = profile(model, inputs={"x": samples(3)}, runs=1, warmup=0, top=1)
    assert from_file["batch"] == 5 and from_array["batch"] == 3
    assert len(from_array["top"]) == 1 and len(from_file["top"]) >= 2
    # A converted model's precision mode is read from the file, as the CLI does.
    convert(model, tmp_path / "f16.spore", precision_mode="allow_fp32_to_fp16")
    assert profile(tmp_path / "f16.spore", runs=1)["precision_mode"] == "allow_fp32_to_fp16"
    step = profile(model, train=True, batch=4, runs=1, warmup=0)
    cli = cli_json(spore_cli, "profile", model, "--train", "--batch", "4", "--iters", "1", "--warmup", "0",
                   "--no-trace")
    assert step["mode"] == "train" and step["kernels"] == cli["kernels"] > from_file["kernels"]
    assert step["weights_bytes"] == cli["weights_bytes"]


def test_convert_bad_arguments(model, digits, tmp_path):
    out = tmp_path / "bad.spore"
    for kwargs, exc, needle in [
        (dict(precision_mode="fp8"), ValueError, "unknown precision mode 'fp8'"),
        (dict(quantize="int8"), ValueError, "calibration data"),
        (dict(quantize="int4"), ValueError, "int4"),
        (dict(calib_method="best"), ValueError, "best"),
        (dict(mix_dtype="f8"), ValueError, "f8"),
        (dict(act_bits=4), ValueError, "act-bits"),
        (dict(optimize_level=7), ValueError, "optimize-level"),
        (dict(input_shape={"image": (1, 1, 8, 8)}), ValueError, "no input 'image'"),
        (dict(input_shape="x:1,a-b"), ValueError, "a-b"),
        (dict(eval_data="somewhere"), ValueError, "--eval-data"),
        (dict(quantize="int8", calib_data=str(tmp_path / "missing")), ValueError, "missing"),
        (dict(quantize="int8", calib_data=np.zeros((4, 3, 8, 8), np.float32)), ValueError, "model input 'x'"),
        (dict(calib_samples=0), ValueError, "calib_samples"),
        (dict(calib_samples="5"), TypeError, "calib_samples"),
        (dict(calib_data=123), TypeError, "calib_data"),
        (dict(calib_data=[[1.0]]), TypeError, "calib_data"),
        (dict(eval_data=np.zeros(3)), TypeError, "eval_data"),
        (dict(input_shape=5), TypeError, "input_shape"),
        (dict(input_shape={"x": 8}), TypeError, "input_shape"),
        (dict(input_scale="2"), TypeError, "input_scale"),
        (dict(quantize=None), TypeError, "quantize"),
    ]:
        with pytest.raises(exc) as e:
            convert(model, out, **kwargs)
        assert needle in str(e.value), (kwargs, str(e.value))
        assert not out.exists(), kwargs
    with pytest.raises(ValueError, match="must end in .spore or .onnx"):
        convert(model, tmp_path / "out.txt")
    with pytest.raises(spore.Error):
        convert(tmp_path / "nope.onnx", out)
    with pytest.raises(TypeError, match="model"):
        convert(None, out)


def test_profile_bad_arguments(model, tmp_path):
    for kwargs, exc, needle in [
        (dict(inputs={"nope": samples(1)}), ValueError, "no input 'nope'"),
        (dict(inputs={"x": np.zeros((2, 3, 8, 8), np.float32)}), ValueError, "dim 1 differs"),
        (dict(inputs={"x": np.zeros((2, 1, 8, 8), np.int32)}), TypeError, "i32"),
        (dict(inputs={"x": str(tmp_path / "missing.npy")}), spore.Error, "missing.npy"),
        (dict(inputs={"x": 5}), TypeError, "inputs['x']"),
        (dict(inputs=[samples(1)]), TypeError, "inputs"),
        (dict(runs=0), ValueError, "runs"),
        (dict(warmup=-1), ValueError, "warmup"),
        (dict(batch=0), ValueError, "batch"),
        (dict(batch=2, inputs={"x": samples(1)}), ValueError, "--batch"),
        (dict(top="3"), TypeError, "top"),
        (dict(opt_level=9), ValueError, "opt-level"),
        (dict(train=True, inputs={"x": samples(1)}), ValueError, "--train"),
        (dict(train="yes"), TypeError, "train"),
        (dict(input_shape={"x": ("b", 1, 9, 8)}), ValueError, "cannot become 9"),
    ]:
        with pytest.raises(exc) as e:
            profile(model, **{"runs": 1, "warmup": 0, **kwargs})
        assert needle in str(e.value), (kwargs, str(e.value))
    with pytest.raises(spore.Error):
        profile(tmp_path / "nope.onnx")
