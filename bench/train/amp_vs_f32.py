#!/usr/bin/python3
"""Mixed precision vs f32 (issue 25's AMP acceptance): the same model, data, seed and steps trained by `spore train`
at O0 (f32), O2 bf16 and O2 f16 with dynamic loss scaling; test accuracy, loss, skipped steps and samples/s.

    /usr/bin/python3 bench/train/amp_vs_f32.py [--spore build/spore] [--dataset mnist:../shared/data/mnist]
        [--models simplenet,lenet] [--epochs 5] [--batch 64] [--lr 0.01] [--optimizer momentum] [--mode graph]
        [--threads 2]
    /usr/bin/python3 bench/train/amp_vs_f32.py --models transformer --optimizer adamw --lr 0.001

The goal is the O2 runs' accuracy within 0.3 points of f32's. On a 2,000-image test split one point is 20 images.
"""
import argparse
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spore", default=os.path.join(ROOT, "build", "spore"))
    ap.add_argument("--dataset", default="mnist:" + os.path.join(ROOT, "..", "shared", "data", "mnist"))
    ap.add_argument("--models", default="simplenet,lenet")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--optimizer", default="momentum")
    ap.add_argument("--mode", default="graph")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    configs = [("f32", []), ("O2 bf16", ["--amp-level", "O2", "--amp-dtype", "bf16", "--loss-scale", "dynamic"]),
               ("O2 f16", ["--amp-level", "O2", "--amp-dtype", "f16", "--loss-scale", "dynamic"])]
    print(f"{'model':10s} {'config':8s} {'accuracy':>9s} {'delta pts':>9s} {'test loss':>9s} {'skipped':>7s} "
          f"{'scale':>9s} {'samples/s':>9s}")
    for model in a.models.split(","):
        base = None
        for name, extra in configs:
            out = subprocess.run([a.spore, "train", "--model", model, "--dataset", a.dataset, "--epochs",
                                  str(a.epochs), "--batch", str(a.batch), "--lr", str(a.lr), "--optimizer", a.optimizer, "--mode", a.mode,
                                  "--threads", str(a.threads), "--json", *extra], check=True, capture_output=True,
                                 text=True).stdout
            f = json.loads(out.splitlines()[-1])
            base = f["accuracy"] if base is None else base
            print(f"{model:10s} {name:8s} {f['accuracy']:9.4f} {100 * (f['accuracy'] - base):+9.2f} {f['loss']:9.4f} "
                  f"{f['overflow_steps']:7d} {f['loss_scale']:9.0f} {f['samples_per_s']:9.0f}", flush=True)


if __name__ == "__main__":
    main()
