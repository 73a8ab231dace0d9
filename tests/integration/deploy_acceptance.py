#!/usr/bin/env python3
"""Deployment acceptance (label acceptance): train -> export -> convert -> eval / run / bench, end to end.

usage: deploy_acceptance.py SPORE_BINARY

SimpleNet is trained with `spore train` on MNIST (first 8,000 t10k images; ../shared/data/mnist), exported to .spore
and ONNX with a symbolic batch dim, and converted by `spore convert` in every precision / quantization mode. Each
converted file is evaluated independently by `spore eval` on the held-out 2,000 images; the accuracy cost against
the f32 export must be within: fp16 0.5, bf16 0.5, mixed 0.5, weight_int8 0.5, int8 (static PTQ, min-max, percentile
and entropy calibration) 1.0 points. Every file also runs in `spore run` (.npy in and out) and `spore bench --json`.
Without the data the test SKIPs (exit 77) on a user's machine, but FAILs when CI=true.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

SKIP = 77
LIMITS = {  # name: (convert args, max accuracy cost in points)
    "fp16": (["--precision-mode", "allow_fp32_to_fp16"], 0.5),
    "bf16": (["--precision-mode", "allow_fp32_to_bf16"], 0.5),
    "mixed": (["--precision-mode", "allow_mix_precision"], 0.5),
    "weight_int8": (["--quantize", "weight_int8"], 0.5),
    "int8_minmax": (["--quantize", "int8", "--calib-method", "minmax"], 1.0),
    "int8_percentile": (["--quantize", "int8", "--calib-method", "percentile"], 1.0),
    "int8_entropy": (["--quantize", "int8", "--calib-method", "entropy"], 1.0),
}


def run(cmd, timeout=900):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def last_json(out):
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")][-1]


def write_npy_f32(path, shape, values):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join(f"{d}," for d in shape)
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{len(values)}f", *values))


def main():
    spore = sys.argv[1]
    shared = os.environ.get("SPORE_SHARED_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data"))
    mnist = os.path.join(shared, "mnist")
    if not os.path.isdir(mnist):
        if os.environ.get("CI") == "true":
            sys.exit(f"FAIL: MNIST not found at {mnist} (CI=true: data tests must not skip)")
        print(f"SKIPPED: MNIST not found at {mnist}")
        return SKIP
    ds = f"mnist:{mnist}"
    tmp = tempfile.mkdtemp(prefix="spore_deploy_")
    run([spore, "train", "--model", "simplenet", "--dataset", ds, "--epochs", "3", "--batch", "64", "--lr", "0.05",
         "--optimizer", "momentum", "--mode", "graph", "--seed", "0", "--ckpt-dir", tmp, "--json", "--no-progress"])
    ckpt = os.path.join(tmp, "simplenet_epoch3.safetensors")
    ck = last_json(run([spore, "eval", "--model", "simplenet", "--ckpt", ckpt, "--dataset", ds, "--json"]))
    print(f"checkpoint: accuracy {ck['accuracy']:.4f}", flush=True)

    files = {}
    for ext in ("spore", "onnx"):
        files[f"f32.{ext}"] = os.path.join(tmp, f"simplenet.{ext}")
        run([spore, "export", "--model", "simplenet", "--ckpt", ckpt, "--input-shape", "x:batch,1,28,28", "-o",
             files[f"f32.{ext}"]])
        e = last_json(run([spore, "eval", files[f"f32.{ext}"], "--dataset", ds, "--json"]))
        print(f"export {ext}: accuracy {e['accuracy']:.4f}", flush=True)
        assert e["accuracy"] == ck["accuracy"], f"exported {ext} model scores {e['accuracy']}, checkpoint {ck['accuracy']}"
    base = ck["accuracy"]

    failures = []
    for name, (args, limit) in LIMITS.items():
        out = os.path.join(tmp, f"simplenet_{name}.spore")
        rep = last_json(run([spore, "convert", files["f32.onnx"], "-o", out, "--calib-data", ds, "--eval-data", ds,
                             "--json"] + args))
        acc = last_json(run([spore, "eval", out, "--dataset", ds, "--json"]))["accuracy"]
        cost = (base - acc) * 100
        size = os.path.getsize(out)
        print(f"{name:13s} accuracy {acc:.4f} cost {cost:+.2f} pt (limit {limit}) size {size} bytes "
              f"(f32 {os.path.getsize(files['f32.spore'])})", flush=True)
        if cost > limit:
            failures.append(f"{name}: accuracy cost {cost:.2f} pt > {limit}")
        files[name] = out
        _ = rep

    sample = os.path.join(tmp, "x.npy")
    vals = [((i * 2654435761) % 1000) / 1000.0 for i in range(28 * 28)]
    write_npy_f32(sample, [1, 1, 28, 28], vals)
    for name, path in files.items():
        od = os.path.join(tmp, f"out_{name.replace('.', '_')}")
        run([spore, "run", path, "--input", f"x={sample}", "--input-shape", "x:1,1,28,28", "--output", od])
        assert os.listdir(od), f"spore run {name} wrote no outputs"
        b = last_json(run([spore, "bench", path, "--json", "--batch", "8", "--iters", "20", "--warmup", "3"]))
        for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "throughput_per_s", "batch", "threads", "peak_bytes", "kernels"):
            assert k in b, f"spore bench {name}: key {k} missing in {b}"
        print(f"{name:13s} run ok, bench p50 {b['p50_ms']:.3f} ms batch 8", flush=True)
    if failures:
        sys.exit("FAIL: " + "; ".join(failures))
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
