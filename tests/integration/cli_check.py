#!/usr/bin/env python3
"""End-to-end checks of the spore CLI; one check per invocation (ctest runs each as its own test).

usage: cli_check.py SPORE CHECK [ARGS...]
"""
import json
import os
import subprocess
import sys
import tempfile


def run(spore, *args, stdin=None):
    return subprocess.run([spore, *args], capture_output=True, text=True, input=stdin, timeout=300)


def fail(msg, p=None):
    if p is not None:
        msg += f"\n--- rc={p.returncode}\n--- stdout:\n{p.stdout[-4000:]}\n--- stderr:\n{p.stderr[-4000:]}"
    sys.exit(msg)


def check_help(spore):
    p = run(spore, "--help")
    if p.returncode != 0 or "commands:" not in p.stdout:
        fail("spore --help", p)
    for cmd in ("info", "ops", "graph", "demo"):
        if cmd not in p.stdout:
            fail(f"'{cmd}' missing from spore --help", p)
        q = run(spore, cmd, "--help")
        if q.returncode != 0 or "spore " + cmd not in q.stdout:
            fail(f"spore {cmd} --help", q)
    p = run(spore, "no-such-command")
    if p.returncode == 0 or len(p.stderr.strip().splitlines()) != 1:
        fail("an unknown command must fail with one line", p)


def check_info_json(spore):
    p = run(spore, "info", "--json")
    j = json.loads(p.stdout)
    for key in ("version", "build_type", "simd_target", "threads", "ops"):
        if key not in j:
            fail(f"info --json lacks '{key}'", p)


def check_ops_json(spore, minimum="80"):
    p = run(spore, "ops", "--json")
    if p.returncode != 0:
        fail("spore ops --json", p)
    ops = json.loads(p.stdout)
    names = {o["name"] for o in ops}
    if len(ops) < int(minimum):
        fail(f"spore ops --json lists {len(ops)} ops, expected >= {minimum}")
    for o in ops:
        for key in ("inputs", "attrs", "dtypes", "kernels", "traits", "fusion", "amp", "decomposition"):
            if key not in o:
                fail(f"op {o.get('name')} lacks '{key}'")
    for must in ("input", "constant", "identity"):
        if must not in names:
            fail(f"'{must}' missing from spore ops --json")
    p = run(spore, "ops")
    if p.returncode != 0 or f"{len(ops)} ops" not in p.stdout:
        fail("spore ops (text)", p)


def check_graph_roundtrip(spore, *files):
    with tempfile.TemporaryDirectory() as d:
        for f in files:
            out1, out2 = os.path.join(d, "1.ir"), os.path.join(d, "2.ir")
            p = run(spore, "graph", f, "--output", out1)
            if p.returncode != 0:
                fail(f"spore graph {f}", p)
            p = run(spore, "graph", out1, "--output", out2)
            if p.returncode != 0 or open(out1).read() != open(out2).read():
                fail(f"spore graph {f}: print -> parse -> print is not the identity", p)
            src = "".join(l for l in open(f) if not l.startswith("#"))
            if open(out1).read() != src:
                fail(f"{f} is not in canonical form (compare with spore graph {f})")
            p = run(spore, "graph", f, "--dot")
            if p.returncode != 0 or not p.stdout.startswith("digraph"):
                fail(f"spore graph {f} --dot", p)
            p = run(spore, "graph", f, "--verify-only")
            if p.returncode != 0 or "ok" not in p.stdout:
                fail(f"spore graph {f} --verify-only", p)


def check_graph_passes(spore, f):
    p = run(spore, "graph", f, "--passes", "--opt-level", "0")
    if p.returncode != 0 or "# pass memory_plan" not in p.stdout or "!offset0=" not in p.stdout:
        fail(f"spore graph {f} --passes --opt-level 0", p)
    p = run(spore, "graph", f, "--passes")  # the default level fuses the elementwise chain
    if p.returncode != 0 or "# pass fuse_elementwise" not in p.stdout or "fused_elementwise(" not in p.stdout:
        fail(f"spore graph {f} --passes", p)


def check_graph_errors(spore):
    with tempfile.TemporaryDirectory() as d:
        cases = {
            "unknown_op.ir": ("graph @g(%x: f32[2]) {\n  %y = frobnicate(%x) : f32[2]\n  return %y\n}\n",
                              "unknown_op.ir:2:8"),
            "truncated.ir": ("graph @g(%x: f32[2]) {\n  %y = identity(%x", "truncated.ir:2:19"),
            "bad_type.ir": ("graph @g(%x: f32[2]) {\n  %y = identity(%x) : f32[3] !name=\"n\"\n  return %y\n}\n",
                            "bad_type.ir:2:3"),
        }
        for name, (text, where) in cases.items():
            path = os.path.join(d, name)
            open(path, "w").write(text)
            p = run(spore, "graph", path)
            lines = p.stderr.strip().splitlines()
            if p.returncode != 1 or len(lines) != 1 or not lines[0].startswith("spore graph: error: ") or where not in lines[0]:
                fail(f"spore graph on {name}: expected exit 1 and one line naming {where}", p)
        p = run(spore, "graph", os.path.join(d, "missing.ir"))
        if p.returncode != 1 or len(p.stderr.strip().splitlines()) != 1:
            fail("spore graph on a missing file", p)
        p = run(spore, "graph")
        if p.returncode == 0:
            fail("spore graph without a file must fail", p)


def check_demo(spore):
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.json")
        p = run(spore, "demo", "--runs", "3", "--threads", "2", "--trace", trace)
        if p.returncode != 0 or "bit-for-bit equal" not in p.stdout:
            fail("spore demo", p)
        events = json.load(open(trace))["traceEvents"]
        # Complete events for the kernels, metadata events naming the threads (tracks).
        kernels = [e for e in events if e["ph"] == "X"]
        if not kernels or any(e["ph"] not in ("X", "M") for e in events) or \
                any(k not in e for e in kernels for k in ("name", "ts", "dur", "pid", "tid")):
            fail("spore demo --trace wrote a bad Chrome trace")
        p = run(spore, "demo", "--runs", "3", "--json")
        j = json.loads(p.stdout)
        if p.returncode != 0 or not j["bit_equal"] or j["kernels"] <= 0 or not j["top"]:
            fail("spore demo --json", p)
        p = run(spore, "demo", "--threads", "-1")
        if p.returncode == 0:
            fail("spore demo --threads -1 must fail", p)


if __name__ == "__main__":
    spore, check, *args = sys.argv[1:]
    globals()["check_" + check](spore, *args)
