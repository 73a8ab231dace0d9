#!/usr/bin/env python3
"""Collectives on the profiler timeline: `mpirun -np 2 spore train --parallel data --profile T.json` writes one Chrome
trace per rank (T.rank0.json, T.rank1.json). Checks: each is its own process (pid rank + 1, "spore rank R"), every
step's allreduce is a "comm" event with args bytes (the gradient vector + loss, f32), gbps (bytes / duration) and
wait_ms (blocked on the peer, at most the duration); the traces merge - both count time from one instant of rank 0's
clock (each rank's offset from ping-pongs), so rank 0's k-th allreduce and rank 1's overlap in time (neither can
finish before the other has started); and the final JSON's
comm stats carry wait_seconds.

Overlap: with --bucket-mb 0.01 (10 KiB buckets: SimpleNet's 23 KiB of gradients make 3) each step's allreduces are
several buckets that together carry the whole vector, on the communication thread (not the main thread); in every
step backward hands the first bucket over (its "bucket 0 ready" instant) while the shard's forward+backward plan (a
"run" span on the main thread) is still running, and in some steps its allreduce starts before that run ends (how
many depends on scheduling: printed, at least one required) - backward computes the first layers' gradients while
the last layers' are reduced. In PyNative mode (--mode pynative) the tape hands each gradient on as soon as backward
has finished it: in every step backward's kernels still run on the main thread between the first bucket's "ready"
instant and the last's, and the buckets are reduced on the communication thread. Without mpirun: SKIPPED (exit 77), a failure when CI=true.

usage: dp_trace_test.py SPORE DIGITS_CSV_GZ [MPI_MODULE]"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from mpi_run import mpi_setup

TOLERANCE_US = 2000  # the clock-offset estimate's error (half the shortest ping-pong), generously


def main():
    spore, digits = sys.argv[1], sys.argv[2]
    module = sys.argv[3] if len(sys.argv) > 3 else ""
    mpirun, env, rc = mpi_setup(module)
    if mpirun is None:
        return rc
    failures = []
    tmp = tempfile.mkdtemp(prefix="spore_dp_trace_")
    trace = os.path.join(tmp, "t.json")
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", spore, "train", "--model", "simplenet",
           "--dataset", "digits:" + digits, "--epochs", "1", "--batch", "64", "--parallel", "data", "--grad-shards",
           "2", "--json", "--threads", "1", "--profile", trace]
    print("$", " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    except subprocess.TimeoutExpired:
        print("FAIL: timed out")
        return 1
    if r.returncode != 0:
        print(f"FAIL: exit {r.returncode}\n{r.stderr[-2000:]}")
        return 1
    final = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")][-1]
    steps = final["steps"]
    ar = final["comm"]["allreduce"]
    if not 0 <= ar.get("wait_seconds", -1) <= ar["seconds"]:
        failures.append(f"final comm.allreduce {ar}: wait_seconds missing or not within seconds")

    spans = []
    for rank in (0, 1):
        with open(os.path.join(tmp, f"t.rank{rank}.json")) as f:
            events = json.load(f)["traceEvents"]
        names = [e for e in events if e.get("ph") == "M" and e["name"] == "process_name"]
        if not names or names[0]["pid"] != rank + 1 or names[0]["args"]["name"] != f"spore rank {rank}":
            failures.append(f"rank {rank}: process_name {names}, expected pid {rank + 1} 'spore rank {rank}'")
        if any(e["pid"] != rank + 1 for e in events):
            failures.append(f"rank {rank}: events with another pid than {rank + 1}")
        comm = [e for e in events if e.get("cat") == "comm" and e["name"].startswith("allreduce")]
        comm.sort(key=lambda e: e["ts"])
        spans.append(comm)
        # Every step reduces the same flat vector (the gradients and the loss, f32): the final line's bytes / calls.
        per_call = ar["bytes"] / ar["calls"]
        bad = [e for e in comm if e["args"].get("bytes") != per_call or e["args"].get("gbps", 0) <= 0
               or not 0 <= e["args"].get("wait_ms", -1) <= e["dur"] / 1e3 + 1e-6]
        if len(comm) != steps or bad:
            failures.append(f"rank {rank}: {len(comm)} allreduce events for {steps} steps; bad args: {bad[:2]}")
        else:
            waits = sum(e["args"]["wait_ms"] for e in comm)
            print(f"  rank {rank}: {len(comm)} allreduce events, {comm[0]['args']['bytes']:.0f} bytes each, "
                  f"{waits:.1f} ms blocked on the peer in all", flush=True)
    if len(spans[0]) == len(spans[1]):
        apart = [k for k, (a, b) in enumerate(zip(*spans))
                 if a["ts"] > b["ts"] + b["dur"] + TOLERANCE_US or b["ts"] > a["ts"] + a["dur"] + TOLERANCE_US]
        if apart:
            failures.append(f"merged traces: allreduce {apart[:5]} of rank 0 and rank 1 do not overlap in time")
        else:
            print("  merged: every step's allreduce overlaps in time on the two ranks' timelines", flush=True)

    check_overlap(spore, digits, mpirun, env, tmp, ar["bytes"] / ar["calls"], failures)
    check_overlap_pynative(spore, digits, mpirun, env, tmp, ar["bytes"] / ar["calls"], failures)
    shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print("collectives on the per-rank timelines:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


def bucketed_run(spore, digits, mpirun, env, tmp, name, mode, failures):
    """2 ranks of SimpleNet with 10 KiB buckets and --profile in `mode`: (steps, [(events, main thread ids) per
    rank]), or None after a failure."""
    trace = os.path.join(tmp, name + ".json")
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", spore, "train", "--model", "simplenet",
           "--dataset", "digits:" + digits, "--epochs", "1", "--batch", "64", "--parallel", "data", "--grad-shards",
           "2", "--json", "--threads", "1", "--bucket-mb", "0.01", "--mode", mode, "--profile", trace]
    print("$", " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    except subprocess.TimeoutExpired:
        failures.append(f"{mode} bucketed run timed out")
        return None
    if r.returncode != 0:
        failures.append(f"{mode} bucketed run: exit {r.returncode}\n{r.stderr[-2000:]}")
        return None
    steps = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")][-1]["steps"]
    ranks = []
    for rank in (0, 1):
        with open(os.path.join(tmp, f"{name}.rank{rank}.json")) as f:
            events = json.load(f)["traceEvents"]
        ranks.append((events, [e["tid"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"
                               and e["args"]["name"].startswith("main")]))
    return steps, ranks


def check_overlap(spore, digits, mpirun, env, tmp, vector_bytes, failures):
    run = bucketed_run(spore, digits, mpirun, env, tmp, "b", "graph", failures)
    if run is None:
        return
    steps, ranks = run
    for rank, (events, main_tid) in enumerate(ranks):
        runs = [e for e in events if e.get("cat") == "run" and e["tid"] in main_tid]
        comm = sorted((e for e in events if e.get("cat") == "comm" and e["name"].startswith("allreduce")),
                      key=lambda e: e["ts"])
        if not comm or len(comm) % steps or any(e["tid"] in main_tid for e in comm):
            failures.append(f"rank {rank}: {len(comm)} bucket allreduces for {steps} steps, or some on the main "
                            "thread")
            continue
        per_step = len(comm) // steps
        sizes = [sum(e["args"]["bytes"] for e in comm[k * per_step:(k + 1) * per_step]) for k in range(steps)]
        if per_step < 2 or any(b != vector_bytes for b in sizes):
            failures.append(f"rank {rank}: {per_step} buckets per step carrying {set(sizes)} bytes, expected >= 2 "
                            f"carrying the {vector_bytes:.0f}-byte vector")
            continue
        handed = sorted((e for e in events if e.get("cat") == "bucket" and e["name"] == "bucket 0 ready"),
                        key=lambda e: e["ts"])
        inside = [h for h in handed if any(r["ts"] <= h["ts"] <= r["ts"] + r["dur"] for r in runs)]
        if len(handed) != steps or len(inside) != steps:
            failures.append(f"rank {rank}: {len(handed)} 'bucket 0 ready' instants for {steps} steps, {len(inside)} "
                            "of them while the step's plan ran")
        overlapped = 0
        for k in range(steps):
            if any(r["ts"] <= a["ts"] <= r["ts"] + r["dur"] for a in comm[k * per_step:(k + 1) * per_step]
                   for r in runs):
                overlapped += 1
        print(f"  rank {rank}: {per_step} buckets per step on the communication thread, the first handed over "
              f"during backward in {len(inside)} of {steps} steps; in {overlapped} of {steps} steps its allreduce "
              "started while backward was still running", flush=True)
        if overlapped == 0:
            failures.append(f"rank {rank}: no allreduce overlapped backward in {steps} steps")


def check_overlap_pynative(spore, digits, mpirun, env, tmp, vector_bytes, failures):
    run = bucketed_run(spore, digits, mpirun, env, tmp, "p", "pynative", failures)
    if run is None:
        return
    steps, ranks = run
    for rank, (events, main_tid) in enumerate(ranks):
        kernels = [e["ts"] for e in events if e.get("cat") == "kernel" and e["tid"] in main_tid]
        comm = [e for e in events if e.get("cat") == "comm" and e["name"].startswith("allreduce")]
        ready = sorted((e for e in events if e.get("cat") == "bucket"), key=lambda e: e["ts"])
        per_step = len(ready) // steps if steps else 0
        if (per_step < 2 or len(ready) != per_step * steps or len(comm) != len(ready)
                or any(e["tid"] in main_tid for e in comm)):
            failures.append(f"pynative rank {rank}: {len(ready)} buckets handed and {len(comm)} reduced for {steps} "
                            "steps (expected >= 2 a step, reduced off the main thread)")
            continue
        sizes = [sum(e["args"]["bytes"] for e in comm[k * per_step:(k + 1) * per_step]) for k in range(steps)]
        if any(b != vector_bytes for b in sizes):
            failures.append(f"pynative rank {rank}: a step's buckets carry {set(sizes)} bytes, not the vector's "
                            f"{vector_bytes:.0f}")
        during = 0
        for k in range(steps):
            first, last = ready[k * per_step], ready[(k + 1) * per_step - 1]
            if first["name"] == "bucket 0 ready" and any(first["ts"] < t < last["ts"] for t in kernels):
                during += 1
        print(f"  pynative rank {rank}: {per_step} buckets per step; backward kernels ran after the first was handed "
              f"over in {during} of {steps} steps", flush=True)
        if during != steps:
            failures.append(f"pynative rank {rank}: backward still running after the first bucket in only {during} "
                            f"of {steps} steps")


if __name__ == "__main__":
    sys.exit(main())
