#!/usr/bin/env python3
"""End-to-end checks of `spore profile` (and `spore graph --svg`), standard library only.

usage: profile_test.py SPORE

Writes a small classifier as text IR (weights inline as constants), profiles it for inference and as a
training step (--train), and the same model converted to .spore with a precision mode; validates the Chrome
trace schema (top-level {"traceEvents": [...]}, "X" complete events with name/cat/ph/ts/dur/pid/tid/args,
"M" events naming every thread), the --json contract (kernels equals the plan's kernel count as `spore bench`
reports it, pct sums to 100, ms sums to total_ms, the memory report adds up) and the text report. With
$SPORE_SHARED_DATA it also profiles the ONNX zoo mnist-8 (SKIP, exit 77, without it unless CI=true; the
model-independent checks run first).
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

SPORE = sys.argv[1]
B, D, H, C = 4, 12, 20, 10  # batch, features, hidden, classes: H and C not multiples of 8 (the simd hint)


def fail(msg, p=None):
    if p is not None:
        msg += f"\n--- rc={p.returncode}\n--- stdout:\n{p.stdout[-3000:]}\n--- stderr:\n{p.stderr[-3000:]}"
    sys.exit("FAIL: " + msg)


def spore(*args, env=None):
    return subprocess.run([SPORE, *args], capture_output=True, text=True, timeout=300, env=env)


def ok(*args):
    p = spore(*args)
    if p.returncode != 0:
        fail("spore " + " ".join(args), p)
    return p


def expect_error(args, *parts, env=None):
    p = spore(*args, env=env)
    lines = [s for s in p.stderr.strip().splitlines() if not s.startswith("Run with --help")]  # CLI11's usage line
    if p.returncode == 0 or len(lines) != 1 or not all(s in lines[0] for s in parts):
        fail(f"spore {' '.join(args)}: expected one error line containing {parts}", p)


def hex_f32(values):
    return "".join(struct.pack("<f", v).hex() for v in values)


def write_model(path):
    w1 = [math.sin(0.37 * i + 0.1) * 0.3 for i in range(D * H)]
    b1 = [0.01 * (i % 7) for i in range(H)]
    w2 = [math.cos(0.23 * i) * 0.3 for i in range(H * C)]
    text = f"""graph @classifier(%x: f32[batch,{D}]) {{
  %w1 = constant() : f32[{D},{H}] = hex"{hex_f32(w1)}"
  %b1 = constant() : f32[{H}] = hex"{hex_f32(b1)}"
  %w2 = constant() : f32[{H},{C}] = hex"{hex_f32(w2)}"
  %h0 = matmul(%x, %w1) : f32[batch,{H}] !name="fc1"
  %h1 = add(%h0, %b1) : f32[batch,{H}] !name="fc1/bias"
  %h2 = relu(%h1) : f32[batch,{H}] !name="act1"
  %logits = matmul(%h2, %w2) : f32[batch,{C}] !name="fc2"
  return %logits
}}
"""
    with open(path, "w") as f:
        f.write(text)


def check_trace(path, kernels_per_run, iters):
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        fail(f"{path}: top level must be {{\"traceEvents\": [...]}}")
    named, used, kernel_events, runs = set(), set(), [], []
    for ev in doc["traceEvents"]:
        ph = ev.get("ph")
        if ph == "M":
            for k in ("name", "pid", "tid", "args"):
                if k not in ev:
                    fail(f"{path}: metadata event without '{k}': {ev}")
            if ev["name"] == "thread_name":
                if not isinstance(ev["args"].get("name"), str) or not ev["args"]["name"]:
                    fail(f"{path}: thread_name without a name: {ev}")
                named.add((ev["pid"], ev["tid"]))
            continue
        if ph != "X":
            fail(f"{path}: unexpected event phase {ph!r}: {ev}")
        for k in ("name", "cat", "ph", "ts", "dur", "pid", "tid", "args"):
            if k not in ev:
                fail(f"{path}: complete event without '{k}': {ev}")
        if not isinstance(ev["ts"], (int, float)) or not isinstance(ev["dur"], (int, float)) or ev["dur"] < 0:
            fail(f"{path}: bad ts/dur: {ev}")
        if not isinstance(ev["pid"], int) or not isinstance(ev["tid"], int):
            fail(f"{path}: pid/tid must be integers: {ev}")
        used.add((ev["pid"], ev["tid"]))
        if ev["cat"] == "kernel":
            for k in ("node", "impl", "dtypes", "shapes", "bytes", "flops"):
                if k not in ev["args"]:
                    fail(f"{path}: kernel event args without '{k}': {ev}")
            kernel_events.append(ev)
        elif ev["cat"] == "run":
            runs.append(ev)
    if used - named:
        fail(f"{path}: tracks without a thread_name metadata event: {sorted(used - named)}")
    if len(kernel_events) != kernels_per_run * iters:
        fail(f"{path}: {len(kernel_events)} kernel events, expected {kernels_per_run} kernels x {iters} runs")
    if len(runs) != iters:
        fail(f"{path}: {len(runs)} run slices, expected {iters}")
    # Every kernel lies inside one run slice on the same track (Perfetto nests them).
    for ev in kernel_events:
        inside = [r for r in runs if r["tid"] == ev["tid"] and r["ts"] - 1e-3 <= ev["ts"] and
                  ev["ts"] + ev["dur"] <= r["ts"] + r["dur"] + 1e-3]
        if len(inside) != 1:
            fail(f"{path}: kernel event not inside exactly one run slice: {ev}")
    return kernel_events


def check_profile_json(j, kernels, iters, label):
    for k in ("kernels", "total_ms", "peak_bytes", "top", "memory", "hints", "nodes", "iters", "planned_peak_bytes",
              "weights_bytes", "arena_bytes", "mode"):
        if k not in j:
            fail(f"{label}: --json lacks '{k}': {sorted(j)}")
    if j["kernels"] != kernels:
        fail(f"{label}: kernels {j['kernels']} != the plan's {kernels} (spore bench)")
    if j["iters"] != iters or j["events"] != kernels * iters:
        fail(f"{label}: {j['events']} events for {iters} runs of {kernels} kernels")
    top = j["top"]
    for row in top:
        for k in ("op", "calls", "ms", "pct", "gbps", "gflops", "impl"):
            if k not in row:
                fail(f"{label}: top row without '{k}': {row}")
        if row["ms"] < 0 or row["gbps"] < 0 or row["gflops"] < 0 or not row["impl"]:
            fail(f"{label}: bad top row {row}")
    if abs(sum(r["pct"] for r in top) - 100) > 0.01:
        fail(f"{label}: pct sums to {sum(r['pct'] for r in top)}")
    if abs(sum(r["ms"] for r in top) - j["total_ms"]) > 1e-6 * max(1, j["total_ms"]):
        fail(f"{label}: top ms sum {sum(r['ms'] for r in top)} != total_ms {j['total_ms']}")
    if sum(r["calls"] for r in top) != kernels * iters:
        fail(f"{label}: calls sum to {sum(r['calls'] for r in top)}, expected {kernels * iters}")
    if [r["ms"] for r in top] != sorted((r["ms"] for r in top), reverse=True):
        fail(f"{label}: top is not sorted by time")
    if sum(n["calls"] for n in j["nodes"]) != kernels * iters:
        fail(f"{label}: node calls do not add up")
    m = j["memory"]
    if m["arena_bytes"] != j["arena_bytes"] or m["live_peak_bytes"] > m["planned_arena_bytes"]:
        fail(f"{label}: memory report inconsistent: {m}")
    if m["live_at_peak"]:
        if sum(b["bytes"] for b in m["live_at_peak"]) != m["live_peak_bytes"]:
            fail(f"{label}: the buffers live at the peak do not add up to live_peak_bytes: {m}")
        for b in m["live_at_peak"]:
            for k in ("value", "node", "op", "type", "bytes"):
                if k not in b:
                    fail(f"{label}: live buffer without '{k}': {b}")
        if m["peak_step"] < 0 or not m["peak_node"]:
            fail(f"{label}: no peak step/node: {m}")
    if j["peak_bytes"] <= 0:
        fail(f"{label}: measured peak_bytes {j['peak_bytes']}")
    for h in j["hints"]:
        if not h["nodes"] or not h["message"] or not h["kind"]:
            fail(f"{label}: a hint must name its nodes: {h}")


def main():
    tmp = tempfile.mkdtemp(prefix="spore_profile_")
    try:
        model = os.path.join(tmp, "classifier.ir")
        write_model(model)
        kernels = json.loads(ok("bench", model, "--batch", str(B), "--iters", "1", "--json").stdout)["kernels"]

        # Inference, --json.
        trace = os.path.join(tmp, "trace.json")
        iters = 5
        j = json.loads(ok("profile", model, "--batch", str(B), "--iters", str(iters), "--warmup", "1", "--trace", trace,
                          "--json").stdout)
        check_profile_json(j, kernels, iters, "inference")
        if j["mode"] != "inference" or j["batch"] != B:
            fail(f"inference: mode/batch {j['mode']}/{j['batch']}")
        if j["weights_bytes"] != 4 * (D * H + H + H * C):
            fail(f"inference: weights_bytes {j['weights_bytes']}, expected the three constants {4 * (D * H + H + H * C)}")
        events = check_trace(trace, kernels, iters)
        if not any(ev["args"]["node"] == "fc2" for ev in events):
            fail("trace: no kernel event names node 'fc2'")
        simd = [h for h in j["hints"] if h["kind"] == "simd_remainder"]
        print(f"inference: {kernels} kernels, {j['total_ms']:.3f} ms over {iters} runs, hints: "
              f"{[h['kind'] + ':' + ','.join(h['nodes']) for h in j['hints']]}")
        for h in simd:
            if not set(h["nodes"]) <= {"fc1", "fc2"}:
                fail(f"simd_remainder names a node that is not a matmul: {h}")

        # Text report.
        t = ok("profile", model, "--batch", str(B), "--iters", "3", "--top", "2", "--no-trace").stdout
        for part in ("kernels per run", "top 2 ops", "GFLOP/s", "GB/s", "impl", "memory: planned peak", "weights",
                     "hints"):
            if part not in t:
                fail(f"text report lacks '{part}':\n{t}")
        if "trace:" in t:
            fail(f"--no-trace still reports a trace file:\n{t}")

        # Training step: forward + loss + backward + SGD compiled into one plan.
        trace_train = os.path.join(tmp, "train.json")
        jt = json.loads(ok("profile", model, "--train", "--batch", str(B), "--iters", "3", "--trace", trace_train,
                           "--json").stdout)
        if jt["mode"] != "train" or jt["kernels"] <= kernels:
            fail(f"--train: {jt['kernels']} kernels in mode {jt['mode']} (inference has {kernels})")
        check_profile_json(jt, jt["kernels"], 3, "train")
        check_trace(trace_train, jt["kernels"], 3)
        ops = {r["op"] for r in jt["top"]}
        if "matmul" not in ops:
            fail(f"--train: unexpected ops {ops}")
        print(f"train: {jt['kernels']} kernels, ops {sorted(ops)}")

        # A .spore converted with a precision mode: the mode is read from its metadata.
        conv = os.path.join(tmp, "classifier_f16.spore")
        ok("convert", model, "-o", conv, "--precision-mode", "allow_fp32_to_fp16", "--input-shape", f"x:batch,{D}")
        jc = json.loads(ok("profile", conv, "--batch", str(B), "--iters", "2", "--no-trace", "--json").stdout)
        if jc["precision_mode"] != "allow_fp32_to_fp16":
            fail(f".spore: precision_mode {jc['precision_mode']!r}")
        kc = json.loads(ok("bench", conv, "--batch", str(B), "--iters", "1", "--json").stdout)["kernels"]
        check_profile_json(jc, kc, 2, "converted")
        f32_mm = [n["node"] for n in jc["nodes"] if n["op"] == "matmul" and n["dtypes"].startswith("f32")]
        flagged = {x for h in jc["hints"] if h["kind"] == "precision" for x in h["nodes"]}
        if f32_mm and not flagged:
            fail(f".spore in allow_fp32_to_fp16 runs f32 matmuls {f32_mm} without a precision hint")
        if j["precision_mode"] != "":
            fail("a text-IR model has no precision mode")

        # Errors: one line, non-zero exit.
        expect_error(["profile", os.path.join(tmp, "missing.ir")], "missing.ir")
        expect_error(["profile", model, "--batch", str(B), "--trace", os.path.join(tmp, "no", "such", "dir", "t.json")],
                     "trace file")
        scalar = os.path.join(tmp, "scalar.ir")
        with open(scalar, "w") as f:
            f.write("graph @s(%x: f32[4]) {\n  %y = relu(%x) : f32[4]\n  return %y\n}\n")
        expect_error(["profile", scalar, "--train", "--no-trace"], "--train", "logits")
        expect_error(["profile", scalar, "--batch", "2", "--no-trace"], "--batch 2", "symbolic")

        # spore graph --svg: renders with Graphviz when `dot` is in PATH, else says so in one line.
        empty_bin = os.path.join(tmp, "bin")
        os.mkdir(empty_bin)
        env = dict(os.environ, PATH=empty_bin)
        expect_error(["graph", model, "--svg"], "Graphviz", "dot", env=env)
        expect_error(["graph", model, "--svg", "--dot"], "excludes")
        if shutil.which("dot"):
            svg = ok("graph", model, "--svg").stdout
            if "<svg" not in svg or "fc2" not in svg:
                fail(f"graph --svg: not an SVG of the model:\n{svg[:500]}")
            out = os.path.join(tmp, "g.svg")
            ok("graph", model, "--svg", "-o", out)
            if "<svg" not in open(out).read():
                fail("graph --svg -o wrote no SVG")
            print("graph --svg: rendered with", shutil.which("dot"))
        else:
            print("graph --svg: no Graphviz here; checked the error only")

        # The ONNX zoo mnist-8 (conv C_in = 1: partly empty vectors).
        data = os.environ.get("SPORE_SHARED_DATA", "")
        onnx = os.path.join(data, "onnx-models", "mnist-8.onnx")
        if not data or not os.path.exists(onnx):
            if os.environ.get("CI") == "true":
                fail(f"shared data missing under CI=true: {onnx}")
            print("SKIP: no $SPORE_SHARED_DATA/onnx-models/mnist-8.onnx (the other checks passed)")
            sys.exit(77)
        km = json.loads(ok("bench", onnx, "--iters", "1", "--json").stdout)["kernels"]
        trace_m = os.path.join(tmp, "mnist.json")
        jm = json.loads(ok("profile", onnx, "--iters", "3", "--trace", trace_m, "--json").stdout)
        check_profile_json(jm, km, 3, "mnist-8")
        check_trace(trace_m, km, 3)
        jmt = json.loads(ok("profile", onnx, "--train", "--iters", "2", "--no-trace", "--json").stdout)
        check_profile_json(jmt, jmt["kernels"], 2, "mnist-8 --train")
        if jmt["kernels"] <= km:
            fail(f"mnist-8 --train: {jmt['kernels']} kernels, inference {km}")
        print(f"mnist-8: {km} kernels inference, {jmt['kernels']} train; hints "
              f"{[h['kind'] + ':' + ','.join(h['nodes']) for h in jm['hints']]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("OK")


main()
