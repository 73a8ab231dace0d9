#!/usr/bin/env python3
"""Runs a command under `mpirun --allow-run-as-root --oversubscribe -np N` (CI runs as root on 2 cores) with a time
limit. Without mpirun it exits 77 (ctest's SKIP), unless CI=true, where a missing mpirun is a failure.

usage: mpi_run.py N TIMEOUT_S COMMAND [ARGS...]   (N = 0: run COMMAND alone, without mpirun)
The other mpi tests import mpi_setup, launch, run_checked, write_ducks_text, load_safetensors and (the model-parallel LM
tests) train_lm and gguf_bytes from here."""
import array
import json
import os
import shutil
import struct
import subprocess
import sys


def mpi_setup(module=""):
    """(mpirun, env, 0) for running spore under mpirun with the MPI module `module` (when given), or (None, None,
    exit code) after saying why not: 77 (ctest's SKIP) without mpirun or the module, 1 when CI=true."""
    ci = os.environ.get("CI") == "true"
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print(("FAIL" if ci else "SKIPPED") + ": mpirun not found (install openmpi-bin: scripts/install-deps.sh)")
        return None, None, 1 if ci else 77
    if module and not os.path.exists(module):
        print(("FAIL" if ci else "SKIPPED") + f": the MPI module {module} was not built (MPI headers missing at build "
              "time: libopenmpi-dev)")
        return None, None, 1 if ci else 77
    env = dict(os.environ)
    # Containers often forbid the cross-process memory copy (CMA) OpenMPI's shared-memory transport uses for large
    # messages ("Read -1, expected ..., errno = 1"); copying through the shared segment works everywhere.
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    if module:
        env["SPORE_MPI_MODULE"] = module
    return mpirun, env, 0


def launch(mpirun, np, argv):
    """argv as it is for np 0 (one process, no mpirun), else under `mpirun --allow-run-as-root --oversubscribe -np N`
    (CI runs as root on 2 cores)."""
    return list(argv) if np == 0 else [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np)] + list(argv)


def run_checked(cmd, env, failures, limit, expect_fail=False):
    """Runs cmd (printed first) with a time limit and its output captured. A timeout, or a run that fails (or, with
    expect_fail, one that succeeds), is appended to `failures` and gives None; otherwise the CompletedProcess."""
    print("$", " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env)
    except subprocess.TimeoutExpired:
        failures.append(f"timed out after {limit:.0f} s: {' '.join(cmd)}")
        return None
    if expect_fail and r.returncode == 0:
        failures.append(f"expected a failure: {' '.join(cmd)}")
        return None
    if not expect_fail and r.returncode != 0:
        failures.append(f"exit {r.returncode}: {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        return None
    return r


def write_ducks_text(path):
    """The small generated text the train-lm tests train on (300 lines)."""
    names = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
    with open(path, "w") as f:
        for i in range(300):
            f.write(f"{names[i % 8]} little ducks went out one day, {names[(i + 1) % 8]} came back.\n")


def load_safetensors(path):
    """{name: array('f')} of an all-F32 safetensors file (a train::Model checkpoint)."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        a = array.array("f")
        a.frombytes(data[v["data_offsets"][0]:v["data_offsets"][1]])
        out[k] = a
    return out


def train_lm(spore, mpirun, np, env, failures, limit, tmp, text, name, extra=(), arch="llama", layers=2,
             expect_fail=False):
    """The small `spore train-lm` the model-parallel tests compare (dim 32, 4 heads, 2 kv heads, 6 steps of batch 4,
    evaluated at steps 3 and 6, checkpoints in tmp/NAME, the GGUF at tmp/NAME.gguf) on np ranks (0: no mpirun), with
    `extra` arguments. Returns (losses, output): losses are ("step", step, loss) then ("eval", step, val_loss);
    with expect_fail, ([], stdout + stderr)."""
    argv = [spore, "train-lm", "--arch", arch, "--dim", "32", "--layers", str(layers), "--heads", "4", "--kv-heads",
            "2", "--ffn", "48", "--ctx", "16", "--data", text, "--train-tokenizer", "--vocab", "300", "--batch", "4",
            "--steps", "6", "--lr", "0.005", "--warmup", "2", "--eval-every", "3", "--eval-batches", "2",
            "--seed", "3", "--threads", "1", "--json", "--log-every", "1",
            "--ckpt-dir", os.path.join(tmp, name), "-o", os.path.join(tmp, name + ".gguf")]
    r = run_checked(launch(mpirun, np, argv) + list(extra), env, failures, limit, expect_fail)
    if r is None:
        return [], ""
    if expect_fail:
        return [], r.stdout + r.stderr
    lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    steps = [("step", l["step"], l["loss"]) for l in lines if "loss" in l and "eval" not in l and not l.get("final")]
    evals = [("eval", l["step"], l["val_loss"]) for l in lines if l.get("eval")]
    return steps + evals, r.stdout


def gguf_bytes(tmp, name):
    """tmp/NAME.gguf's bytes, or b"" when the run wrote none."""
    path = os.path.join(tmp, name + ".gguf")
    return open(path, "rb").read() if os.path.exists(path) else b""


def main():
    n, limit, cmd = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    env = dict(os.environ)
    if n > 0:
        mpirun, env, rc = mpi_setup(os.environ.get("SPORE_MPI_MODULE", ""))
        if mpirun is None:
            return rc
        cmd = launch(mpirun, n, cmd)
    print("$", " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd, timeout=limit, env=env)
    except subprocess.TimeoutExpired:
        print(f"FAIL: timed out after {limit:.0f} s")
        return 1
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
