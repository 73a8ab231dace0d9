#!/usr/bin/env python3
"""spore.load vs ONNX Runtime on torchvision exports (issue 24's "spore.load of a torchvision export matches ORT"):
each architecture gets seeded weights and re-estimated BatchNorm statistics, is exported by PyTorch at opset 17 with
a dynamic batch, and runs through spore.load (Python) and through ONNX Runtime (npm onnxruntime-node, via
bench/peers/ort/ort_bench.js --save-output) on the same .npy at batch 1 and 2.

    bash bench/peers/setup.sh          # Debian's torch/torchvision, and onnxruntime-node under bench/peers/ort
    .venv/bin/python bench/python/load_vs_ort.py [--models resnet18,...] [--size 96] [--out DIR]

The pytest suite compares spore.load with PyTorch itself (ORT's npm package is ~300 MB, too large for every CI run).
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import torch
import torchvision as tv

import spore

HERE = os.path.dirname(os.path.abspath(__file__))
ORT = os.path.join(HERE, "..", "peers", "ort", "ort_bench.js")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="mobilenet_v3_small,resnet18,shufflenet_v2_x1_0,efficientnet_b0")
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--out", default="/tmp/spore_load_vs_ort")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    for name in a.models.split(","):
        torch.manual_seed(0)
        net = getattr(tv.models, name)(weights=None).train()
        with torch.no_grad():
            for _ in range(2):
                net(torch.rand(4, 3, a.size, a.size))
        net.eval()
        path = os.path.join(a.out, f"{name}.onnx")
        torch.onnx.export(net, torch.rand(1, 3, a.size, a.size), path, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17)
        model = spore.load(path)
        for batch in (1, 2):
            x = np.random.default_rng(batch).random((batch, 3, a.size, a.size), dtype=np.float32)
            xp = os.path.join(a.out, "x.npy")
            np.save(xp, x)
            subprocess.run(["node", ORT, path, "--shape", f"x:{batch},3,{a.size},{a.size}", "--threads", "1",
                            "--warmup", "0", "--iters", "1", "--input-npy", f"x={xp}", "--save-output",
                            os.path.join(a.out, "ort")], check=True, capture_output=True)
            ort = np.load(os.path.join(a.out, "ort", "logits.npy"))
            got = np.asarray(model(x))
            ok = got.shape == ort.shape and np.allclose(got, ort, rtol=1e-3, atol=1e-4)
            bad += not ok
            print(f"{name:22s} batch {batch}: max |spore - ORT| {np.abs(got - ort).max():.2e} (max |ORT| "
                  f"{np.abs(ort).max():.2e}), rtol 1e-3 / atol 1e-4: {'match' if ok else 'MISMATCH'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
