#!/usr/bin/python3
"""Training throughput and accuracy: spore (graph and PyNative mode) vs PyTorch 1.13, in the same run.

  /usr/bin/python3 bench/peers/train_vs_torch.py [--spore build/spore] [--dataset mnist:../shared/data/mnist]
      [--models simplenet,lenet,mlp] [--threads 1,2] [--epochs 1] [--repeats 3] [--accuracy-epochs 5] [--json]

For each model and thread count it runs spore graph, spore pynative and torch interleaved `--repeats` times
(so machine noise hits all three alike), takes the median samples/s of each and prints the ratios spore/torch.
With --accuracy-epochs E > 0 it then trains each model once for E epochs in spore (graph) and torch at the
largest thread count and prints both final test accuracies. Same model, batch 64, momentum SGD (lr 0.01,
momentum 0.9), data scaled to [0, 1], thread count; OPENBLAS_CORETYPE is left as the machine sets it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--spore", default=os.path.join(ROOT, "build", "spore"))
    p.add_argument("--dataset", default="mnist:" + os.path.join(ROOT, "..", "shared", "data", "mnist"))
    p.add_argument("--models", default="simplenet,lenet,mlp")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--accuracy-epochs", type=int, default=0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    common = ["--dataset", a.dataset, "--batch", str(a.batch), "--lr", str(a.lr)]
    torch_cmd = ["/usr/bin/python3", os.path.join(HERE, "train_torch.py")] + common
    spore_cmd = [a.spore, "train", "--json", "--no-progress", "--optimizer", "momentum"] + common
    rows = []
    for model in a.models.split(","):
        for t in [int(x) for x in a.threads.split(",")]:
            sps = {"graph": [], "pynative": [], "torch": []}
            for _ in range(a.repeats):
                ep = ["--model", model, "--epochs", str(a.epochs), "--threads", str(t)]
                sps["graph"].append(run_json(spore_cmd + ep + ["--mode", "graph"])["samples_per_s"])
                sps["pynative"].append(run_json(spore_cmd + ep + ["--mode", "pynative"])["samples_per_s"])
                sps["torch"].append(run_json(torch_cmd + ep)["samples_per_s"])
            med = {k: statistics.median(v) for k, v in sps.items()}
            row = {"model": model, "threads": t, "graph_sps": med["graph"], "pynative_sps": med["pynative"],
                   "torch_sps": med["torch"], "graph_vs_torch": med["graph"] / med["torch"],
                   "pynative_vs_torch": med["pynative"] / med["torch"], "runs": sps}
            rows.append(row)
            if not a.json:
                print(f"{model:10s} threads {t}: spore graph {med['graph']:8.0f}/s  pynative {med['pynative']:8.0f}/s  "
                      f"torch {med['torch']:8.0f}/s  ratio graph {row['graph_vs_torch']:.2f}x  "
                      f"pynative {row['pynative_vs_torch']:.2f}x", flush=True)
    acc = []
    if a.accuracy_epochs > 0:
        t = max(int(x) for x in a.threads.split(","))
        for model in a.models.split(","):
            ep = ["--model", model, "--epochs", str(a.accuracy_epochs), "--threads", str(t)]
            s = run_json(spore_cmd + ep + ["--mode", "graph"])
            q = run_json(torch_cmd + ep)
            acc.append({"model": model, "epochs": a.accuracy_epochs, "spore_accuracy": s["accuracy"],
                        "torch_accuracy": q["accuracy"]})
            if not a.json:
                print(f"{model:10s} after {a.accuracy_epochs} epochs: spore {s['accuracy']:.4f}  torch {q['accuracy']:.4f}",
                      flush=True)
    if a.json:
        print(json.dumps({"throughput": rows, "accuracy": acc}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
