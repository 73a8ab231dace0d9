#!/usr/bin/env python3
"""Issue 41's real exports through the CLI as a user runs them: a Swin transformer (torchvision swin_t, shifted
windows) and an optical-flow net (torchvision raft_small, two frames, 12 unrolled updates with GridSample), exported
by bench/peers/export_torchvision.py (torch.onnx, opset 17, seeded weights, dynamic batch), each run with
`spore run MODEL --input NAME=FILE.npy ...` and no other flag, and compared with PyTorch's own output on the same
input (the export script saves it): |spore - torch| <= atol + rtol |torch| with rtol 1e-3 on every element.

usage: real_exports_test.py SPORE [CACHE_DIR]
The exports are made here (python3-torch and python3-torchvision are project dependencies, scripts/install-deps.sh),
minutes on two cores, and kept in CACHE_DIR (default: a temporary folder) for the next run. The comparison with ONNX
Runtime and the timings are bench/peers/tv_vs_ort.py --dir out/bench/real (docs/PERFORMANCE.md).
"""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # Debian's NumPy; a pyenv python on PATH may lack it
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORT = os.path.join(ROOT, "bench", "peers", "export_torchvision.py")

# (model, inputs, output, rtol, atol). atol: where an output crosses zero, rtol alone cannot hold; it is sized to the
# output's scale (Swin's logits are O(1), RAFT's flows O(1-10) pixels) - see docs/PERFORMANCE.md.
MODELS = [
    ("swin_t", ["x"], "y", 1e-3, 1e-4),
    ("raft_small", ["image1", "image2"], "flow", 1e-3, 1e-4),
]


def fail(msg, p=None):
    if p is not None:
        msg += f"\n--- rc={p.returncode}\n--- stdout:\n{p.stdout[-3000:]}\n--- stderr:\n{p.stderr[-3000:]}"
    sys.exit(msg)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    spore = sys.argv[1]
    cache = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="spore_real_exports_")
    os.makedirs(cache, exist_ok=True)
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI") == "true":
            fail(f"CI=true but PyTorch is missing ({e}); scripts/install-deps.sh installs python3-torchvision")
        print(f"SKIPPED: no PyTorch ({e})")
        sys.exit(77)
    names = ",".join(m[0] for m in MODELS)
    p = subprocess.run([sys.executable, EXPORT, "--out", cache, "--models", names, "--no-convert"],
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        fail("export_torchvision.py failed", p)
    out = tempfile.mkdtemp(prefix="spore_real_out_")
    try:
        for name, ins, oname, rtol, atol in MODELS:
            args = [spore, "run", os.path.join(cache, name + ".onnx")]
            for n in ins:
                f = os.path.join(cache, f"{name}.x1.npy" if len(ins) == 1 else f"{name}.{n}.x1.npy")
                args += ["--input", f"{n}={f}"]
            d = os.path.join(out, name)
            p = subprocess.run(args + ["--output", d], capture_output=True, text=True, timeout=900)
            if p.returncode != 0:
                fail(f"spore run {name} failed", p)
            got = np.load(os.path.join(d, f"{oname}.npy")).astype(np.float64)
            want = np.load(os.path.join(cache, f"{name}.torch.{oname}.npy")).astype(np.float64)
            if got.shape != want.shape:
                fail(f"{name}: output {oname} has shape {got.shape}, PyTorch's {want.shape}")
            if np.abs(want).max() < 1e-3 or np.std(want) < 1e-4:
                fail(f"{name}: PyTorch's output is degenerate (max |y| {np.abs(want).max():.3g}): the check would be "
                     "empty")
            worst = float(np.max(np.abs(got - want) / (atol + rtol * np.abs(want))))
            print(f"{name}: {oname} {list(got.shape)}, max |torch| {np.abs(want).max():.3g}, max abs diff "
                  f"{np.abs(got - want).max():.3g}, worst {worst:.3f}x the tolerance (rtol {rtol}, atol {atol})")
            if worst > 1:
                fail(f"{name}: spore's {oname} differs from PyTorch's by {worst:.2f}x the tolerance")
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if len(sys.argv) <= 2:
            shutil.rmtree(cache, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
