#!/usr/bin/python3
"""Training throughput and accuracy: spore (graph and PyNative mode) vs PyTorch 1.13, in the same run.

  /usr/bin/python3 bench/peers/train_vs_torch.py [--spore build/spore] [--dataset mnist:../shared/data/mnist]
      [--models simplenet,lenet,mlp] [--threads 1,2] [--epochs 1] [--repeats 3] [--accuracy-epochs 5] [--json]

For each model and thread count it runs spore graph, spore pynative and torch interleaved `--repeats` times
(so machine noise hits all three alike), takes the median samples/s of each and prints the ratios spore/torch.
With --accuracy-epochs E > 0 it then trains each model once for E epochs in spore (graph) and torch at the
largest thread count and prints both final test accuracies. Same model, batch 64, momentum SGD (lr 0.01,
momentum 0.9), data scaled to [0, 1], thread count; OPENBLAS_CORETYPE is left as the machine sets it.

PyTorch's threads, fairly: torch.set_num_threads(T) and OMP_NUM_THREADS=T for its OpenMP pool; Debian's torch also
runs fp32 matmuls in OpenBLAS, whose own pool of T threads spins beside OpenMP's (at T=2 that is 4 busy threads on 2
cores, which slowed torch and inflated spore's 2-thread ratios). At T > 1 torch therefore runs in three variants,
interleaved like the rest - OpenBLAS at T threads with OpenMP spinning (the old setting), OpenBLAS at 1 thread, and
OpenBLAS at T with OMP_WAIT_POLICY=passive - and its fastest median is the figure the ratios use (all are printed).
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
    best_torch = {}
    for model in a.models.split(","):
        for t in [int(x) for x in a.threads.split(",")]:
            variants = {"torch": []} if t == 1 else {"torch": [], "torch blas1": ["--blas-threads", "1"],
                                                     "torch passive": ["--omp-wait", "passive"]}
            sps = {"graph": [], "pynative": [], **{k: [] for k in variants}}
            for _ in range(a.repeats):
                ep = ["--model", model, "--epochs", str(a.epochs), "--threads", str(t)]
                sps["graph"].append(run_json(spore_cmd + ep + ["--mode", "graph"])["samples_per_s"])
                sps["pynative"].append(run_json(spore_cmd + ep + ["--mode", "pynative"])["samples_per_s"])
                for name, extra in variants.items():
                    sps[name].append(run_json(torch_cmd + ep + extra)["samples_per_s"])
            med = {k: statistics.median(v) for k, v in sps.items()}
            best = max(variants, key=lambda k: med[k])
            row = {"model": model, "threads": t, "graph_sps": med["graph"], "pynative_sps": med["pynative"],
                   "torch_sps": med[best], "torch_setting": best,
                   "torch_variants": {k: med[k] for k in variants}, "graph_vs_torch": med["graph"] / med[best],
                   "pynative_vs_torch": med["pynative"] / med[best], "runs": sps}
            rows.append(row)
            if not a.json:
                others = "  ".join(f"{k} {med[k]:.0f}/s" for k in variants if k != best)
                print(f"{model:10s} threads {t}: spore graph {med['graph']:8.0f}/s  pynative {med['pynative']:8.0f}/s  "
                      f"{best} {med[best]:8.0f}/s  ratio graph {row['graph_vs_torch']:.2f}x  "
                      f"pynative {row['pynative_vs_torch']:.2f}x" + (f"  ({others})" if others else ""), flush=True)
            best_torch[(model, t)] = variants[best]
    acc = []
    if a.accuracy_epochs > 0:
        t = max(int(x) for x in a.threads.split(","))
        for model in a.models.split(","):
            ep = ["--model", model, "--epochs", str(a.accuracy_epochs), "--threads", str(t)]
            s = run_json(spore_cmd + ep + ["--mode", "graph"])
            q = run_json(torch_cmd + ep + best_torch.get((model, t), []))
            acc.append({"model": model, "epochs": a.accuracy_epochs, "spore_accuracy": s["accuracy"],
                        "torch_accuracy": q["accuracy"]})
            if not a.json:
                print(f"{model:10s} after {a.accuracy_epochs} epochs: spore {s['accuracy']:.4f}  torch {q['accuracy']:.4f}",
                      flush=True)
    if a.json:
        print(json.dumps({"throughput": rows, "accuracy": acc}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
