#!/usr/bin/python3
"""spore vs ONNX Runtime on the torchvision architectures (and the PyTorch LSTM) that export_torchvision.py writes to
out/bench/torchvision: outputs compared, then latency compared in the same run.

  /usr/bin/python3 bench/peers/tv_vs_ort.py [--spore build/spore] [--models resnet18,...] [--batches 1,8]
      [--threads 1,2] [--repeats 3] [--time-s 1.5] [--no-check] [--no-speed] [--json FILE] [--markdown]
      [--dir out/bench/rnn]   (another export folder: export_rnn.py's recurrent nets)
      [--dir out/bench/video] (export_torchvision.py --out out/bench/video: the 3-D video nets)
      [--dir out/bench/real]  (export_torchvision.py --out out/bench/real: Swin, RAFT with two input frames)

Correctness: for each model and batch, `spore run MODEL --input NAME=FILE.npy --output DIR` (no --input-shape: the
dims bind from the file) and `node ort_bench.js MODEL --input-npy NAME=FILE.npy --save-output DIR` on the export's
own seeded input; every output must match within rtol 1e-3, atol 1e-4 (|a - b| <= atol + rtol * |b|).

Latency: `spore bench MODEL --input NAME=FILE.npy --no-random --threads T --json` against `ort_bench.js MODEL
--input-npy NAME=FILE.npy --native --threads T` (intra-op threads = T, inter-op 1, sequential, all graph
optimizations): the same .npy (the export's seeded input at batch B) and the same dynamic-batch file as exported,
neither engine given fixed dims (spore binds them from the file as a user's `spore run` does; ORT runs the file's
symbolic dims). ORT's timed session is unprofiled: its figure is the wall clock of `await session.run`, which
includes Node's binding overhead; a second, profiled session gives ORT's own model_run events, which include the
profiler's per-node work. Both are upper bounds on ORT's native time, so each repeat takes the smaller p50 of the
two for ORT (the reported `ort_js_ms` / `ort_native_ms` keep both). Warm-up first, each timed for --time-s,
interleaved --repeats times so machine noise hits both; the cell is the median p50 of each, and the ratio spore/ORT
(< 1: spore faster). Cells with fewer threads than CPUs pin both engines to the same CPUs. The summary is the geometric mean of
the ratios over all cells and the worst cell.
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ORT_JS = os.path.join(HERE, "ort", "ort_bench.js")
TV_DIR = os.path.join(ROOT, "out", "bench", "torchvision")


def run(cmd, cpus=None):
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pin)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {(r.stderr or r.stdout).strip()[-800:]}")
    return r.stdout


def last_json(out):
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]


def models_available(names):
    found = []
    for f in sorted(os.listdir(TV_DIR)):
        if not f.endswith(".json"):
            continue
        name = f[:-5]
        meta = json.load(open(os.path.join(TV_DIR, f)))
        if names and name not in names:
            continue
        if not os.path.exists(os.path.join(TV_DIR, name + ".onnx")):
            continue
        found.append((name, meta))
    return found


def inputs(name, meta, batch):
    """NAME=FILE.npy per model input: NAME.x{B}.npy, or NAME.INPUT.x{B}.npy for exports with several inputs (meta
    "inputs", e.g. RAFT's two frames)."""
    base = name.split("_op")[0] if "_op" in name else name
    if "inputs" not in meta:
        return [f"{meta['input']}={os.path.join(TV_DIR, f'{base}.x{batch}.npy')}"]
    return [f"{n}={os.path.join(TV_DIR, f'{base}.{n}.x{batch}.npy')}" for n in meta["inputs"]]


def check(spore, name, meta, batch):
    """Worst |a-b| / (atol + rtol |b|) over all outputs (<= 1 passes)."""
    model = os.path.join(TV_DIR, name + ".onnx")
    xs = inputs(name, meta, batch)
    d = tempfile.mkdtemp(prefix="tv_check_")
    try:
        run([spore, "run", model] + [a for x in xs for a in ("--input", x)] + ["--output", os.path.join(d, "spore"),
                                                                            "--no-random"])
        run(["node", ORT_JS, model] + [a for x in xs for a in ("--input-npy", x)] +
            ["--save-output", os.path.join(d, "ort"), "--warmup", "0", "--iters", "1"])
        worst = 0.0
        outs = sorted(os.listdir(os.path.join(d, "ort")))
        if not outs:
            raise RuntimeError("ORT wrote no outputs")
        for o in outs:
            b = np.load(os.path.join(d, "ort", o)).astype(np.float64)
            sp = os.path.join(d, "spore", o)
            if not os.path.exists(sp):
                raise RuntimeError(f"spore wrote no {o} (has {sorted(os.listdir(os.path.join(d, 'spore')))})")
            a = np.load(sp).astype(np.float64)
            if a.shape != b.shape:
                raise RuntimeError(f"{o}: shape {a.shape} vs ORT {b.shape}")
            worst = max(worst, float(np.max(np.abs(a - b) / (1e-4 + 1e-3 * np.abs(b)))))
        return worst
    finally:
        shutil.rmtree(d, ignore_errors=True)


def speed(spore, name, meta, batch, threads, repeats, time_s):
    """Median p50s over the repeats: spore, ORT (the smaller of its two timings per repeat), ORT wall, ORT native."""
    model = os.path.join(TV_DIR, name + ".onnx")
    xs = inputs(name, meta, batch)
    for x in xs:
        if not os.path.exists(x.split("=", 1)[1]):
            raise RuntimeError(f"no {x.split('=', 1)[1]} (export_torchvision.py writes the inputs)")
    avail = sorted(os.sched_getaffinity(0))
    cpus = set(avail[-threads:]) if threads < len(avail) else None
    s, o, js, nat = [], [], [], []
    for _ in range(repeats):
        s.append(last_json(run([spore, "bench", model, "--json", "--threads", str(threads)] +
                               [a for x in xs for a in ("--input", x)] +
                               ["--no-random", "--warmup", "3", "--time-s", str(time_s)], cpus))["p50_ms"])
        r = last_json(run(["node", ORT_JS, model, "--native"] + [a for x in xs for a in ("--input-npy", x)] +
                          ["--threads", str(threads), "--warmup", "3", "--time-s", str(time_s)], cpus))
        js.append(r["p50_ms"])
        nat.append(r["native_p50_ms"])
        o.append(min(r["p50_ms"], r["native_p50_ms"]))
    return statistics.median(s), statistics.median(o), statistics.median(js), statistics.median(nat)


def main():
    global TV_DIR
    p = argparse.ArgumentParser()
    p.add_argument("--spore", default=os.path.join(ROOT, "build", "spore"))
    p.add_argument("--models", default="", help="comma-separated names (default: every export in out/bench/torchvision)")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--time-s", type=float, default=1.5)
    p.add_argument("--no-check", action="store_true")
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--json", help="write the rows to this file")
    p.add_argument("--dir", default=TV_DIR, help="the exports' folder (NAME.onnx, NAME.json, NAME.x{B}.npy)")
    a = p.parse_args()
    TV_DIR = os.path.abspath(a.dir)
    if not os.path.isdir(TV_DIR):
        sys.exit(f"tv_vs_ort: no {TV_DIR}; run /usr/bin/python3 bench/peers/export_torchvision.py (or export_rnn.py) first")
    models = models_available(set(filter(None, a.models.split(","))))
    batches = [int(v) for v in a.batches.split(",")]
    threads = [int(v) for v in a.threads.split(",")]
    rows, ratios, failures = [], [], []
    for name, meta in models:
        row = {"model": name}
        if not a.no_check:
            for b in batches:
                try:
                    w = check(a.spore, name, meta, b)
                    row[f"check_b{b}"] = w
                    if w > 1:
                        failures.append(f"{name} batch {b}: outputs differ ({w:.2f}x the tolerance)")
                except RuntimeError as e:
                    row[f"check_b{b}"] = str(e)
                    failures.append(f"{name} batch {b}: {e}")
        if not a.no_speed and "_op" not in name:  # the opset re-exports are checked, not timed again
            for b in batches:
                for t in threads:
                    try:
                        sp, ort, ort_js, ort_native = speed(a.spore, name, meta, b, t, a.repeats, a.time_s)
                    except RuntimeError as e:
                        failures.append(f"{name} b{b} t{t}: {e}")
                        continue
                    row[f"b{b}t{t}"] = {"spore_ms": sp, "ort_ms": ort, "ort_js_ms": ort_js, "ort_native_ms": ort_native,
                                        "ratio": sp / ort}
                    ratios.append((sp / ort, f"{name} b{b} t{t}"))
        rows.append(row)
        cells = " ".join(f"{k}={v['ratio']:.2f}" for k, v in row.items() if isinstance(v, dict))
        checks = " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}=FAIL" for k, v in row.items()
                          if k.startswith("check"))
        print(f"{name:28s} {checks} {cells}", flush=True)
    if ratios:
        geo = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
        worst = max(ratios)
        print(f"geo-mean spore/ORT p50 over {len(ratios)} cells: {geo:.3f}; worst {worst[0]:.2f} ({worst[1]})")
    # Markdown table: model | b1 t1 | b1 t2 | b8 t1 | b8 t2 (ratio, spore ms / ORT ms)
    keys = [f"b{b}t{t}" for b in batches for t in threads]
    if ratios:
        print("\n| model | " + " | ".join(f"batch {k[1:k.index('t')]}, {k[k.index('t') + 1:]} thr" for k in keys) + " |")
        print("|---|" + "---|" * len(keys))
        for row in rows:
            if not any(k in row for k in keys):
                continue
            cells = [f"{row[k]['ratio']:.2f} ({row[k]['spore_ms']:.1f}/{row[k]['ort_ms']:.1f})" if k in row else "-"
                     for k in keys]
            print(f"| {row['model']} | " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    if failures:
        print("\nFAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
