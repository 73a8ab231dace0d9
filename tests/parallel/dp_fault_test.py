#!/usr/bin/env python3
"""A rank killed mid-epoch, then --resume: `mpirun -np 2 spore train --parallel data --ckpt-every 5` writes a
checkpoint every 5 optimizer steps; once step 10's exists one rank gets SIGKILL. OpenMPI 4.1 then ends the job
itself: mpirun names the dead rank ("process rank 1 ... exited on signal 9") and sends SIGTERM to the others, and
spore's handler on the surviving rank names itself and the collective it was in. The job must end within 30 s,
non-zero, with both lines. Then `--resume` from the newest step checkpoint (mid-epoch) on 2 ranks, and again on 1
process, finishes training with the uninterrupted run's step losses, epoch losses and final checkpoint bytes.
Without mpirun: SKIPPED (exit 77), a failure when CI=true.

usage: dp_fault_test.py SPORE DIGITS_CSV_GZ [MPI_MODULE]"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from mpi_run import mpi_setup, run_checked

LIMIT = 180  # seconds per run
EPOCHS = 3   # 22 steps each (1437 digits, batches of 64)


def main():
    spore, digits = sys.argv[1], sys.argv[2]
    module = sys.argv[3] if len(sys.argv) > 3 else ""
    mpirun, env, rc = mpi_setup(module)
    if mpirun is None:
        return rc
    failures = []
    tmp = tempfile.mkdtemp(prefix="spore_dp_fault_")
    mpi = [mpirun, "--allow-run-as-root", "--oversubscribe"]

    def args(ckpt, *extra):
        return ["train", "--model", "simplenet", "--dataset", "digits:" + digits, "--epochs", str(EPOCHS), "--batch",
                "64", "--parallel", "data", "--grad-shards", "4", "--json", "--log-every", "1", "--threads", "1",
                "--ckpt-dir", os.path.join(tmp, ckpt)] + list(extra)

    def run(cmd):
        return run_checked(cmd, env, failures, LIMIT)

    def parse(stdout):
        lines = [json.loads(l) for l in stdout.splitlines() if l.startswith("{")]
        steps = [(l["step"], l["loss"]) for l in lines if "step" in l and "final" not in l]
        epochs = [(l["epoch"], l["loss"]) for l in lines if "step" not in l and "final" not in l]
        return steps, epochs

    def read(path):
        with open(path, "rb") as f:
            return f.read()

    # The uninterrupted run (one process: the bits every rank count gives).
    ref = run([spore] + args("ref"))
    if ref is None:
        print("\n".join(failures))
        return 1
    ref_steps, ref_epochs = parse(ref.stdout)
    final_name = f"simplenet_epoch{EPOCHS}.safetensors"
    ref_final = read(os.path.join(tmp, "ref", final_name))

    # The run that loses a rank.
    cmd = mpi + ["-np", "2", spore] + args("killed", "--ckpt-every", "5")
    print("$", " ".join(cmd), "(rank 1 gets SIGKILL once step 10's checkpoint exists)", flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    killed_at = None
    for line in p.stdout:  # both ranks print; a step line comes after that step's checkpoint (a barrier)
        if line.startswith("{") and json.loads(line).get("step", 0) >= 10:
            killed_at = json.loads(line)["step"]
            break
    ranks = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    if killed_at is None or len(ranks) != 2:
        failures.append(f"kill case: expected 2 running ranks past step 10, found ranks {ranks}, step {killed_at}")
        p.kill()
        p.communicate()
    else:
        os.kill(int(ranks[-1]), signal.SIGKILL)  # children in launch order: the last is rank 1
        t0 = time.time()
        try:
            _, err = p.communicate(timeout=60)
            took = time.time() - t0
            dead = next((l for l in err.splitlines() if re.search(r"rank 1 .*exited on signal 9", l)), "")
            ours = next((l for l in err.splitlines() if l.startswith("spore: rank 0 ")), "")
            named = re.search(r"rank 0 terminated by SIGTERM .* (in (allreduce|barrier|broadcast|allgather) waiting "
                              r"for rank 1|between collectives, computing after \w+)", ours)
            if p.returncode == 0 or not dead or not named or took > 30:
                failures.append(f"kill case: exit {p.returncode} after {took:.1f} s; expected mpirun to name rank 1 "
                                f"and rank 0 to name its collective; stderr:\n{err[-2500:]}")
            else:
                print(f"  -> killed at step ~{killed_at}; the job ended {took:.1f} s later (exit {p.returncode}):\n"
                      f"     {dead.strip()}\n     {ours.strip()}", flush=True)
        except subprocess.TimeoutExpired:
            failures.append("kill case: the job did not end within 60 s of killing rank 1")
            p.kill()
            p.communicate()
        for pid in ranks:  # whatever mpirun left behind
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

    # Resume from the newest step checkpoint, mid-epoch, on 2 ranks and on 1 process.
    saved = sorted((int(m.group(1)), f) for f in os.listdir(os.path.join(tmp, "killed"))
                   if (m := re.fullmatch(r"simplenet_step(\d+)\.safetensors", f)))
    if not saved or saved[-1][0] < 10 or saved[-1][0] % 22 == 0:
        failures.append(f"kill case: expected a mid-epoch step checkpoint at step >= 10, found {saved}")
    else:
        step, name = saved[-1]
        ckpt = os.path.join(tmp, "killed", name)
        print(f"resuming from {name} (epoch {step // 22 + 1}, batch {step % 22})", flush=True)
        for np_, label in ((2, "resume_np2"), (0, "resume_np1")):
            cmd = ([spore] if np_ == 0 else mpi + ["-np", str(np_), spore]) + args(label, "--resume", ckpt)
            r = run(cmd)
            if r is None:
                continue
            steps, epochs = parse(r.stdout)
            who = f"resumed on {np_ or 1} rank(s)"
            if steps != [s for s in ref_steps if s[0] > step]:
                failures.append(f"{who}: the step losses after step {step} differ from the uninterrupted run's")
            if epochs != ref_epochs[step // 22:]:
                failures.append(f"{who}: epoch losses {epochs} differ from the uninterrupted run's "
                                f"{ref_epochs[step // 22:]}")
            if read(os.path.join(tmp, label, final_name)) != ref_final:
                failures.append(f"{who}: the final checkpoint differs from the uninterrupted run's")
            if not any(f.startswith(who) for f in failures):
                print(f"  -> {who}: {len(steps)} step losses, {len(epochs)} epoch losses and the final checkpoint "
                      "bit-identical to the uninterrupted run", flush=True)

    shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print("rank failure and resume:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
