#!/usr/bin/env python3
"""BatchNorm under data parallelism: `spore train --model simplenet_bn --parallel data --grad-shards 4` (each shard
normalizes with its own batch statistics; the running statistics are the mean of the shards' updates) gives on 1, 2
and 4 ranks, and in PyNative mode on 2, the same step losses and the same final checkpoint bytes (parameters, the
running mean and variance, optimizer state). Without mpirun: SKIPPED (exit 77), a failure when CI=true.

usage: dp_bn_test.py SPORE DIGITS_CSV_GZ [MPI_MODULE]"""
import json
import os
import shutil
import sys
import tempfile

from mpi_run import launch, mpi_setup, run_checked


def main():
    spore, digits = sys.argv[1], sys.argv[2]
    module = sys.argv[3] if len(sys.argv) > 3 else ""
    mpirun, env, rc = mpi_setup(module)
    if mpirun is None:
        return rc
    failures = []
    tmp = tempfile.mkdtemp(prefix="spore_dp_bn_")

    def run(np_, name, *extra):
        argv = ["train", "--model", "simplenet_bn", "--dataset", "digits:" + digits, "--epochs", "1", "--batch", "64",
                "--parallel", "data", "--grad-shards", "4", "--json", "--log-every", "1", "--threads", "1",
                "--ckpt-dir", os.path.join(tmp, name)] + list(extra)
        r = run_checked(launch(mpirun, np_, [spore] + argv), env, failures, 180)
        if r is None:
            return None
        lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        with open(os.path.join(tmp, name, "simplenet_bn_epoch1.safetensors"), "rb") as f:
            return [(l["step"], l["loss"]) for l in lines if "step" in l and "final" not in l], f.read()

    ref = run(0, "np1")
    if ref is not None:
        if len(ref[0]) != 22 or not ref[0][-1][1] < ref[0][0][1]:
            failures.append(f"1 process: {len(ref[0])} step losses, from {ref[0][0]} to {ref[0][-1]}")
        for np_, name, extra in ((2, "np2", ()), (4, "np4", ()), (2, "pynative", ("--mode", "pynative"))):
            got = run(np_, name, *extra)
            if got is None:
                continue
            if got[0] != ref[0]:
                failures.append(f"{name}: step losses differ from 1 process")
            if got[1] != ref[1]:
                failures.append(f"{name}: the checkpoint (parameters, running statistics) differs from 1 process")
            if not any(f.startswith(name) for f in failures):
                print(f"  {name}: step losses and checkpoint bit-identical to 1 process", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print("data parallel with BatchNorm:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
