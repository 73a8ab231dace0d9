#!/usr/bin/python3
"""spore serve vs llama-server on the same GGUF, same run: aggregate generated tokens/s, TTFT and inter-token
latency (p50/p99) at several client counts, through each server's OpenAI /v1/completions endpoint with streaming.

  bench/peers/serve_vs_llamacpp.py MODEL.gguf [--clients 1,4,16] [--parallel 4] [--threads 2] [--requests 3]
      [--max-tokens 32] [--prompt-words 60] [--repeats N] [--json FILE]

Both servers run with the same threads (--threads, also llama-server's --threads-batch), the same number of
sequence slots (spore --parallel = llama-server -np), the same context per slot, greedy decoding and ignore_eos
(every request generates exactly --max-tokens tokens), warm-up requests before timing, and nothing else running.
Clients are closed loops (each sends its next request when the previous one ends) over real text: prompts are
consecutive windows of tinyshakespeare ($SPORE_SHARED_DATA/text-corpus), different for every request, identical
between the two servers. TTFT is the time from sending the request to the first streamed token; ITL the gaps
between streamed tokens. Needs llama-server: bash bench/peers/llama/build.sh builds it (LLAMA_SERVER=1).
Standard library only.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, path, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            if r.status == 200:
                return time.time() - t0
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server on port {port} not ready after {timeout} s")


def start_spore(model, a, port):
    exe = a.spore
    cmd = [exe, "serve", model, "--host", "127.0.0.1", "--port", str(port), "--parallel", str(a.parallel),
           "--threads", str(a.threads), "--ctx", str(a.ctx), "--max-queue", "4096"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), cmd


def start_llama(model, a, port):
    exe = os.path.join(HERE, "llama", "build", "bin", "llama-server")
    if not os.path.exists(exe):
        sys.exit(f"{exe} is missing: LLAMA_SERVER=1 bash bench/peers/llama/build.sh")
    cmd = [exe, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", str(a.parallel), "-t", str(a.threads),
           "-tb", str(a.threads), "-c", str(a.ctx * a.parallel), "--no-warmup", "-fa", "off", "--log-disable"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), cmd


def model_id(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/v1/models")
    return json.loads(c.getresponse().read())["data"][0]["id"]


MODEL = {}


def one_request(port, prompt, max_tokens):
    """Streams one completion; returns (ttft_s, [gaps_s], tokens)."""
    body = json.dumps({"model": MODEL[port], "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True, "n_predict": max_tokens})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    first, last, gaps, tokens = None, None, [], 0
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        ev = json.loads(data)
        ch = ev.get("choices") or []
        if not ch or not ch[0].get("text"):
            continue
        now = time.perf_counter()
        tokens += 1
        if first is None:
            first = now - t0
        else:
            gaps.append(now - last)
        last = now
    c.close()
    return first if first is not None else time.perf_counter() - t0, gaps, tokens


def run_load(port, prompts, clients, requests, max_tokens):
    lock = threading.Lock()
    ttft, itl, tokens, errors = [], [], [0], []
    counter = [0]

    def client():
        for _ in range(requests):
            with lock:
                p = prompts[counter[0] % len(prompts)]
                counter[0] += 1
            try:
                t, g, n = one_request(port, p, max_tokens)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                ttft.append(t)
                itl.extend(g)
                tokens[0] += n

    t0 = time.perf_counter()
    th = [threading.Thread(target=client) for _ in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    q = lambda v, p: sorted(v)[min(len(v) - 1, int(p / 100 * (len(v) - 1) + 0.5))] * 1e3 if v else float("nan")
    return {"clients": clients, "tok_s": tokens[0] / wall, "ttft_p50_ms": q(ttft, 50), "ttft_p99_ms": q(ttft, 99),
            "itl_p50_ms": q(itl, 50), "itl_p99_ms": q(itl, 99), "requests": len(ttft), "errors": errors[:3]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=3, help="per client")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt-words", type=int, default=60)
    ap.add_argument("--ctx", type=int, default=512, help="context per slot")
    ap.add_argument("--only", choices=["spore", "llama"], help="run one server")
    ap.add_argument("--spore", default=os.path.join(ROOT, "build", "spore"), help="the spore binary")
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds, the servers alternating (spore, llama-server, spore, ...); medians are reported")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    data = os.environ.get("SPORE_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
    words = open(os.path.join(data, "text-corpus", "tinyshakespeare.txt"), encoding="utf-8").read().split()
    n = a.prompt_words
    prompts = [" ".join(words[i:i + n]) for i in range(0, 400 * n, n)]
    clients = [int(x) for x in a.clients.split(",")]
    results = {}
    rounds = [(name, start) for _ in range(a.repeats) for name, start in (("spore", start_spore), ("llama-server", start_llama))]
    for name, start in rounds:
        if a.only and not name.startswith(a.only):
            continue
        port = free_port()
        proc, cmd = start(a.model, a, port)
        try:
            ready_s = wait_ready(port, "/health")
            MODEL[port] = model_id(port)
            # warm-up: one request per slot, then one alone
            run_load(port, prompts[-8:], a.parallel, 1, 8)
            rows = []
            used = 0  # each client count gets prompts not sent before (no prefix-cache hits between levels)
            for c in clients:
                r = run_load(port, prompts[used:], c, a.requests, a.max_tokens)
                used += c * a.requests
                rows.append(r)
                print(f"{name:12s} clients {c:3d}: {r['tok_s']:7.1f} tok/s  TTFT p50 {r['ttft_p50_ms']:8.1f} "
                      f"p99 {r['ttft_p99_ms']:8.1f} ms  ITL p50 {r['itl_p50_ms']:7.2f} p99 {r['itl_p99_ms']:7.2f} ms"
                      f"  ({r['requests']} requests{', errors: ' + str(r['errors']) if r['errors'] else ''})",
                      flush=True)
            results.setdefault(name, {"cmd": " ".join(cmd), "ready_s": [], "rounds": []})
            results[name]["ready_s"].append(ready_s)
            results[name]["rounds"].append(rows)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    # Per server and client count, the median of each figure over the rounds.
    for res in results.values():
        res["rows"] = [{k: (statistics.median(r[i][k] for r in res["rounds"]) if isinstance(v, float) else v)
                        for k, v in res["rounds"][0][i].items()} for i in range(len(clients))]
    if a.repeats > 1:
        for name, res in results.items():
            for r in res["rows"]:
                print(f"{name:12s} clients {r['clients']:3d}, median of {a.repeats}: {r['tok_s']:7.1f} tok/s  TTFT p50 "
                      f"{r['ttft_p50_ms']:8.1f} p99 {r['ttft_p99_ms']:8.1f} ms  ITL p50 {r['itl_p50_ms']:7.2f} p99 "
                      f"{r['itl_p99_ms']:7.2f} ms")
    if "spore" in results and "llama-server" in results:
        for rs, rl in zip(results["spore"]["rows"], results["llama-server"]["rows"]):
            print(f"clients {rs['clients']:3d}: spore/llama-server throughput {rs['tok_s'] / rl['tok_s']:.2f}x, "
                  f"TTFT p99 {rs['ttft_p99_ms']:.0f} vs {rl['ttft_p99_ms']:.0f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "parallel": a.parallel, "threads": a.threads, "max_tokens": a.max_tokens,
                       "prompt_words": a.prompt_words, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
