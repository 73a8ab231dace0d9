#!/usr/bin/env python3
"""Pipeline-parallel `spore train-lm --parallel pipeline` under mpirun: a 4-block Llama on a generated text, 4
micro-batches per step, gives with 2 stages (GPipe and 1F1B) and 4 stages (1F1B) the same per-step losses, the same
validation losses and the same GGUF bytes as one process with --accum 4; a one-process run stopped after step 2
resumes as a 2-stage pipeline (and a pipeline stopped after step 4 resumes in one process) to the same GGUF; --stages
that differs from the rank count is a clear error.
Without mpirun: SKIPPED (exit 77), a failure when CI=true.

usage: pp_train_lm_test.py SPORE [MPI_MODULE]"""
import os
import shutil
import sys
import tempfile

from mpi_run import gguf_bytes, mpi_setup, train_lm, write_ducks_text

LIMIT = 180


def main():
    spore = sys.argv[1]
    mpirun, env, rc = mpi_setup(sys.argv[2] if len(sys.argv) > 2 else "")
    if mpirun is None:
        return rc
    tmp = tempfile.mkdtemp(prefix="spore_pplm_")
    text = os.path.join(tmp, "text.txt")
    write_ducks_text(text)
    failures = []

    def run(np, name, *extra, expect_fail=False):
        return train_lm(spore, mpirun, np, env, failures, LIMIT, tmp, text, name, extra, layers=4,
                        expect_fail=expect_fail)

    def gguf(name):
        return gguf_bytes(tmp, name)

    ref, _ = run(0, "one", "--accum", "4")
    if len(ref) != 8:
        failures.append(f"1 process: {len(ref)} step and eval losses, expected 6 + 2")
    for stages, schedule in ((2, "gpipe"), (2, "1f1b"), (4, "1f1b")):
        name = f"pp{stages}_{schedule}"
        got, _ = run(stages, name, "--parallel", "pipeline", "--stages", str(stages), "--micro-batches", "4",
                     "--schedule", schedule)
        if got != ref:
            failures.append(f"{stages} stages {schedule}: losses {got} differ from 1 process with --accum 4 {ref}")
        if not gguf(name) or gguf(name) != gguf("one"):
            failures.append(f"{stages} stages {schedule}: the GGUF differs from 1 process")
        elif got == ref:
            print(f"{stages} stages, {schedule}: 6 step losses, 2 validation losses and the GGUF bit-identical to "
                  "1 process with --accum 4", flush=True)
    # Checkpoints have one format: a one-process run resumes as a pipeline and the other way round.
    first, _ = run(0, "resume_a", "--accum", "4", "--stop-after", "2")
    rest, _ = run(2, "resume_a", "--parallel", "pipeline", "--micro-batches", "4")
    if gguf("resume_a") != gguf("one") or [e for e in first + rest if e[0] == "step"] != [e for e in ref if e[0] == "step"]:
        failures.append("stopped in 1 process after step 2, resumed as a 2-stage pipeline: losses or GGUF differ")
    run(2, "resume_b", "--parallel", "pipeline", "--micro-batches", "4", "--schedule", "gpipe", "--stop-after", "4")
    run(0, "resume_b", "--accum", "4")
    if gguf("resume_b") != gguf("one"):
        failures.append("a 2-stage pipeline stopped after step 4, resumed in 1 process: the GGUF differs")
    _, out = run(2, "bad", "--parallel", "pipeline", "--stages", "3", expect_fail=True)
    if "--stages 3 but 2 ranks" not in out:
        failures.append(f"--stages 3 on 2 ranks: no clear error in {out[-1000:]}")
    shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print("pipeline-parallel train-lm:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
