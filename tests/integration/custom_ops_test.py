#!/usr/bin/env python3
"""End-to-end checks of custom-op plugins on the CLI (pure Python, standard library only).

usage: custom_ops_test.py SPORE PLUGIN BAD_PLUGIN

PLUGIN is tests/plugins/good_plugin.cpp built as a module ("testplugin": scale2x, rowsum); BAD_PLUGIN one built
against another ABI version. Checks `--custom-ops LIB` / `--custom-ops=LIB` anywhere on the line for `graph`, `run`,
`convert` and `bench` on a text-IR model and on the .spore file converted from it (outputs against a Python
reference), and the one-line errors: the .spore or text IR without the plugin, a missing library, a plugin of
another ABI version, `--custom-ops` without a path.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

SPORE, PLUGIN, BAD_PLUGIN = sys.argv[1:4]

MODEL = """graph @m(%x: f32[batch,6]) {
  %h = scale2x(%x) {offset=0.5} : f32[batch,6]
  %r = relu(%h) : f32[batch,6]
  %y = rowsum(%r) {scale=2} : f32[batch]
  return %y
}
"""


def fail(msg, p=None):
    if p is not None:
        msg += f"\n--- rc={p.returncode}\n--- stdout:\n{p.stdout[-3000:]}\n--- stderr:\n{p.stderr[-3000:]}"
    sys.exit("FAIL: " + msg)


def spore(*args):
    return subprocess.run([SPORE, *args], capture_output=True, text=True, timeout=120)


def ok(*args):
    p = spore(*args)
    if p.returncode != 0:
        fail("spore " + " ".join(args), p)
    return p


def expect_error(args, *parts, rc=None):
    p = spore(*args)
    lines = p.stderr.strip().splitlines()
    if p.returncode == 0 or (rc is not None and p.returncode != rc) or len(lines) != 1 or \
            not all(s in lines[0] for s in parts):
        fail(f"spore {' '.join(args)}: expected one error line containing {parts}", p)


def write_npy(path, values, shape):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % ", ".join(map(str, shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{len(values)}f", *values))


def read_npy_f32(path):
    data = open(path, "rb").read()
    hlen = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + hlen].decode()
    if "'<f4'" not in header:
        fail(f"{path}: expected f32 .npy, header {header!r}")
    body = data[10 + hlen:]
    return list(struct.unpack(f"<{len(body) // 4}f", body))


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def reference(x, rows):
    out = []
    for r in range(rows):
        acc = 0.0
        for j in range(6):
            acc = f32(acc + max(f32(f32(2 * x[r * 6 + j]) + 0.5), 0.0))
        out.append(f32(2 * acc))
    return out


def check_run(model, tmp, tag, *plugin_args):
    x = [((i * 7) % 11 - 5) * 0.375 for i in range(4 * 6)]
    xin = os.path.join(tmp, "x.npy")
    write_npy(xin, x, (4, 6))
    outdir = os.path.join(tmp, "out_" + tag)
    os.makedirs(outdir, exist_ok=True)
    ok("run", *plugin_args, model, "--input", f"x={xin}", "--output", outdir, "--no-random")
    got = read_npy_f32(os.path.join(outdir, "y.npy"))
    want = reference(x, 4)
    if len(got) != 4 or any(abs(g - w) > 1e-4 * max(1.0, abs(w)) for g, w in zip(got, want)):
        fail(f"{tag}: spore run gave {got}, want {want}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        ir = os.path.join(tmp, "model.ir")
        with open(ir, "w") as f:
            f.write(MODEL)
        spore_file = os.path.join(tmp, "model.spore")

        # The option anywhere on the line, both spellings, repeated (the second load is a no-op).
        p = ok("graph", "--custom-ops", PLUGIN, ir, "--verify-only")
        if "ok" not in p.stdout:
            fail("spore graph --verify-only: no 'ok' summary", p)
        check_run(ir, tmp, "ir", "--custom-ops", PLUGIN)
        ok("--custom-ops=" + PLUGIN, "convert", ir, "-o", spore_file, "--custom-ops", PLUGIN)
        check_run(spore_file, tmp, "spore", f"--custom-ops={PLUGIN}")
        p = ok("bench", spore_file, "--custom-ops", PLUGIN, "--iters", "3", "--warmup", "1", "--batch", "2", "--json")
        report = json.loads(p.stdout)
        if report.get("kernels") != 3 or report.get("batch") != 2:
            fail(f"spore bench --json: expected 3 kernels per run at batch 2, got {report}")
        p = ok("ops", "--custom-ops", PLUGIN)
        if "scale2x" not in p.stdout or "rowsum" not in p.stdout:
            fail("spore ops --custom-ops: the plugin's ops are not listed", p)

        # Without the plugin: the .spore file names it; text IR reports the unknown op.
        expect_error(["run", spore_file],
                     "op 'rowsum' needs custom-op plugin 'testplugin' (load it with --custom-ops)", rc=1)
        expect_error(["bench", spore_file, "--iters", "1"], "needs custom-op plugin 'testplugin'", rc=1)
        expect_error(["run", ir], "unknown op 'scale2x'", rc=1)
        # Bad plugins and bad use of the option.
        expect_error(["run", "--custom-ops", os.path.join(tmp, "missing.so"), ir], "cannot load custom-op plugin",
                     "missing.so", rc=1)
        expect_error(["run", "--custom-ops", BAD_PLUGIN, ir], "ABI version 99", BAD_PLUGIN, rc=1)
        expect_error(["run", ir, "--custom-ops"], "--custom-ops needs a plugin library path", rc=2)
        if "--custom-ops" not in ok("--help").stdout:
            fail("spore --help does not list --custom-ops")
    print("custom ops CLI: ok")


if __name__ == "__main__":
    main()
