#!/usr/bin/env python3
"""End-to-end tests of `spore serve` (label integration; `load` is label heavy).

usage: serve_test.py SPORE MODE [--client-dir DIR]
  openai       the tiny GGUF behind the official openai npm client (client/openai_client_test.mjs; `npm ci` into
               DIR first), raw HTTP for what a client library cannot send (malformed JSON, oversized and chunked
               bodies, slow and vanishing clients), the access log, /metrics, and a graceful SIGTERM mid-stream
  kserve       a small ONNX model (written here with python3-onnx) over KServe v2: metadata, JSON and binary tensors,
               bad tensors (400 naming the tensor), concurrent requests equal to single ones
  determinism  16 identical greedy prompts one at a time, then concurrently mixed with other prompts: same tokens
  lora         the shipped LM (data/lm) with a LoRA adapter tuned here (`spore finetune` on the README's text, 8
               steps): --lora's greedy completion equals `spore generate --lora`'s and differs from the base's;
               --lora-scale 0 serves the base; a wrong adapter path fails at start with one line
  load         2,000 requests from 16 clients, then 200 at once against a small --max-queue: every answer complete or
               503 + Retry-After, no other 5xx, no crash, RSS after within a bound of RSS before
The LLM modes SKIP (exit 77) without ../shared/data/gguf-models/llama-2-tiny-random.gguf, and FAIL under CI=true.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TINY = os.path.join(REPO, "..", "shared", "data", "gguf-models", "llama-2-tiny-random.gguf")
SKIP = 77


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def need_tiny():
    if os.path.exists(TINY):
        return os.path.abspath(TINY)
    if os.environ.get("CI") == "true":
        fail(f"shared data missing under CI=true: {TINY}")
    print(f"SKIPPED: {TINY} not found")
    sys.exit(SKIP)


class Server:
    """`spore serve ... --port 0`: reads the port from the first stdout line, waits for /health 200."""

    def __init__(self, spore, args, tmp, name="server", ready_timeout=180):
        self.log_path = os.path.join(tmp, f"{name}.stderr")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([spore, "serve", *args, "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on http://([^:]+):(\d+)$", line.strip())
        if not m:
            self.proc.kill()
            fail(f"{name}: expected 'listening on http://HOST:PORT', got {line!r}; stderr:\n{self.stderr()}")
        self.host, self.port = m.group(1), int(m.group(2))
        deadline = time.time() + ready_timeout
        saw_503 = False
        while True:
            check(self.proc.poll() is None, f"{name} exited ({self.proc.returncode}) while loading:\n{self.stderr()}")
            try:
                st, _, _ = self.request("GET", "/health")
                if st == 200:
                    break
                check(st == 503, f"/health answered {st} while loading")
                saw_503 = True
            except OSError:
                pass
            check(time.time() < deadline, f"{name} not ready after {ready_timeout} s:\n{self.stderr()}")
            time.sleep(0.05)
        self.saw_loading = saw_503

    def stderr(self):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def access_lines(self):
        out = []
        for line in self.stderr().splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    fail(f"access log line is not JSON: {line!r}")
        return out

    def connect(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = self.connect(timeout)
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, data

    def json(self, method, path, body=None, headers=None):
        st, h, data = self.request(method, path, body, headers)
        try:
            return st, h, json.loads(data)
        except ValueError:
            fail(f"{method} {path}: {st} with a body that is not JSON: {data[:200]!r}")

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                fail(f"server did not exit {timeout} s after {sig!r}:\n{self.stderr()[-3000:]}")
        return self.proc.returncode


def error_of(data):
    j = json.loads(data)
    check("error" in j, f"no error envelope in {data[:200]!r}")
    return j["error"]


def chat_body(content="Hello there", **kw):
    b = {"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": 8, "temperature": 0}
    b.update(kw)
    return b


# ---- openai ---------------------------------------------------------------------------------------------------------

def run_node_client(client_dir, env):
    node = shutil.which("node")
    check(node is not None, "node is not installed")
    r = subprocess.run([node, os.path.join(client_dir, "openai_client_test.mjs")], env={**os.environ, **env},
                       capture_output=True, text=True, timeout=300)
    print(r.stdout, end="")
    check(r.returncode == 0, f"openai client checks failed:\n{r.stdout}\n{r.stderr}")


def raw_http_checks(s, key):
    auth = {"Authorization": f"Bearer {key}"}
    # Malformed JSON: 400 (never 500, which clients would retry), OpenAI's envelope.
    st, h, data = s.request("POST", "/v1/chat/completions", '{"model": "tiny", "messages": [', {**auth, "Content-Type": "application/json"})
    check(st == 400, f"malformed JSON: {st}")
    e = error_of(data)
    check(e["type"] == "invalid_request_error" and "not valid JSON" in e["message"], f"malformed JSON: {e}")
    # A field of the wrong type names its JSON path.
    st, _, data = s.request("POST", "/v1/chat/completions", chat_body(temperature="warm"), auth)
    check(st == 400 and error_of(data)["param"] == "temperature", f"bad field: {st} {data[:200]!r}")
    # A prompt longer than the context.
    st, _, data = s.request("POST", "/v1/completions", {"model": "tiny", "prompt": [5] * 5000}, auth)
    check(st == 400 and error_of(data)["code"] == "context_length_exceeded", f"context overflow: {st} {data[:200]!r}")
    # Oversized bodies: with Content-Length, and chunked without one.
    big = json.dumps({"model": "tiny", "prompt": "x" * 300000})
    st, h, data = s.request("POST", "/v1/completions", big, {**auth, "Content-Type": "application/json"})
    check(st == 413 and error_of(data)["code"] == "request_too_large", f"oversized body: {st}")
    c = s.connect()
    c.putrequest("POST", "/v1/completions")
    c.putheader("Transfer-Encoding", "chunked")
    c.putheader("Content-Type", "application/json")
    c.putheader("Authorization", f"Bearer {key}")
    c.endheaders()
    try:
        for _ in range(40):
            chunk = b"x" * 16384
            c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        c.send(b"0\r\n\r\n")
    except OSError:
        pass  # the server may close before the whole body is sent
    r = c.getresponse()
    check(r.status == 413, f"oversized chunked body: {r.status}")
    c.close()
    # Routes and methods.
    st, h, data = s.request("GET", "/v1/chat/completions", headers=auth)
    check(st == 405 and h.get("allow") == "POST", f"GET on a POST route: {st} {h}")
    st, _, data = s.request("GET", "/v1/nothing", headers=auth)
    check(st == 404 and "error" in json.loads(data), f"unknown route: {st}")
    st, h, data = s.request("GET", "/v1/models")
    check(st == 401 and h.get("www-authenticate") == "Bearer", f"no key: {st}")
    check(s.request("GET", "/health")[0] == 200, "/health needs no key")
    # Responses flow while another client reads its stream slowly.
    slow = s.connect()
    slow.request("POST", "/v1/chat/completions", json.dumps(chat_body(max_tokens=200, ignore_eos=True, stream=True)),
                 {**auth, "Content-Type": "application/json"})
    slow_resp = slow.getresponse()
    check(slow_resp.status == 200, f"slow client: {slow_resp.status}")
    slow_resp.read(10)
    for _ in range(3):
        st, _, _ = s.request("POST", "/v1/chat/completions", chat_body(max_tokens=4), auth)
        check(st == 200, f"request beside a slow client: {st}")
    rest = b""
    while True:
        piece = slow_resp.read(64)
        if not piece:
            break
        rest += piece
        time.sleep(0.002)
    check(rest.endswith(b"data: [DONE]\n\n"), f"slow client's stream did not end with [DONE]: {rest[-80:]!r}")
    slow.close()
    # A client that vanishes mid-stream (closes the socket): the server goes on serving others.
    for _ in range(3):
        v = socket.create_connection((s.host, s.port))
        body = json.dumps(chat_body(max_tokens=2000, ignore_eos=True, stream=True)).encode()
        v.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        v.recv(256)
        v.close()
    st, _, _ = s.request("POST", "/v1/chat/completions", chat_body(max_tokens=4), auth)
    check(st == 200, f"after vanished clients: {st}")
    # /metrics: Prometheus text with the model label.
    st, h, data = s.request("GET", "/metrics", headers=auth)
    text = data.decode()
    check(st == 200 and h.get("content-type", "").startswith("text/plain"), f"/metrics: {st} {h}")
    for name in ["spore:num_requests_running{model=\"tiny\"}", "spore:num_requests_waiting{model=\"tiny\"}",
                 "spore:kv_cache_usage_perc{model=\"tiny\"}", "spore:prompt_tokens_total{model=\"tiny\"}",
                 "spore:generation_tokens_total{model=\"tiny\"}", "spore:time_to_first_token_seconds_bucket",
                 "spore:inter_token_latency_seconds_bucket", "spore:e2e_request_latency_seconds_count{model=\"tiny\"}",
                 "spore:request_queue_time_seconds_bucket", "spore:request_success_total{model=\"tiny\",finished_reason=\"length\"}",
                 "spore:request_success_total{model=\"tiny\",finished_reason=\"cancelled\"}",
                 "spore:prefix_cache_queries_total{model=\"tiny\"}", "spore:batch_size_bucket{model=\"tiny\",le=\"+Inf\"}"]:
        check(name in text, f"/metrics lacks {name}")
    print("ok - raw HTTP: malformed JSON, bad field, context, 413 (both), 405, 404, 401, slow and vanishing clients, /metrics")


def sigterm_mid_stream(s, key):
    """SIGTERM while a stream is in flight: new requests get 503 (or find the socket closed), the stream still ends
    with [DONE], exit 0."""
    c = s.connect()
    c.request("POST", "/v1/chat/completions", json.dumps(chat_body(max_tokens=400, ignore_eos=True, stream=True)),
              {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    r = c.getresponse()
    check(r.status == 200, f"stream before SIGTERM: {r.status}")
    r.read(20)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    try:
        st, h, _ = s.request("POST", "/v1/chat/completions", chat_body(max_tokens=2), {"Authorization": f"Bearer {key}"})
        check(st == 503 and h.get("retry-after"), f"a request while draining: {st} {h}")
    except OSError:
        pass  # the stream ended already and the socket is closed
    rest = r.read()
    check(rest.endswith(b"data: [DONE]\n\n"), f"in-flight stream cut by SIGTERM: {rest[-100:]!r}")
    code = s.stop()
    check(code == 0, f"exit status after SIGTERM: {code}")
    check("shutting down" in s.stderr(), "no shutdown line on stderr")
    print("ok - SIGTERM: the in-flight stream finished, exit 0")


def mode_openai(spore, client_dir):
    tiny = need_tiny()
    check(client_dir is not None and os.path.isdir(os.path.join(client_dir, "node_modules", "openai")),
          f"npm ci did not run in {client_dir}")
    key = "test-key-123"
    with tempfile.TemporaryDirectory() as tmp:
        # One model, named "tiny" (the file's stem would be llama-2-tiny-random).
        s = Server(spore, ["--model", f"tiny={tiny}", "--api-key", key, "--parallel", "4", "--ctx", "512",
                           "--max-body", "100000", "--threads", "1"], tmp)
        busy = Server(spore, ["--model", f"tiny={tiny}", "--parallel", "1", "--max-queue", "1", "--ctx", "2048",
                              "--threads", "1", "--no-access-log"], tmp, name="busy")
        try:
            run_node_client(client_dir, {"BASE_URL": f"http://{s.host}:{s.port}/v1", "API_KEY": key, "MODEL": "tiny",
                                         "BUSY_URL": f"http://{busy.host}:{busy.port}/v1"})
            raw_http_checks(s, key)
            lines = s.access_lines()
            check(len(lines) > 20, f"{len(lines)} access-log lines")
            chat = [l for l in lines if l.get("route") == "/v1/chat/completions" and l.get("status") == 200]
            check(chat, "no access-log line for a chat completion")
            for k in ["ts", "id", "model", "status", "prompt_tokens", "completion_tokens", "queue_ms", "ttft_ms", "total_ms"]:
                check(k in chat[0], f"access-log line lacks {k}: {chat[0]}")
            check(any(l.get("status") == 400 for l in lines), "no access-log line for a 400")
            check(any(l.get("error") == "client disconnected" for l in lines), "no access-log line for a client that left")
            print("ok - access log: one JSON line per request")
            sigterm_mid_stream(s, key)
        finally:
            s.stop(signal.SIGKILL)
            busy.stop()


# ---- kserve ---------------------------------------------------------------------------------------------------------

def write_mlp_onnx(path):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((16, 32)).astype(np.float32)
    b1 = rng.standard_normal(32).astype(np.float32)
    w2 = rng.standard_normal((32, 5)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                           numpy_helper.from_array(w2, "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return w1, b1, w2


def mode_kserve(spore):
    import numpy as np
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mlp.onnx")
        w1, b1, w2 = write_mlp_onnx(path)
        s = Server(spore, ["--model", f"mlp={path}", "--threads", "1", "--batching", "auto", "--max-batch", "4"], tmp)
        try:
            st, _, md = s.json("GET", "/v2/models/mlp")
            check(st == 200, f"metadata: {st}")
            check(md["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 16]}], f"inputs: {md['inputs']}")
            check(md["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 5]}], f"outputs: {md['outputs']}")
            check(s.request("GET", "/v2/models/mlp/ready")[0] == 200, "not ready")
            check(s.request("GET", "/v2/health/ready")[0] == 200, "/v2/health/ready")
            check(s.json("GET", "/v2")[2]["extensions"] == ["binary_tensor_data"], "/v2 server metadata")
            x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
            want = np.maximum(x @ w1 + b1, 0) @ w2
            st, _, out = s.json("POST", "/v2/models/mlp/infer",
                                {"id": "a", "inputs": [{"name": "x", "shape": [3, 16], "datatype": "FP32",
                                                        "data": x.tolist()}]})
            check(st == 200, f"infer: {st} {out}")
            y = np.array(out["outputs"][0]["data"], dtype=np.float32).reshape(out["outputs"][0]["shape"])
            check(out["id"] == "a" and y.shape == (3, 5), f"infer answer: {out}")
            check(np.allclose(y, want, rtol=1e-4, atol=1e-4), f"infer values: {y} vs {want}")
            # Binary in, binary out: the same floats.
            head = json.dumps({"inputs": [{"name": "x", "shape": [3, 16], "datatype": "FP32",
                                           "parameters": {"binary_data_size": x.nbytes}}],
                               "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()
            st, h, data = s.request("POST", "/v2/models/mlp/infer", head + x.tobytes(),
                                    {"Inference-Header-Content-Length": str(len(head)),
                                     "Content-Type": "application/octet-stream"})
            check(st == 200, f"binary infer: {st} {data[:200]!r}")
            hl = int(h["inference-header-content-length"])
            bh = json.loads(data[:hl])
            yb = np.frombuffer(data[hl:], dtype=np.float32).reshape(bh["outputs"][0]["shape"])
            check(np.array_equal(yb, y), "binary output differs from JSON output")
            # Bad tensors: 400 naming the tensor, KServe's {"error": "..."}.
            for body, needle in [
                ({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 15}]}, "input 'x'"),
                ({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "INT64", "data": [1] * 16}]}, "datatype INT64"),
                ({"inputs": [{"name": "x", "shape": [1, 15], "datatype": "FP32", "data": [1.0] * 15}]}, "dim 1 is 15"),
                ({"inputs": [{"name": "z", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}]}, "no input 'z'"),
                ({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": ["a"] * 16}]}, "expected a number"),
                ({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}],
                  "outputs": [{"name": "nope"}]}, "no output 'nope'"),
            ]:
                st, _, data = s.request("POST", "/v2/models/mlp/infer", body)
                err = json.loads(data).get("error")
                check(st == 400 and isinstance(err, str) and needle in err, f"bad tensor {needle!r}: {st} {data[:300]!r}")
            st, _, data = s.request("POST", "/v2/models/mlp/infer", b"{not json", {"Content-Type": "application/json"})
            check(st == 400, f"malformed infer body: {st}")
            st, _, data = s.request("POST", "/v2/models/mlp/infer", head + x.tobytes()[:-4],
                                    {"Inference-Header-Content-Length": str(len(head))})
            check(st == 400 and "binary" in json.loads(data)["error"], f"short binary body: {st} {data[:200]!r}")
            check(s.request("POST", "/v2/models/other/infer", {"inputs": []})[0] == 404, "unknown model")
            # Concurrent single-row requests (merged when the warm-up proved it safe) equal the same rows alone.
            rows = np.random.default_rng(2).standard_normal((24, 16)).astype(np.float32)
            alone = []
            for r in rows:
                _, _, o = s.json("POST", "/v2/models/mlp/infer",
                                 {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": r.tolist()}]})
                alone.append(o["outputs"][0]["data"])
            together = [None] * len(rows)

            def one(i):
                _, _, o = s.json("POST", "/v2/models/mlp/infer",
                                 {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": rows[i].tolist()}]})
                together[i] = o["outputs"][0]["data"]
            ts = [threading.Thread(target=one, args=(i,)) for i in range(len(rows))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            check(together == alone, "concurrent requests got different outputs than the same requests alone")
            text = s.request("GET", "/metrics")[2].decode()
            check('spore:infer_requests_total{model="mlp"}' in text, "no KServe metrics")
            note = [l for l in s.stderr().splitlines() if "dynamic batching" in l]
            print(f"ok - KServe metadata, JSON and binary tensors, bad tensors, concurrency ({note[0] if note else ''})")
        finally:
            check(s.stop() == 0, "exit status after SIGTERM")


# ---- determinism ----------------------------------------------------------------------------------------------------

def mode_determinism(spore):
    tiny = need_tiny()
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(spore, ["--model", f"tiny={tiny}", "--parallel", "4", "--ctx", "512", "--threads", "2",
                           "--no-access-log"], tmp)
        try:
            # Long enough for several 16-token prefix-cache blocks: the first run is a miss, the later ones hits.
            prompt = ("The quick brown fox jumps over the lazy dog because the dog was asleep in the warm afternoon "
                      "sun, and the fox, who had been watching the farm for days, finally saw its chance to")

            def tokens(p, n=24, **kw):
                st, _, j = s.json("POST", "/v1/completions", {"model": "tiny", "prompt": p, "max_tokens": n,
                                                              "temperature": 0, "ignore_eos": True, "logprobs": 0, **kw})
                check(st == 200, f"completion: {st} {j}")
                return j["choices"][0]["logprobs"]["tokens"], j["choices"][0]["text"]

            alone = [tokens(prompt) for _ in range(16)]
            check(all(a == alone[0] for a in alone), "the same greedy prompt gave different tokens one at a time")
            others = ["In a hole in the ground there lived", "It was the best of times,", "Call me Ishmael.",
                      prompt[:120] + " and then the story changed"]  # shares a prefix: a prefix-cache hit
            results = [None] * 32

            def worker(i):
                if i % 2 == 0:
                    results[i] = tokens(prompt)
                else:
                    results[i] = tokens(others[(i // 2) % len(others)], n=16 + i % 7)
            ts = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            same = [results[i] for i in range(0, 32, 2)]
            check(len(same) == 16 and all(r == alone[0] for r in same),
                  "greedy tokens changed when the request shared the batch with others")
            # A seeded sampled request is reproducible too, alone and in company.
            seeded = {"model": "tiny", "prompt": prompt, "max_tokens": 16, "temperature": 0.8, "seed": 99, "ignore_eos": True}
            a = s.json("POST", "/v1/completions", seeded)[2]["choices"][0]["text"]
            out = [None] * 8

            def sampled(i):
                out[i] = s.json("POST", "/v1/completions", seeded if i % 2 == 0 else
                                {**seeded, "prompt": others[i % 4], "seed": i})[2]["choices"][0]["text"]
            ts = [threading.Thread(target=sampled, args=(i,)) for i in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            check(all(out[i] == a for i in range(0, 8, 2)), "a seeded request changed in company")
            text = s.request("GET", "/metrics")[2].decode()
            hits = re.search(r'spore:prefix_cache_hits_total\{model="tiny"\} (\d+)', text)
            check(hits and int(hits.group(1)) > 0, "no prefix-cache hit happened: the test would not cover hits")
            print("ok - 16 greedy requests alone and 16 mixed with other prompts (and prefix-cache hits) gave identical "
                  "tokens; seeded sampling likewise")
        finally:
            check(s.stop() == 0, "exit status after SIGTERM")


# ---- load -----------------------------------------------------------------------------------------------------------

def mode_load(spore):
    tiny = need_tiny()
    total, clients, burst = 2000, 16, 200
    rss_bound_kb = 32 * 1024  # measured: +3 MiB (malloc arenas of the HTTP threads that first ran)
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(spore, ["--model", f"tiny={tiny}", "--parallel", "4", "--ctx", "256", "--max-queue", "8",
                           "--threads", "2", "--no-access-log", "--http-threads", "64"], tmp)
        try:
            statuses = {}
            problems = []
            lock = threading.Lock()

            def one(conn, i):
                body = json.dumps({"model": "tiny", "prompt": f"request {i % 37} says", "max_tokens": 4 + i % 5,
                                   "temperature": 0}) if i % 3 else json.dumps(
                    {"model": "tiny", "messages": [{"role": "user", "content": f"hi {i % 11}"}], "max_tokens": 4,
                     "stream": i % 2 == 0})
                path = "/v1/completions" if i % 3 else "/v1/chat/completions"
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                with lock:
                    statuses[r.status] = statuses.get(r.status, 0) + 1
                    if r.status == 200:
                        if b"text/event-stream" in (r.getheader("Content-Type") or "").encode():
                            if not data.endswith(b"data: [DONE]\n\n"):
                                problems.append(f"{i}: incomplete stream")
                        else:
                            j = json.loads(data)
                            if j["choices"][0]["finish_reason"] not in ("stop", "length"):
                                problems.append(f"{i}: finish {j['choices'][0]['finish_reason']}")
                    elif r.status == 503:
                        if not r.getheader("Retry-After"):
                            problems.append(f"{i}: 503 without Retry-After")
                    else:
                        problems.append(f"{i}: status {r.status} {data[:200]!r}")

            def client(k, n):
                conn = s.connect(120)
                for j in range(n):
                    try:
                        one(conn, k * 100000 + j)
                    except (OSError, http.client.HTTPException) as e:
                        conn.close()
                        conn = s.connect(120)
                        with lock:
                            problems.append(f"client {k}: {e!r}")
                conn.close()

            # Warm the process up (allocator pools, plan caches) before measuring the RSS baseline.
            client(99, 40)
            statuses.clear()
            rss_before = s.rss_kb()
            t0 = time.time()
            ts = [threading.Thread(target=client, args=(k, total // clients)) for k in range(clients)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            steady = dict(statuses)
            statuses.clear()
            ts = [threading.Thread(target=client, args=(1000 + k, 1)) for k in range(burst)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            elapsed = time.time() - t0
            time.sleep(1)
            rss_after = s.rss_kb()
            check(s.proc.poll() is None, "the server died under load")
            print(f"steady: {steady}; burst of {burst}: {statuses}; {elapsed:.1f} s; RSS {rss_before} kB -> {rss_after} kB")
            check(not problems, f"{len(problems)} problems, first: {problems[:5]}")
            check(sum(steady.values()) == total - total % clients and sum(statuses.values()) == burst, "lost requests")
            check(statuses.get(503, 0) > 0, "the burst against --max-queue 8 was never refused (503)")
            check(rss_after - rss_before < rss_bound_kb,
                  f"RSS grew by {rss_after - rss_before} kB (bound {rss_bound_kb} kB)")
            check(s.request("GET", "/health")[0] == 200, "/health after the load")
            print("ok - load: every request answered completely or 503 + Retry-After, no other status, RSS stable")
        finally:
            check(s.stop() == 0, "exit status after SIGTERM")


# ---- lora -----------------------------------------------------------------------------------------------------------

def mode_lora(spore):
    base = os.path.join(REPO, "data", "lm", "shakespeare.gguf")
    check(os.path.exists(base), f"{base} is missing (the repository ships it)")
    with tempfile.TemporaryDirectory() as tmp:
        adapter = os.path.join(tmp, "adapter")
        r = subprocess.run([spore, "finetune", base, "--data", os.path.join(REPO, "README.md"), "--lora-r", "4",
                            "--lora-alpha", "16", "--lora-targets", "all-linear", "--steps", "8", "--lr", "1e-2",
                            "--batch", "4", "--ctx", "64", "--eval-batches", "1", "--json", "-o", adapter],
                           capture_output=True, text=True, timeout=240)
        check(r.returncode == 0, f"spore finetune failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        prompt, n = "The model", 24

        def generate(*extra):
            g = subprocess.run([spore, "generate", base, "-p", prompt, "-n", str(n), "--temp", "0", "--json", *extra],
                               capture_output=True, text=True, timeout=120)
            check(g.returncode == 0, f"spore generate {extra} failed:\n{g.stderr[-2000:]}")
            return json.loads(g.stdout)["text"]

        want, plain = generate("--lora", adapter), generate()
        check(want != plain, "the adapter does not change greedy text: the check would mean nothing")
        for scale, expect in (("1", want), ("0", plain)):
            s = Server(spore, [base, "--lora", os.path.join(adapter, "adapter.gguf"), "--lora-scale", scale,
                               "--parallel", "1"], tmp, name=f"lora{scale}")
            try:
                st, _, models = s.json("GET", "/v1/models")
                check(st == 200, f"/v1/models: {st}")
                name = models["data"][0]["id"]
                st, _, body = s.json("POST", "/v1/completions", {"model": name, "prompt": prompt, "max_tokens": n,
                                                                 "temperature": 0})
                check(st == 200, f"/v1/completions: {st} {body}")
                got = body["choices"][0]["text"]
                check(got == expect, f"--lora-scale {scale}: served {got!r}, spore generate gave {expect!r}")
                print(f"--lora-scale {scale}: {got!r} (as spore generate)")
            finally:
                s.stop()
        bad = subprocess.run([spore, "serve", base, "--lora", os.path.join(tmp, "missing"), "--port", "0"],
                             capture_output=True, text=True, timeout=60)
        errors = [l for l in bad.stderr.splitlines() if "error" in l]
        check(bad.returncode != 0 and len(errors) == 1 and "missing' does not exist" in errors[0],
              f"a missing adapter should fail with one error naming it: rc {bad.returncode}, {bad.stderr[-500:]!r}")
    print("PASS")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    spore, mode = sys.argv[1], sys.argv[2]
    client_dir = None
    if "--client-dir" in sys.argv:
        client_dir = sys.argv[sys.argv.index("--client-dir") + 1]
    if mode == "openai":
        mode_openai(spore, client_dir)
    elif mode == "kserve":
        mode_kserve(spore)
    elif mode == "determinism":
        mode_determinism(spore)
    elif mode == "load":
        mode_load(spore)
    elif mode == "lora":
        mode_lora(spore)
    else:
        fail(f"unknown mode {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
