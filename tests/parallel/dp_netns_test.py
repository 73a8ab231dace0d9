#!/usr/bin/env python3
"""Two "hosts" on one machine: data-parallel `spore train` with one rank in each of two network namespaces joined by
a veth pair (10.x addresses), over OpenMPI's TCP transport (`--mca btl tcp,self`, `btl_tcp_if_include` and
`oob_tcp_if_include` on the veth subnet), so the code path is the multi-host one. mpirun runs in the first namespace
and starts the second "host"'s daemon through an rsh agent that is `ip netns exec NS` instead of ssh
(`--mca plm_rsh_agent`). Checks: each rank ran in its own namespace, and the step losses and the final checkpoint
are bit-identical to one process. Needs root and iproute2 (`ip`): SKIPPED (exit 77) without them or mpirun, a
failure when CI=true. The namespaces are removed on every exit path.

usage: dp_netns_test.py SPORE DIGITS_CSV_GZ [MPI_MODULE]"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from mpi_run import mpi_setup

LIMIT = 180


def skip(why):
    ci = os.environ.get("CI") == "true"
    print(("FAIL" if ci else "SKIPPED") + ": " + why)
    return 1 if ci else 77


def sh(*cmd, check=True):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def main():
    spore, digits = os.path.abspath(sys.argv[1]), sys.argv[2]
    module = sys.argv[3] if len(sys.argv) > 3 else ""
    mpirun, env, rc = mpi_setup(module)
    if mpirun is None:
        return rc
    if os.geteuid() != 0:
        return skip("network namespaces need root")
    ip = shutil.which("ip")
    if ip is None:
        return skip("`ip` (iproute2) not found: scripts/install-deps.sh installs it")

    tag = os.getpid() % 100000
    ns = [f"spore{tag}a", f"spore{tag}b"]
    veth = [f"sp{tag}a", f"sp{tag}b"]
    subnet = f"10.{200 + tag % 50}.{tag % 250}"
    addr = [f"{subnet}.1", f"{subnet}.2"]
    tmp = tempfile.mkdtemp(prefix="spore_dp_netns_")
    created = []

    def cleanup(*_):
        for n in reversed(created):  # a namespace takes its end of the veth pair with it
            sh(ip, "netns", "del", n, check=False)
        created.clear()
        shutil.rmtree(tmp, ignore_errors=True)

    # ctest's timeout sends SIGTERM: clean up then too.
    signal.signal(signal.SIGTERM, lambda *_: (cleanup(), sys.exit(1)))
    failures = []
    try:
        try:
            for n in ns:
                sh(ip, "netns", "add", n)
                created.append(n)
            sh(ip, "link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
            for i in (0, 1):
                sh(ip, "link", "set", veth[i], "netns", ns[i])
                sh(ip, "-n", ns[i], "addr", "add", addr[i] + "/24", "dev", veth[i])
                sh(ip, "-n", ns[i], "link", "set", veth[i], "up")
                sh(ip, "-n", ns[i], "link", "set", "lo", "up")
        except RuntimeError as e:
            if os.environ.get("CI") == "true":
                raise
            return skip(f"cannot create network namespaces here ({e})")
        print(f"namespaces {ns[0]} ({addr[0]}) and {ns[1]} ({addr[1]}) joined by veth {veth[0]}-{veth[1]}", flush=True)

        # mpirun's rsh agent: `AGENT HOST COMMAND...` runs COMMAND in HOST's namespace (here: the second one; the
        # first is mpirun's own, which OpenMPI sees as local and launches without the agent).
        agent = os.path.join(tmp, "netns_rsh.sh")
        with open(agent, "w") as f:
            f.write("#!/bin/sh\nhost=$1; shift\ncase \"$host\" in\n"
                    f"  {addr[0]}) ns={ns[0]} ;;\n  {addr[1]}) ns={ns[1]} ;;\n"
                    "  *) echo \"netns_rsh: unknown host $host\" >&2; exit 1 ;;\nesac\n"
                    f"exec {ip} netns exec \"$ns\" /bin/sh -c \"$*\"\n")
        # Each rank records its network namespace, then becomes spore.
        wrapper = os.path.join(tmp, "rank.sh")
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\nreadlink /proc/self/ns/net > {tmp}/netns.rank$OMPI_COMM_WORLD_RANK\nexec \"$@\"\n")
        os.chmod(agent, 0o755)
        os.chmod(wrapper, 0o755)

        def args(ckpt):
            return ["train", "--model", "simplenet", "--dataset", "digits:" + os.path.abspath(digits), "--epochs", "1",
                    "--batch", "64", "--parallel", "data", "--grad-shards", "4", "--json", "--log-every", "1",
                    "--threads", "1", "--ckpt-dir", os.path.join(tmp, ckpt)]

        def losses(out):
            return [(l["step"], l["loss"]) for l in map(json.loads, filter(lambda l: l.startswith("{"),
                                                                           out.splitlines()))
                    if "step" in l and "final" not in l]

        ref = subprocess.run([spore] + args("np1"), capture_output=True, text=True, timeout=LIMIT, env=env)
        if ref.returncode != 0:
            failures.append(f"1 process: exit {ref.returncode}\n{ref.stderr[-2000:]}")
            return 1
        cidr = subnet + ".0/24"
        cmd = [ip, "netns", "exec", ns[0], mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
               "--host", f"{addr[0]}:1,{addr[1]}:1", "--mca", "plm_rsh_agent", agent,
               "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", cidr, "--mca", "oob_tcp_if_include", cidr,
               "-x", "SPORE_MPI_MODULE", "-x", "OMPI_MCA_btl_vader_single_copy_mechanism", wrapper, spore] + args("np2")
        print("$", " ".join(cmd), flush=True)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=LIMIT, env=env)
        except subprocess.TimeoutExpired:
            failures.append(f"2 ranks in 2 namespaces: timed out after {LIMIT} s")
            return 1
        if r.returncode != 0:
            failures.append(f"2 ranks in 2 namespaces: exit {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-2500:]}")
            return 1

        want = [sh(ip, "netns", "exec", n, "readlink", "/proc/self/ns/net").stdout.strip() for n in ns]
        got = []
        for k in (0, 1):
            with open(os.path.join(tmp, f"netns.rank{k}")) as f:
                got.append(f.read().strip())
        if got != want:
            failures.append(f"the ranks ran in network namespaces {got}, expected {want} (rank 0 in {ns[0]}, "
                            f"rank 1 in {ns[1]})")
        else:
            print(f"  rank 0 in {ns[0]} {got[0]}, rank 1 in {ns[1]} {got[1]}", flush=True)
        ref_losses, got_losses = losses(ref.stdout), losses(r.stdout)
        if not ref_losses or got_losses != ref_losses:
            failures.append(f"2 ranks over TCP: {len(got_losses)} step losses differ from 1 process's "
                            f"{len(ref_losses)}")
        name = "simplenet_epoch1.safetensors"
        with open(os.path.join(tmp, "np1", name), "rb") as a, open(os.path.join(tmp, "np2", name), "rb") as b:
            if a.read() != b.read():
                failures.append("2 ranks over TCP: the final checkpoint differs from 1 process's")
        if not failures:
            print(f"  {len(got_losses)} step losses and the checkpoint bit-identical to 1 process", flush=True)
    finally:
        for f in failures:
            print("FAIL", f)
        cleanup()
    print("two-host data parallel over TCP:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
