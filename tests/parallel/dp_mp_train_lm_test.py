#!/usr/bin/env python3
"""Data x model parallelism in one run of `spore train-lm` on 4 ranks: 2 replicas of a 2-stage pipeline
(--parallel pipeline --stages 2) and 2 replicas of 2-way tensor parallelism (--parallel tensor --tp 2). The ranks split
into groups (Communicator::split, MPI_Comm_split): each replica's ranks run the model-parallel trainer, each rank's
counterparts in the other replica sum their gradients. Replica d runs micro-batches [d M/2, (d+1) M/2) of each step.

- DP2 x PP2 with 2 micro-batches (one per replica): bit-identical to one process with --accum 2 (losses, validation
  losses, GGUF): each replica's sum is its one gradient, and the replicas' tree sum of two is the one process's sum.
- DP2 x PP2 with 4 micro-batches (1F1B and GPipe): one process sums g0..g3 in order, the replicas (g0 + g1) + (g2 + g3),
  so within f32 rounding: losses within a relative 1e-5, checkpoint tensors within 1e-4 of each tensor's largest
  magnitude (the tolerances of tp_train_lm_test.py).
- DP2 x TP2 with 2 micro-batches: within the same tolerances of one process with --accum 2 (tensor parallelism alone
  is not bit-exact).
- A DP2 x PP2 run stopped after step 3 resumes in one process to the uninterrupted GGUF; --stages 3 on 4 ranks and 3
  micro-batches over 2 replicas are clear errors.
- Observability: the groups' collectives count in the final --json line's "comm" stats and, with --profile, are on
  each rank's own trace (trace.rank<R>.json).
Without mpirun: SKIPPED (exit 77), a failure when CI=true.

usage: dp_mp_train_lm_test.py SPORE [MPI_MODULE]"""
import json
import os
import shutil
import sys
import tempfile

from mpi_run import gguf_bytes, load_safetensors, mpi_setup, train_lm, write_ducks_text

LIMIT = 240
LOSS_RTOL = 1e-5
TENSOR_TOL = 1e-4  # of the tensor's largest magnitude


def main():
    spore = sys.argv[1]
    mpirun, env, rc = mpi_setup(sys.argv[2] if len(sys.argv) > 2 else "")
    if mpirun is None:
        return rc
    tmp = tempfile.mkdtemp(prefix="spore_dpmp_")
    text = os.path.join(tmp, "text.txt")
    write_ducks_text(text)
    failures = []

    def run(np, name, *extra, expect_fail=False):
        return train_lm(spore, mpirun, np, env, failures, LIMIT, tmp, text, name, extra, layers=2,
                        expect_fail=expect_fail)

    def gguf(name):
        return gguf_bytes(tmp, name)

    def close(what, name, got, ref_name, ref):
        if not (len(got) == len(ref) == 8 and all(g[:2] == r[:2] and abs(g[2] - r[2]) <= LOSS_RTOL * abs(r[2])
                                                  for g, r in zip(got, ref))):
            failures.append(f"{what}: losses {got} not within {LOSS_RTOL} of {ref}")
            return
        a = load_safetensors(os.path.join(tmp, ref_name, "checkpoint.safetensors"))
        b = load_safetensors(os.path.join(tmp, name, "checkpoint.safetensors"))
        if sorted(a) != sorted(b):
            failures.append(f"{what}: checkpoint tensors {sorted(b)} differ from {sorted(a)}")
            return
        worst, where = 0.0, ""
        for k in a:
            scale = max(abs(x) for x in a[k]) or 1.0
            d = max(abs(x - y) for x, y in zip(a[k], b[k])) / scale
            if d > worst:
                worst, where = d, k
        if worst > TENSOR_TOL:
            failures.append(f"{what}: checkpoint tensor {where} differs by {worst:.3g} of its largest magnitude")
        else:
            same = sum(g == r for g, r in zip(got, ref))
            print(f"{what}: losses within {LOSS_RTOL} ({same} of {len(ref)} bit-equal), checkpoint tensors within "
                  f"{worst:.2g} of their largest magnitude", flush=True)

    ref2, _ = run(0, "one_a2", "--accum", "2")
    ref4, _ = run(0, "one_a4", "--accum", "4")
    got, _ = run(4, "dp2pp2_m2", "--parallel", "pipeline", "--stages", "2", "--micro-batches", "2")
    if len(ref2) != 8 or got != ref2 or not gguf("one_a2") or gguf("dp2pp2_m2") != gguf("one_a2"):
        failures.append(f"DP2 x PP2, 2 micro-batches: losses {got} or the GGUF differ from 1 process --accum 2 {ref2}")
    else:
        print("DP2 x PP2, 2 micro-batches: 6 step losses, 2 validation losses and the GGUF bit-identical to 1 process "
              "with --accum 2", flush=True)
    for schedule in ("1f1b", "gpipe"):
        name = f"dp2pp2_{schedule}"
        trace = ["--profile", os.path.join(tmp, "trace.json")] if schedule == "gpipe" else []
        got, out = run(4, name, "--parallel", "pipeline", "--stages", "2", "--micro-batches", "4", "--schedule",
                       schedule, *trace)
        close(f"DP2 x PP2 {schedule}, 4 micro-batches vs 1 process --accum 4", name, got, "one_a4", ref4)
        if trace:
            check_group_observability(tmp, out, failures)
    got, _ = run(4, "dp2tp2", "--parallel", "tensor", "--tp", "2", "--accum", "2")
    close("DP2 x TP2, 2 micro-batches vs 1 process --accum 2", "dp2tp2", got, "one_a2", ref2)
    if not gguf("dp2tp2"):
        failures.append("DP2 x TP2: no GGUF written")
    # Checkpoints: rank 0 (replica 0's first stage) writes train::Model's format, which one process resumes.
    run(4, "resumed", "--parallel", "pipeline", "--stages", "2", "--micro-batches", "2", "--stop-after", "3")
    run(0, "resumed", "--accum", "2")
    if gguf("resumed") != gguf("one_a2"):
        failures.append("DP2 x PP2 stopped after step 3, resumed in 1 process: the GGUF differs")
    _, out = run(4, "bad_stages", "--parallel", "pipeline", "--stages", "3", expect_fail=True)
    if "--stages 3 but 4 ranks" not in out:
        failures.append(f"--stages 3 on 4 ranks: no clear error in {out[-1000:]}")
    _, out = run(4, "bad_micro", "--parallel", "pipeline", "--stages", "2", "--micro-batches", "3", expect_fail=True)
    if "must divide" not in out:
        failures.append(f"3 micro-batches over 2 replicas: no clear error in {out[-1000:]}")
    shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print("data x model parallel train-lm:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


def check_group_observability(tmp, out, failures):
    """The collectives of the replica and stage groups (Communicator::split) count in the final line's "comm" (rank
    0: the pipeline's messages and one gradient allreduce over the replicas per step) and are on each rank's trace
    (--profile writes trace.rank<R>.json, process "spore rank R", "comm" spans with bytes)."""
    final = [json.loads(l) for l in out.splitlines() if l.startswith("{") and '"final"' in l]
    comm = final[-1].get("comm", {}) if final else {}
    if comm.get("allreduce", {}).get("calls", 0) < 6 or not comm.get("send") or not comm.get("recv"):
        failures.append(f"DP2 x PP2 --json comm stats miss the groups' collectives: {comm}")
        return
    for rank in range(4):
        path = os.path.join(tmp, f"trace.rank{rank}.json")
        if not os.path.exists(path):
            failures.append(f"DP2 x PP2 --profile: no {path}")
            continue
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        names = [e["args"]["name"] for e in events if e.get("name") == "process_name"]
        ops = {e["name"].split()[0] for e in events if e.get("cat") == "comm" and e["args"].get("bytes", 0) > 0}
        if names != [f"spore rank {rank}"] or "allreduce" not in ops or not ops & {"send", "recv", "sendrecv"}:
            failures.append(f"DP2 x PP2 rank {rank} trace: process {names}, comm spans {sorted(ops)}")
    print(f"DP2 x PP2 --profile: 4 per-rank traces with the groups' collectives; rank 0 comm stats "
          f"{ {k: v['calls'] for k, v in comm.items()} }", flush=True)


if __name__ == "__main__":
    sys.exit(main())
