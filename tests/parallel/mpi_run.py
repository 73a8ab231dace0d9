#!/usr/bin/env python3
"""Runs a command under `mpirun --allow-run-as-root --oversubscribe -np N` (CI runs as root on 2 cores) with a time
limit. Without mpirun it exits 77 (ctest's SKIP), unless CI=true, where a missing mpirun is a failure.

usage: mpi_run.py N TIMEOUT_S COMMAND [ARGS...]   (N = 0: run COMMAND alone, without mpirun)"""
import os
import shutil
import subprocess
import sys


def main():
    n, limit, cmd = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    if n > 0:
        mpirun = shutil.which("mpirun")
        if mpirun is None:
            if os.environ.get("CI") == "true":
                print("FAIL: mpirun not found (install openmpi-bin: scripts/install-deps.sh)")
                return 1
            print("SKIPPED: mpirun not found (install openmpi-bin)")
            return 77
        module = os.environ.get("SPORE_MPI_MODULE", "")
        if module and not os.path.exists(module):
            if os.environ.get("CI") == "true":
                print(f"FAIL: the MPI module {module} was not built (libopenmpi-dev missing?)")
                return 1
            print(f"SKIPPED: the MPI module {module} was not built (MPI headers missing at build time)")
            return 77
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(n)] + cmd
    env = dict(os.environ)
    # Containers often forbid the cross-process memory copy (CMA) OpenMPI's shared-memory transport uses for large
    # messages ("Read -1, expected ..., errno = 1"); copying through the shared segment works everywhere.
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    print("$", " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd, timeout=limit, env=env)
    except subprocess.TimeoutExpired:
        print(f"FAIL: timed out after {limit:.0f} s")
        return 1
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
