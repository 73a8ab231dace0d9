#!/usr/bin/env python3
"""BatchNorm under data parallelism: `spore train --model simplenet_bn --parallel data --grad-shards 4` (each shard
normalizes with its own batch statistics; the running statistics are the mean of the shards' updates) gives on 1, 2
and 4 ranks, and in PyNative mode on 2, the same step losses and the same final checkpoint bytes (parameters, the
running mean and variance, optimizer state).

With --sync-bn (SyncBatchNorm: the batch statistics of the global batch, each rank's sums allreduced inside the
forward and their gradients inside the backward), 2 and 4 ranks (one shard each, graph and PyNative mode) give one
process's stand-alone training with the whole batch and ordinary BatchNorm: the step losses within SYNC_RTOL and the
final parameters and running statistics within SYNC_ATOL + SYNC_RTOL * |x| (the sums associate differently: f32
rounding, not bits), while per-shard BatchNorm on 2 ranks is further from it than that. Without mpirun: SKIPPED
(exit 77), a failure when CI=true.

usage: dp_bn_test.py SPORE DIGITS_CSV_GZ [MPI_MODULE]"""
import json
import os
import shutil
import struct
import sys
import tempfile

from mpi_run import launch, mpi_setup, run_checked

SYNC_RTOL = 1e-5
SYNC_ATOL = 1e-6


def safetensors_f32(blob):
    """{name: [floats]} of a safetensors file's F32 tensors."""
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        raw = blob[8 + n + a:8 + n + b]
        out[name] = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return out


def worst(ref, got):
    """The largest |a - b| / (SYNC_ATOL + SYNC_RTOL |a|) over the step losses and the model's tensors (optimizer
    state left out), and where."""
    (ref_losses, ref_ckpt), (losses, ckpt) = ref, got
    if [s for s, _ in ref_losses] != [s for s, _ in losses]:
        return float("inf"), "the steps differ"
    w, at = 0.0, ""
    for (s, a), (_, b) in zip(ref_losses, losses):
        r = abs(a - b) / (SYNC_RTOL * abs(a))
        if r > w:
            w, at = r, f"step {s} loss {a} vs {b}"
    ta, tb = safetensors_f32(ref_ckpt), safetensors_f32(ckpt)
    for name, va in ta.items():
        if name.startswith("optimizer."):
            continue
        vb = tb.get(name)
        if vb is None or len(vb) != len(va):
            return float("inf"), f"tensor {name} missing or resized"
        for e, (a, b) in enumerate(zip(va, vb)):
            r = abs(a - b) / (SYNC_ATOL + SYNC_RTOL * abs(a))
            if r > w:
                w, at = r, f"{name}[{e}] {a} vs {b}"
    return w, at


def main():
    spore, digits = sys.argv[1], sys.argv[2]
    module = sys.argv[3] if len(sys.argv) > 3 else ""
    mpirun, env, rc = mpi_setup(module)
    if mpirun is None:
        return rc
    failures = []
    tmp = tempfile.mkdtemp(prefix="spore_dp_bn_")

    def run(np_, name, *extra, parallel=("--parallel", "data", "--grad-shards", "4")):
        argv = ["train", "--model", "simplenet_bn", "--dataset", "digits:" + digits, "--epochs", "1", "--batch", "64",
                *parallel, "--json", "--log-every", "1", "--threads", "1",
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

    # SyncBatchNorm against one process with the whole batch and ordinary BatchNorm (22 whole batches: stand-alone
    # training keeps a short last batch, data parallelism drops it).
    whole = ("--limit-train", str(22 * 64))
    alone = run(0, "alone", *whole, parallel=())
    if alone is not None:
        for np_, name, extra in ((2, "sync2", ()), (4, "sync4", ()), (2, "sync2_pynative", ("--mode", "pynative"))):
            got = run(np_, name, *extra, *whole, parallel=("--parallel", "data", "--sync-bn"))
            if got is None:
                continue
            w, at = worst(alone, got)
            if w > 1:
                failures.append(f"{name}: {w:.2f}x the tolerance from stand-alone training ({at})")
            else:
                print(f"  {name}: within {w:.3f}x the tolerance of stand-alone BatchNorm ({at})", flush=True)
        per_shard = run(2, "per_shard2", *whole, parallel=("--parallel", "data"))
        if per_shard is not None:
            w, at = worst(alone, per_shard)
            if w <= 1:
                failures.append(f"per-shard BatchNorm on 2 ranks is within the sync tolerance of stand-alone ({at}): "
                                "the check cannot tell synchronised statistics apart")
            else:
                print(f"  per-shard BatchNorm on 2 ranks: {w:.0f}x the tolerance from stand-alone ({at})", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print("data parallel with BatchNorm:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
