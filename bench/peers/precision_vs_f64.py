#!/usr/bin/env python3
"""f32 error of spore, ONNX Runtime and PyTorch against a float64 PyTorch run of the same seeded torchvision export.

    /usr/bin/python3 bench/peers/precision_vs_f64.py fcn_resnet50 resnet50 [...]

Rebuilds each model exactly as export_torchvision.py does (its build(): seed, BN re-estimation), runs it in float64
and float32 on NAME.x1.npy, runs `spore run` and ORT (ort_bench.js --save-output) on NAME.onnx, and prints the worst
|a - b| / (1e-4 + 1e-3 |b|) (tv_vs_ort.py's check metric) for each pair. Needs the exports (export_torchvision.py)
and the peers (setup.sh). Set SPORE_WINOGRAD_TILE=2 / SPORE_CONV_WINOGRAD=0 to see what a kernel choice costs.
"""
import os
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import export_torchvision as ex  # noqa: E402
from tv_vs_ort import ORT_JS, TV_DIR as TV, run  # noqa: E402


def metric(a, b):
    return float(np.max(np.abs(a - b) / (1e-4 + 1e-3 * np.abs(b))))


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    for name in sys.argv[1:]:
        m, _ = ex.build(name)
        xp = os.path.join(TV, f"{name}.x1.npy")
        x = np.load(xp)
        with torch.no_grad():
            t32 = m(torch.from_numpy(x)).numpy().astype(np.float64)
            t64 = m.double()(torch.from_numpy(x).double()).numpy()
        d = tempfile.mkdtemp(prefix="prec_")
        model = os.path.join(TV, f"{name}.onnx")
        run([os.path.join(ROOT, "build", "spore"), "run", model, "--input", f"x={xp}", "--output", os.path.join(d, "s"),
             "--no-random"])
        run(["node", ORT_JS, model, "--shape", "x:" + ",".join(map(str, x.shape)), "--input-npy", f"x={xp}",
             "--save-output", os.path.join(d, "o"), "--warmup", "0", "--iters", "1"])
        s = np.load(os.path.join(d, "s", "y.npy")).astype(np.float64)
        o = np.load(os.path.join(d, "o", "y.npy")).astype(np.float64)
        print(f"{name}: vs float64: spore {metric(s, t64):.2f}  ORT {metric(o, t64):.2f}  PyTorch f32 "
              f"{metric(t32, t64):.2f} | spore vs ORT {metric(s, o):.2f}, PyTorch f32 vs ORT {metric(t32, o):.2f}",
              flush=True)


if __name__ == "__main__":
    main()
