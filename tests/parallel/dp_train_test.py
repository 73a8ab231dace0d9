#!/usr/bin/env python3
"""Data-parallel `spore train --parallel data` under mpirun: SimpleNet on the bundled digits with 4 gradient shards
gives, on 2 and 4 ranks (mpirun --oversubscribe, 2 cores in CI), the same per-step losses (JSON, printed in full
precision) and the same final checkpoint bytes as one process; a 2-rank run resumed from epoch 1's checkpoint ends
with the uninterrupted run's checkpoint; mismatched ranks (seeds, bucket sizes), shard counts the ranks cannot split
(or --sync-bn with several shards per rank) and a missing MPI module fail with one clear error, never a hang;
3 ranks (6 shards) and PyNative mode match too; a rank stopped mid-run (SIGSTOP) makes the other fail within
SPORE_COMM_TIMEOUT with an error naming the collective and the rank. Without mpirun: SKIPPED (exit 77), a failure
when CI=true.

usage: dp_train_test.py SPORE DIGITS_CSV_GZ [MPI_MODULE]"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from mpi_run import mpi_setup

LIMIT = 120  # seconds per run


def main():
    spore, digits = sys.argv[1], sys.argv[2]
    module = sys.argv[3] if len(sys.argv) > 3 else ""
    mpirun, env, rc = mpi_setup(module)
    if mpirun is None:
        return rc
    failures = []
    tmp = tempfile.mkdtemp(prefix="spore_dp_")

    def args(ckpt, *extra, shards=4, epochs=2, batch=64):
        return ["train", "--model", "simplenet", "--dataset", "digits:" + digits, "--epochs", str(epochs), "--batch",
                str(batch),
                "--parallel", "data", "--grad-shards", str(shards), "--json", "--log-every", "1", "--threads", "1",
                "--ckpt-dir", os.path.join(tmp, ckpt)] + list(extra)

    def run(np, argv, env=env, ok=True):
        cmd = ([spore] if np == 0 else [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np), spore]) + argv
        print("$", " ".join(cmd), flush=True)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=LIMIT, env=env)
        except subprocess.TimeoutExpired:
            failures.append(f"timed out after {LIMIT} s: {' '.join(cmd)}")
            return None
        if ok and r.returncode != 0:
            failures.append(f"exit {r.returncode}: {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
            return None
        return r

    def losses(r):
        lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        return [(l["step"], l["loss"]) for l in lines if "step" in l and "final" not in l], lines[-1]

    def ckpt(name, epoch):
        with open(os.path.join(tmp, name, f"simplenet_epoch{epoch}.safetensors"), "rb") as f:
            return f.read()

    ref = run(0, args("np1"))
    if ref is None:
        print("\n".join(failures))
        return 1
    ref_losses, ref_final = losses(ref)
    if len(ref_losses) != 2 * (1437 // 64):
        failures.append(f"1 process: {len(ref_losses)} step losses, expected {2 * (1437 // 64)}")
    if not ref_losses[-1][1] < ref_losses[0][1]:
        failures.append(f"1 process: the loss did not fall ({ref_losses[0][1]} -> {ref_losses[-1][1]})")
    for np in (2, 4):
        r = run(np, args(f"np{np}"))
        if r is None:
            continue
        got, final = losses(r)
        if got != ref_losses:
            diff = next((i for i, (a, b) in enumerate(zip(got, ref_losses)) if a != b), min(len(got), len(ref_losses)))
            failures.append(f"{np} ranks: step losses differ from 1 process from entry {diff} "
                            f"({got[diff:diff + 1]} vs {ref_losses[diff:diff + 1]})")
        if final.get("ranks") != np:
            failures.append(f"{np} ranks: the final line says ranks={final.get('ranks')}")
        for e in (1, 2):
            if ckpt(f"np{np}", e) != ckpt("np1", e):
                failures.append(f"{np} ranks: epoch {e} checkpoint (parameters, optimizer state) differs from 1 process")
        print(f"{np} ranks: {len(got)} step losses and both checkpoints bit-identical to 1 process"
              if not failures else f"{np} ranks: differences", flush=True)

        comm = final.get("comm", {}).get("allreduce", {})
        if comm.get("calls") != len(ref_losses) or comm.get("bytes", 0) <= 0:
            failures.append(f"{np} ranks: the final line's comm.allreduce is {comm} (expected one call per step)")

    # A rank count that is no power of two: 3 ranks, 6 shards (2 each), batches of 60.
    ref3 = run(0, args("m6_np1", shards=6, epochs=1, batch=60))
    got3 = run(3, args("m6_np3", shards=6, epochs=1, batch=60))
    if ref3 is not None and got3 is not None:
        if losses(ref3)[0] != losses(got3)[0] or ckpt("m6_np1", 1) != ckpt("m6_np3", 1):
            failures.append("3 ranks, 6 shards: losses or checkpoint differ from 1 process")
        else:
            print("3 ranks (6 shards): step losses and checkpoint bit-identical to 1 process", flush=True)
    # PyNative mode on 2 ranks: the graph-mode reference's bits.
    r = run(2, args("pynative", "--mode", "pynative"))
    if r is not None and losses(r)[0] != ref_losses:
        failures.append("PyNative on 2 ranks: step losses differ from graph mode on 1 process")

    # A rank that stops answering (SIGSTOP, as a hung process would): the other fails within the time limit with an
    # error naming the collective and the rank, and the job ends.
    hang_env = dict(env)
    hang_env["SPORE_COMM_TIMEOUT"] = "3"
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", spore] + args("hang", epochs=200)
    print("$", " ".join(cmd), "(one rank SIGSTOPped after 3 s)", flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=hang_env)
    time.sleep(3)
    ranks = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    if len(ranks) != 2 or p.poll() is not None:
        failures.append(f"hang case: expected 2 running ranks under mpirun, found {ranks} (exit {p.poll()})")
        p.kill()
    else:
        os.kill(int(ranks[-1]), signal.SIGSTOP)
        t0 = time.time()
        try:
            _, err = p.communicate(timeout=60)
            took = time.time() - t0
            line = next((l for l in err.splitlines() if "timed out" in l), "")
            # The stopped rank may have been reached in any collective, sending or receiving.
            named = re.search(r"\w+: rank \d+ timed out after \d+ s waiting (for data from|to send to) rank \d+", line)
            if p.returncode == 0 or not named or took > 30:
                failures.append(f"hang case: exit {p.returncode} after {took:.1f} s, stderr:\n{err[-1500:]}")
            else:
                print(f"  -> after {took:.1f} s: {line}", flush=True)
        except subprocess.TimeoutExpired:
            failures.append("hang case: the job did not end within 60 s of stopping a rank")
            p.kill()
            p.communicate()
        for pid in ranks:  # the stopped rank, if mpirun left it
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

    # Resume: 2 ranks continue from 1 process's epoch-1 checkpoint; every rank loads it.
    r = run(2, args("resumed", "--resume", os.path.join(tmp, "np1", "simplenet_epoch1.safetensors")))
    if r is not None:
        got, _ = losses(r)
        if got != ref_losses[len(ref_losses) // 2:]:
            failures.append("resumed on 2 ranks: epoch 2's step losses differ from the uninterrupted run")
        if ckpt("resumed", 2) != ckpt("np1", 2):
            failures.append("resumed on 2 ranks: the final checkpoint differs from the uninterrupted run")

    def expect_error(np_argv, needle, env=env):
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe"] + np_argv
        print("$", " ".join(cmd), flush=True)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=LIMIT, env=env)
        except subprocess.TimeoutExpired:
            failures.append(f"hung (> {LIMIT} s) instead of failing with '{needle}'")
            return
        if r.returncode == 0 or needle not in r.stderr:
            failures.append(f"expected a failure saying '{needle}', got exit {r.returncode}:\n{r.stderr[-1500:]}")
        else:
            line = next(l for l in r.stderr.splitlines() if needle in l)
            print("  ->", line, flush=True)

    # Ranks that disagree (here: the seed, so the initial parameters too) stop at start-up.
    expect_error(["-np", "1", spore] + args("bad") + ["--seed", "1"] + [":", "-np", "1", spore] + args("bad"),
                 "configuration mismatch across ranks")
    expect_error(["-np", "1", spore] + args("bad") + ["--bucket-mb", "1"] + [":", "-np", "1", spore] + args("bad"),
                 "rank 1's bucket_mb")
    expect_error(["-np", "2", spore] + args("bad") + ["--sync-bn"], "sync_bn needs one shard per rank")
    expect_error(["-np", "4", spore] + args("bad", shards=2), "grad_shards 2 on 4 ranks")
    expect_error(["-np", "3", spore] + args("bad"), "grad_shards 4 on 3 ranks")
    no_module = dict(env)
    no_module["SPORE_MPI_MODULE"] = os.path.join(tmp, "missing", "libspore_mpi.so")
    expect_error(["-np", "2", spore] + args("bad"), "MPI module (libspore_mpi.so) cannot be loaded", env=no_module)

    shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print("data-parallel training:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
