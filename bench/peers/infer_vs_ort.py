#!/usr/bin/python3
"""Inference latency/throughput: `spore bench` vs ONNX Runtime (npm onnxruntime-node, CPU) on the same ONNX files.

  /usr/bin/python3 bench/peers/infer_vs_ort.py [--spore build/spore] [--batches 1,32] [--threads 1,2]
      [--repeats 5] [--iters 200] [--model PATH:INPUT:C,H,W ...] [--json]

For each model, batch and thread count it runs `spore bench --json` and ort_bench.js (Node) interleaved `--repeats`
times (so machine noise hits both alike) and reports medians of p50 latency and throughput, and the ratios
spore/ORT (throughput: > 1 means spore is faster; p50: < 1 means spore is faster). Both run the same file with the
same seeded-random input shape, warm-up first. ORT runs with intra-op threads = threads, sequential execution, all
graph optimizations. Models whose batch dim is fixed in the file (e.g. the model zoo's mnist-8) run at that batch
only. Default models: the ONNX model-zoo MNIST CNN (mnist-8, batch 1 only) and the PyTorch-exported CNN, ResNet-style CNN,
MLP and 6-layer transformer encoder that make_onnx_models.py writes to out/bench/models (random weights, dynamic batch);
without PyTorch, the ResNet-style CNN and the transformer from make_resnet_onnx.py / make_transformer_onnx.py (the
same models written with onnx.helper) and no CNN or MLP rows. Cells with fewer threads than CPUs pin both engines to
the same CPUs (--no-pin: do not).

--passes also runs spore without its graph optimizations (`spore bench --opt-level 0`: only dce, constant folding and
memory planning) in the same interleaved loop, and reports kernels per run: spore's (from `spore bench`) with and
without passes, and ORT's (the node kernels in one run of its profile, ort_bench.js --kernels).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ORT_DIR = os.path.join(HERE, "ort")
SPORE = os.path.join(ROOT, "build", "spore")


def run_json(cmd, env=None, cpus=None):
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=pin)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()[-500:]}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")][-1]


def ensure_ort():
    if not os.path.exists(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")):
        # .npmrc there: ignore-scripts (the postinstall downloads CUDA parts), omit optional deps.
        subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=ORT_DIR, check=True)


def default_models():
    models = []
    shared = os.path.join(ROOT, "..", "shared", "data", "onnx-models", "mnist-8.onnx")
    if os.path.exists(shared):
        models.append(("mnist-8", shared, "Input3", [1, 28, 28], 1))
    md = os.path.join(ROOT, "out", "bench", "models")
    stamp = os.path.join(md, "transformer.json")
    torch_models = True
    if not os.path.exists(stamp) or json.load(open(stamp)).get("version") != 2:
        try:
            subprocess.run(["/usr/bin/python3", os.path.join(HERE, "make_onnx_models.py")], check=True)
        except subprocess.CalledProcessError:
            # No PyTorch (python3-torch is not installable everywhere): the ResNet-style CNN and the transformer have
            # writers that need only the onnx package; the CNN and the MLP are skipped.
            print("infer_vs_ort: make_onnx_models.py failed (no PyTorch?): using make_resnet_onnx.py and "
                  "make_transformer_onnx.py instead; the CNN and MLP rows are skipped", file=sys.stderr)
            torch_models = False
    # SimpleNet trained briefly and exported by spore itself: checks ORT opens spore's ONNX export, too.
    mnist = os.path.join(ROOT, "..", "shared", "data", "mnist")
    sn = os.path.join(md, "simplenet.onnx")
    if not os.path.exists(sn) and os.path.isdir(mnist):
        ck = os.path.join(md, "ckpt")
        subprocess.run([SPORE, "train", "--model", "simplenet", "--dataset", f"mnist:{mnist}", "--epochs", "1",
                        "--limit-train", "2000", "--ckpt-dir", ck, "--no-progress"], check=True, capture_output=True)
        subprocess.run([SPORE, "export", "--model", "simplenet", "--ckpt", os.path.join(ck, "simplenet_epoch1.safetensors"),
                        "--input-shape", "x:batch,1,28,28", "-o", sn], check=True, capture_output=True)
    if os.path.exists(sn):
        models.append(("spore-simplenet", sn, "x", [1, 28, 28], None))
    if not torch_models:
        os.makedirs(md, exist_ok=True)
        for name, writer, inp, sample in (("resnet", "make_resnet_onnx.py", "input", [3, 32, 32]),
                                          ("transformer", "make_transformer_onnx.py", "x", [32, 128])):
            path = os.path.join(md, f"{name}-onnxhelper.onnx")
            if not os.path.exists(path):
                subprocess.run(["/usr/bin/python3", os.path.join(HERE, writer), path], check=True)
            models.append((name, path, inp, sample, None))
        return models
    for name in ("cnn", "resnet", "mlp", "transformer"):
        m = json.load(open(os.path.join(md, f"{name}.json")))
        models.append((f"torch-{name}", os.path.join(md, f"{name}.onnx"), m["input"], m["sample_shape"], None))
    return models


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--spore", default=os.path.join(ROOT, "build", "spore"))
    p.add_argument("--batches", default="1,32")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--model", action="append", default=[],
                   help="NAME=PATH:INPUT:D1,D2,... (per-sample dims; the batch dim is prepended)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--passes", action="store_true", help="also time spore --opt-level 0 and count kernels")
    p.add_argument("--no-pin", action="store_true",
                   help="do not pin runs with fewer threads than CPUs: by default both engines of such a cell run on "
                        "the same CPUs (the last T of this process's affinity mask), so that a slower vCPU (another "
                        "tenant on its host core: 15%% here) cannot favour one side")
    a = p.parse_args()
    global SPORE
    SPORE = a.spore
    ensure_ort()
    models = []
    for spec in a.model:
        name, rest = spec.split("=", 1)
        path, inp, dims = rest.rsplit(":", 2)
        models.append((name, path, inp, [int(d) for d in dims.split(",")], None))
    if not models:
        models = default_models()
    if not models:
        sys.exit("infer_vs_ort: no models (need ../shared/data/onnx-models/mnist-8.onnx or --model)")
    # The caller's environment as is: OMP_WAIT_POLICY=passive (what `make test` sets so parallel tests do not starve
    # each other) makes every OpenMP region wake sleeping threads (~50 us each) and would handicap spore at 2 threads.
    env = dict(os.environ)
    rows = []
    for name, path, inp, sample, fixed in models:
        for b in [int(x) for x in a.batches.split(",")]:
            if fixed is not None and b != fixed:
                continue
            shape = ",".join(str(d) for d in [b] + sample)
            for t in [int(x) for x in a.threads.split(",")]:
                avail = sorted(os.sched_getaffinity(0))
                cpus = set(avail[-t:]) if t < len(avail) and not a.no_pin else None
                res = {"spore": [], "ort": []}
                if a.passes:
                    res["spore_O0"] = []
                spore_cmd = [a.spore, "bench", path, "--json", "--threads", str(t), "--input-shape", f"{inp}:{shape}",
                             "--warmup", str(a.warmup), "--iters", str(a.iters)]
                for rep in range(a.repeats):
                    res["spore"].append(run_json(spore_cmd, env, cpus))
                    if a.passes:
                        res["spore_O0"].append(run_json(spore_cmd + ["--opt-level", "0"], env, cpus))
                    res["ort"].append(run_json(["node", os.path.join(ORT_DIR, "ort_bench.js"), path, "--shape",
                                                f"{inp}:{shape}", "--threads", str(t), "--warmup", str(a.warmup),
                                                "--iters", str(a.iters)] + (["--kernels"] if a.passes and rep == 0 else []),
                                               env, cpus))
                med = {k: {m: statistics.median(r[m] for r in v) for m in ("p50_ms", "p99_ms", "throughput_per_s")}
                       for k, v in res.items()}
                row = {"model": name, "batch": b, "threads": t, "spore": med["spore"], "ort": med["ort"],
                       "throughput_ratio": med["spore"]["throughput_per_s"] / med["ort"]["throughput_per_s"],
                       "p50_ratio": med["spore"]["p50_ms"] / med["ort"]["p50_ms"]}
                if a.passes:
                    row["spore_O0"] = med["spore_O0"]
                    row["kernels"] = {"spore": res["spore"][0]["kernels"], "spore_O0": res["spore_O0"][0]["kernels"],
                                      "ort": res["ort"][0]["kernels"]}
                    row["passes_p50_ratio"] = med["spore"]["p50_ms"] / med["spore_O0"]["p50_ms"]
                rows.append(row)
                if not a.json and a.passes:
                    k = row["kernels"]
                    print(f"{name:18s} batch {b:3d} threads {t}: p50 spore {med['spore']['p50_ms']:.3f} ms, "
                          f"without passes {med['spore_O0']['p50_ms']:.3f} ms, ORT {med['ort']['p50_ms']:.3f} ms | "
                          f"spore/ORT p50 {row['p50_ratio']:.2f}x, passes/no passes {row['passes_p50_ratio']:.2f}x | "
                          f"kernels spore {k['spore']} (without passes {k['spore_O0']}), ORT {k['ort']}", flush=True)
                elif not a.json:
                    print(f"{name:18s} batch {b:3d} threads {t}: spore p50 {med['spore']['p50_ms']:.3f} ms "
                          f"p99 {med['spore']['p99_ms']:.3f} ms {med['spore']['throughput_per_s']:10.1f}/s | ORT p50 "
                          f"{med['ort']['p50_ms']:.3f} ms p99 {med['ort']['p99_ms']:.3f} ms "
                          f"{med['ort']['throughput_per_s']:10.1f}/s | throughput spore/ORT {row['throughput_ratio']:.2f}x",
                          flush=True)
    if a.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
