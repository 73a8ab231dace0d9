#!/usr/bin/env python3
"""Data-parallel scaling at 2 ranks: `spore train --parallel data --grad-shards 2 --threads 1` on 1 process pinned to
one core (taskset) against 2 ranks pinned one per core (mpirun --bind-to core), the same global batch, alternating,
REPS times each; prints the load (uptime) before and after and the medians of the training loop's samples/s (the
final JSON line), the step time and the efficiency = 2-rank samples/s / (2 x 1-process samples/s).

With BUCKETS (a comma list of --bucket-mb values, e.g. 0,25,0.01) the 2-rank runs are made once per value in each
repetition (alternating with each other and the 1-process run): 0 reduces the whole gradient vector after backward,
a value > 0 allreduces buckets of that size on the communication thread while backward runs (25 is the default).

usage: bench/dp_scaling.py SPORE [REPS] [BUCKETS]   (run from the repository root; MNIST from ../shared/data/mnist)"""
import json
import os
import statistics
import subprocess
import sys

CONFIGS = [
    ("simplenet", "digits:data/digits.csv.gz", 64, 3),
    ("lenet", "mnist:" + os.path.join(os.path.dirname(os.getcwd()), "shared/data/mnist"), 64, 1),
]


def sps(cmd, env):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        sys.exit(f"exit {r.returncode}: {' '.join(cmd)}\n{r.stderr[-1500:]}")
    return [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")][-1]["samples_per_s"]


def main():
    spore = os.path.abspath(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    buckets = sys.argv[3].split(",") if len(sys.argv) > 3 else [None]
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    env.setdefault("SPORE_MPI_MODULE", os.path.join(os.path.dirname(spore), "libspore_mpi.so"))
    print("load before:", open("/proc/loadavg").read().split()[:3], flush=True)
    for model, data, batch, epochs in CONFIGS:
        args = ["train", "--model", model, "--dataset", data, "--batch", str(batch), "--epochs", str(epochs),
                "--parallel", "data", "--grad-shards", "2", "--threads", "1", "--json"]
        one, two = [], {b: [] for b in buckets}
        for _ in range(reps):
            one.append(sps(["taskset", "-c", "0", spore] + args, env))
            for b in buckets:
                extra = [] if b is None else ["--bucket-mb", b]
                two[b].append(sps(["mpirun", "--allow-run-as-root", "-np", "2", "--bind-to", "core", "--map-by",
                                   "core", spore] + args + extra, env))
        m1 = statistics.median(one)
        for b, runs in two.items():
            m2 = statistics.median(runs)
            label = "" if b is None else f" --bucket-mb {b}"
            print(f"{model} batch {batch}: 1 process {m1:.0f} samples/s ({1e3 * batch / m1:.2f} ms/step), "
                  f"2 ranks{label} {m2:.0f} samples/s ({1e3 * batch / m2:.2f} ms/step), efficiency "
                  f"{m2 / (2 * m1):.2f} (medians of {reps}; 1 process {min(one):.0f}-{max(one):.0f}, 2 ranks "
                  f"{min(runs):.0f}-{max(runs):.0f})", flush=True)
    print("load after:", open("/proc/loadavg").read().split()[:3], flush=True)


if __name__ == "__main__":
    main()
