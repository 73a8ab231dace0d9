#!/usr/bin/env python3
"""Data-parallel `spore train-lm --parallel data` under mpirun: a small Llama on a generated text with 4 gradient
shards gives, on 2 and 4 ranks, the same per-step losses and the same GGUF bytes as one process; a 2-rank run stopped
after step 4 (--stop-after) and resumed on 4 ranks ends with the same GGUF.
Without mpirun: SKIPPED (exit 77), a failure when CI=true.

usage: dp_train_lm_test.py SPORE [MPI_MODULE]"""
import json
import os
import shutil
import sys
import tempfile

from mpi_run import launch, mpi_setup, run_checked, write_ducks_text

LIMIT = 180


def main():
    spore = sys.argv[1]
    mpirun, env, rc = mpi_setup(sys.argv[2] if len(sys.argv) > 2 else "")
    if mpirun is None:
        return rc
    tmp = tempfile.mkdtemp(prefix="spore_dplm_")
    text = os.path.join(tmp, "text.txt")
    write_ducks_text(text)
    failures = []

    def run(np, name, *extra):
        argv = [spore, "train-lm", "--arch", "llama", "--dim", "32", "--layers", "2", "--heads", "4", "--kv-heads", "2",
                "--ffn", "48", "--ctx", "16", "--data", text, "--train-tokenizer", "--vocab", "300", "--batch", "8",
                "--steps", "8", "--lr", "0.005", "--warmup", "2", "--eval-every", "4", "--eval-batches", "2",
                "--seed", "3", "--threads", "1", "--json", "--log-every", "1", "--parallel", "data",
                "--grad-shards", "4", "--ckpt-dir", os.path.join(tmp, name), "-o", os.path.join(tmp, name + ".gguf")]
        r = run_checked(launch(mpirun, np, argv) + list(extra), env, failures, LIMIT)
        if r is None:
            return []
        lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        return [(l["step"], l["loss"]) for l in lines if "loss" in l and "eval" not in l and not l.get("final")]

    def gguf(name):
        path = os.path.join(tmp, name + ".gguf")
        return open(path, "rb").read() if os.path.exists(path) else b""

    ref = run(0, "np1")
    if len(ref) != 8:
        failures.append(f"1 process: {len(ref)} step losses, expected 8")
    for np in (2, 4):
        got = run(np, f"np{np}")
        if got != ref:
            failures.append(f"{np} ranks: step losses {got} differ from 1 process {ref}")
        if not gguf(f"np{np}") or gguf(f"np{np}") != gguf("np1"):
            failures.append(f"{np} ranks: the GGUF differs from 1 process")
        elif got == ref:
            print(f"{np} ranks: 8 step losses and the GGUF bit-identical to 1 process", flush=True)
    first = run(2, "resumed", "--stop-after", "4")
    rest = run(4, "resumed")
    if first + rest != ref:
        failures.append(f"stopped on 2 ranks, resumed on 4: losses {first + rest} differ from {ref}")
    if gguf("resumed") != gguf("np1"):
        failures.append("stopped on 2 ranks, resumed on 4: the GGUF differs from the uninterrupted run")
    shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print("data-parallel train-lm:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
