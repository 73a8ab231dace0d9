#!/usr/bin/env python3
"""Gradient accumulation and AMP dynamic loss scaling under data parallelism: `spore train --parallel data
--grad-shards 4 --accum 2 --amp-level O2 --amp-dtype f16 --loss-scale dynamic` (the scale starts at 2^24, so the
first steps overflow f16 and are skipped) gives, on 1, 2 and 4 ranks, the same step losses, the same epoch lines
(loss, loss scale, overflow steps) and the same final checkpoint bytes. A step overflows when the reduced
gradient is not finite, so an overflow in any rank's shard skips the step on every rank alike. A run resumed from a
mid-epoch --ckpt-every checkpoint (which carries the scale and its counters) on 2 ranks ends with the same bits.
Without mpirun: SKIPPED (exit 77), a failure when CI=true.

usage: dp_accum_amp_test.py SPORE DIGITS_CSV_GZ [MPI_MODULE]"""
import json
import os
import shutil
import sys
import tempfile

from mpi_run import launch, mpi_setup, run_checked

LIMIT = 180


def main():
    spore, digits = sys.argv[1], sys.argv[2]
    module = sys.argv[3] if len(sys.argv) > 3 else ""
    mpirun, env, rc = mpi_setup(module)
    if mpirun is None:
        return rc
    failures = []
    tmp = tempfile.mkdtemp(prefix="spore_dp_amp_")

    def args(ckpt, *extra):
        return ["train", "--model", "simplenet", "--dataset", "digits:" + digits, "--epochs", "2", "--batch", "32",
                "--parallel", "data", "--grad-shards", "4", "--accum", "2", "--amp-level", "O2", "--amp-dtype", "f16",
                "--loss-scale", "dynamic", "--json", "--log-every", "1", "--threads", "1",
                "--ckpt-dir", os.path.join(tmp, ckpt)] + list(extra)

    def run(np_, argv):
        r = run_checked(launch(mpirun, np_, [spore] + argv), env, failures, LIMIT)
        if r is None:
            return None
        lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        steps = [(l["step"], l["loss"]) for l in lines if "step" in l and "final" not in l]
        epochs = [(l["epoch"], l["loss"], l["loss_scale"], l["overflow_steps"]) for l in lines
                  if "step" not in l and "final" not in l]
        return steps, epochs

    def ckpt(name, f="simplenet_epoch2.safetensors"):
        with open(os.path.join(tmp, name, f), "rb") as fh:
            return fh.read()

    ref = run(0, args("np1", "--ckpt-every", "7"))
    if ref is None:
        print("\n".join(failures))
        return 1
    ref_steps, ref_epochs = ref
    # 44 batches of 32 per epoch (1437 digits), 2 per optimizer step: 22 steps per epoch, less the skipped ones.
    if len(ref_steps) != 88 or ref_epochs[-1][3] <= 0 or ref_epochs[-1][2] >= 2 ** 24:
        failures.append(f"1 process: expected 88 micro-batch losses and overflowed steps with the scale reduced "
                        f"from 2^24, got {len(ref_steps)} losses, epochs {ref_epochs}")
    else:
        print(f"  1 process: {ref_epochs[-1][3]} steps skipped for overflow, loss scale {ref_epochs[-1][2]:g}",
              flush=True)
    for np_ in (2, 4):
        got = run(np_, args(f"np{np_}"))
        if got is None:
            continue
        if got[0] != ref_steps:
            failures.append(f"{np_} ranks: the micro-batch losses differ from 1 process")
        if got[1] != ref_epochs:
            failures.append(f"{np_} ranks: epoch lines {got[1]} differ from 1 process's {ref_epochs}")
        if ckpt(f"np{np_}") != ckpt("np1"):
            failures.append(f"{np_} ranks: the final checkpoint differs from 1 process")
        if not any(f.startswith(f"{np_} ranks") for f in failures):
            print(f"  {np_} ranks: losses, loss scale, overflow steps and checkpoint bit-identical to 1 process",
                  flush=True)
    # Resume mid-epoch (step 28: epoch 2, with the reduced scale and its good-step count in the checkpoint).
    step28 = os.path.join(tmp, "np1", "simplenet_step28.safetensors")
    if not os.path.exists(step28):
        failures.append("no --ckpt-every checkpoint at step 28 (step 7's multiples)")
    else:
        got = run(2, args("resumed", "--resume", step28))
        if got is not None and (ckpt("resumed") != ckpt("np1") or got[1] != ref_epochs[1:]):
            failures.append(f"resumed at step 28 on 2 ranks: the final checkpoint or the epoch line {got[1]} differs "
                            f"from the uninterrupted run's {ref_epochs[1:]}")
        elif got is not None:
            print("  resumed at step 28 on 2 ranks: bit-identical to the uninterrupted run", flush=True)

    shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print("data parallel with accumulation and loss scaling:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
