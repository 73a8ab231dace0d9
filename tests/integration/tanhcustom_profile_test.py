#!/usr/bin/env python3
"""Issue 7 acceptance: the tanhcustom plugin's three versions and the built-in tanh appear side by side in
`spore profile`'s top-k table (one row per op, each with its kernel impl, calls, time and GB/s), and the model
fails with one clear line without the plugin. (Accuracy and thread-count checks of the kernels: tests/custom_ops.)

usage: tanhcustom_profile_test.py SPORE PLUGIN MODEL_IR
"""
import json
import os
import subprocess
import sys
import tempfile


def fail(msg, p=None):
    print("FAIL:", msg)
    if p is not None:
        print("stdout:", p.stdout[-3000:])
        print("stderr:", p.stderr[-3000:])
    sys.exit(1)


def main():
    spore, plugin, model = sys.argv[1:4]
    p = subprocess.run([spore, "profile", "--custom-ops", plugin, model, "--batch", "4", "--iters", "3", "--warmup", "1",
                        "--no-trace", "--json"], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail("spore profile with the tanhcustom plugin", p)
    d = json.loads(p.stdout)
    rows = {r["op"]: r for r in d["top"]}
    for op in ("tanhcustom_v1", "tanhcustom_v2", "tanhcustom_v3", "tanh"):
        if op not in rows:
            fail(f"op {op} missing from the top-k table: {sorted(rows)}", p)
        if rows[op]["calls"] != 3 or rows[op]["ms"] <= 0 or rows[op]["gbps"] <= 0:
            fail(f"row {rows[op]} for {op}", p)
    if d["kernels"] != 4:
        fail(f"expected 4 kernels per run, got {d['kernels']}", p)
    if abs(sum(r["pct"] for r in d["top"]) - 100.0) > 0.5:
        fail("percentages do not add up to 100", p)
    # Text table: the four rows side by side with their impl strings.
    p = subprocess.run([spore, "profile", "--custom-ops", plugin, model, "--batch", "4", "--iters", "2", "--warmup", "1",
                        "--no-trace"], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail("spore profile (text)", p)
    lines = [l.split() for l in p.stdout.splitlines()]
    table = {l[0]: l[1] for l in lines if len(l) > 2 and l[0] in ("tanhcustom_v1", "tanhcustom_v2", "tanhcustom_v3", "tanh")}
    if table != {"tanhcustom_v1": "scalar", "tanhcustom_v2": "hwy", "tanhcustom_v3": "hwy", "tanh": "hwy"}:
        fail(f"text table rows/impls: {table}", p)
    # Without the plugin: one clear error line.
    p = subprocess.run([spore, "profile", model, "--batch", "1", "--no-trace"], capture_output=True, text=True, timeout=60)
    if p.returncode == 0 or "tanhcustom_v1" not in p.stderr or len(p.stderr.strip().splitlines()) != 1:
        fail("profile without the plugin must fail with one line naming the op", p)
    print("ok")


if __name__ == "__main__":
    main()
