#!/usr/bin/python3
"""spore's conv and GEMM kernels against ONNX Runtime's, layer by layer, on one model and input.

    /usr/bin/python3 bench/peers/layers_vs_ort.py MODEL.onnx --input x=FILE.npy [--threads 1] [--top 25]

Runs `spore profile MODEL --input ... --trace` and `ort_bench.js MODEL --input-npy ... --profile-out` (a profiled ORT
session, all graph optimizations), takes the median time of each kernel over the runs after warm-up, and pairs
spore's conv/linear/matmul calls with ORT's Conv/Gemm/MatMul nodes in execution order (both run the model's convs
in graph order; the script stops with an error when the counts differ). Prints the totals per spore implementation
(direct_nchw8c, depthwise_nchw8c, winograd_f2x2, onednn:...) against ORT's time on the same layers, then the layers
where spore loses most, with GFLOP/s of each. Both profilers add per-kernel overhead: compare layers, not totals
with `spore bench`. Cells with fewer threads than CPUs pin both engines to the last CPUs.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ORT_JS = os.path.join(HERE, "ort", "ort_bench.js")
SPORE_OPS = ("conv2d_fused", "conv2d", "linear", "matmul", "conv_transpose2d")
ORT_OPS = ("Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul", "ConvTranspose")


def per_run(events, key):
    """Median duration (us) of each position in a run's sequence of events, and the first run's events."""
    names = [key(e) for e in events]
    per = len(set(names))
    runs = len(events) // per if per else 0
    if runs < 2:
        sys.exit(f"layers_vs_ort: too few runs in a profile ({len(events)} events, {per} per run)")
    skip = 1 if runs > 3 else 0  # the first run after warm-up
    return [(statistics.median(events[r * per + i]["dur"] for r in range(skip, runs)), events[i]) for i in range(per)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--input", required=True, action="append", help="NAME=FILE.npy (repeatable: one per model input)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--spore", default=os.path.join(ROOT, "build", "spore"))
    a = p.parse_args()
    avail = sorted(os.sched_getaffinity(0))
    pin = ["taskset", "-c", ",".join(map(str, avail[-a.threads:]))] if a.threads < len(avail) else []
    d = tempfile.mkdtemp(prefix="layers_")
    st, ot = os.path.join(d, "spore.json"), os.path.join(d, "ort.json")
    subprocess.run(pin + [a.spore, "profile", a.model] + [v for x in a.input for v in ("--input", x)] +
                   ["--threads", str(a.threads), "--iters", str(a.iters), "--warmup", "3", "--trace", st], check=True,
                   capture_output=True)
    subprocess.run(pin + ["node", ORT_JS, a.model] + [v for x in a.input for v in ("--input-npy", x)] +
                   ["--threads", str(a.threads), "--warmup", "3", "--iters", str(a.iters), "--profile-out", ot],
                   check=True, capture_output=True)
    t = json.load(open(st))
    sev = [e for e in (t["traceEvents"] if isinstance(t, dict) else t)
           if e.get("ph") == "X" and e.get("name") in SPORE_OPS and "args" in e]
    oev = [e for e in json.load(open(ot)) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
           and e.get("args", {}).get("op_name") in ORT_OPS]
    oev = oev[3 * (len(oev) // (a.iters + 3)):]  # drop ORT's warm-up runs
    S = per_run(sev, lambda e: e["args"].get("node"))
    O = per_run(oev, lambda e: e["name"])
    if len(S) != len(O):
        sys.exit(f"layers_vs_ort: spore ran {len(S)} conv/GEMM kernels per run, ORT {len(O)}: cannot pair them")
    rows = []
    for (s, se), (o, _) in zip(S, O):
        args = se["args"]
        rows.append((s - o, s, o, str(args.get("impl")), args.get("shapes", ""), args.get("flops", 0)))
    print(f"{os.path.basename(a.model)} {' '.join(a.input)} threads {a.threads}: {len(rows)} layers, spore {sum(r[1] for r in rows) / 1e3:.2f} ms,"
          f" ORT {sum(r[2] for r in rows) / 1e3:.2f} ms (medians per layer)")
    agg = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        x = agg[r[3]]
        x[0] += r[1]
        x[1] += r[2]
        x[2] += 1
    for k, (s, o, n) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
        print(f"  {k[:40]:40s} {n:4d} layers  spore {s / 1e3:8.2f} ms  ORT {o / 1e3:8.2f} ms  ratio {s / o if o else 0:5.2f}")
    print(f"\nlayers where spore loses most (us; GFLOP/s spore / ORT):")
    for d_, s, o, imp, sh, fl in sorted(rows, reverse=True)[:a.top]:
        print(f"  +{d_:7.0f}  {s:8.0f} vs {o:8.0f}  {imp[:24]:24s} {fl / s / 1e3 if s else 0:6.1f} / {fl / o / 1e3 if o else 0:6.1f}  {sh[:100]}")


if __name__ == "__main__":
    main()
