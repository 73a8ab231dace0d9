#!/usr/bin/env python3
"""End-to-end checks of `spore run` and `spore bench` (pure Python, no numpy needed).

usage: run_bench_test.py SPORE

Writes a small MLP as text IR (weights inline) and as a .spore file written here from docs/FORMAT.md
alone (its own XXH64), runs both on .npy inputs written here, compares the outputs with a Python
reference, checks `bench --json` and that bad input gives one-line errors and a non-zero exit.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

SPORE = sys.argv[1]


def fail(msg, p=None):
    if p is not None:
        msg += f"\n--- rc={p.returncode}\n--- stdout:\n{p.stdout[-3000:]}\n--- stderr:\n{p.stderr[-3000:]}"
    sys.exit("FAIL: " + msg)


def spore(*args):
    return subprocess.run([SPORE, *args], capture_output=True, text=True, timeout=300)


def ok(*args):
    p = spore(*args)
    if p.returncode != 0:
        fail("spore " + " ".join(args), p)
    return p


def expect_error(args, *parts):
    p = spore(*args)
    lines = p.stderr.strip().splitlines()
    if p.returncode == 0 or len(lines) != 1 or not all(s in lines[0] for s in parts):
        fail(f"spore {' '.join(args)}: expected one error line containing {parts}", p)


# --- .npy (format 1.0, little-endian, C order) ---------------------------------------------------
NPY_TYPES = {"<f4": ("f", 4), "<f8": ("d", 8), "<i8": ("q", 8), "<i4": ("i", 4)}


def write_npy(path, values, shape, descr="<f4"):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join(f"{d}," for d in shape) if len(shape) == 1 else ", ".join(map(str, shape)))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    code, _ = NPY_TYPES[descr]
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{len(values)}{code}", *values))


def read_npy(path):
    data = open(path, "rb").read()
    if data[:6] != b"\x93NUMPY":
        fail(f"{path} is not a .npy file")
    hlen = struct.unpack("<H", data[8:10])[0] if data[6] == 1 else struct.unpack("<I", data[8:12])[0]
    start = 10 + hlen if data[6] == 1 else 12 + hlen
    header = eval(data[start - hlen:start].decode())  # a Python dict literal by the format's definition
    code, size = NPY_TYPES[header["descr"]]
    n = math.prod(header["shape"])
    return list(struct.unpack(f"<{n}{code}", data[start:start + n * size])), tuple(header["shape"])


# --- the model -------------------------------------------------------------------------------------
def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


B, D, H, O = 3, 8, 16, 4
W1 = [f32(math.sin(0.37 * i + 0.1) * 0.5) for i in range(D * H)]
B1 = [f32(0.05 * (i % 5) - 0.1) for i in range(H)]
W2 = [f32(math.cos(0.23 * i) * 0.4) for i in range(H * O)]
X = [f32(math.sin(1.3 * i) * 2) for i in range(B * D)]


def hexf(vals):
    return struct.pack(f"<{len(vals)}f", *vals).hex()


def graph_text(const):
    """The MLP as text IR; `const(name, shape, values, index)` gives each constant's data clause."""
    return f"""# softmax(relu(x W1 + b1) W2), batch symbolic
graph @mlp(%x: f32[batch,{D}]) {{
  %w1 = constant() : f32[{D},{H}] {const(W1, 0)}
  %b1 = constant() : f32[{H}] {const(B1, 1)}
  %w2 = constant() : f32[{H},{O}] {const(W2, 2)}
  %h0 = matmul(%x, %w1) : f32[batch,{H}] !name="fc1"
  %h1 = add(%h0, %b1) : f32[batch,{H}] !name="fc1/bias"
  %h2 = relu(%h1) : f32[batch,{H}] !name="act1"
  %logits = matmul(%h2, %w2) : f32[batch,{O}] !name="fc2"
  %probs = softmax(%logits) {{axis=-1}} : f32[batch,{O}] !name="softmax"
  return %probs, %logits
}}
"""


def reference(x, batch):
    probs, logits = [], []
    for b in range(batch):
        h = [max(0.0, sum(x[b * D + k] * W1[k * H + j] for k in range(D)) + B1[j]) for j in range(H)]
        lg = [sum(h[k] * W2[k * O + j] for k in range(H)) for j in range(O)]
        m = max(lg)
        e = [math.exp(v - m) for v in lg]
        probs += [v / sum(e) for v in e]
        logits += lg
    return probs, logits


# --- .spore writer from docs/FORMAT.md ---------------------------------------------------------------
M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                      0x27D4EB2F165667C5)


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def xx_round(acc, v):
    return (rotl((acc + v * P2) & M64, 31) * P1) & M64


def xxh64(data, seed=0):
    n, p = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed, (seed - P1) & M64]
        while p + 32 <= n:
            for i in range(4):
                v[i] = xx_round(v[i], struct.unpack_from("<Q", data, p + 8 * i)[0])
            p += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M64
        for x in v:
            h = (((h ^ xx_round(0, x)) * P1) + P4) & M64
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while p + 8 <= n:
        h = (rotl(h ^ xx_round(0, struct.unpack_from("<Q", data, p)[0]), 27) * P1 + P4) & M64
        p += 8
    if p + 4 <= n:
        h = (rotl(h ^ ((struct.unpack_from("<I", data, p)[0] * P1) & M64), 23) * P2 + P3) & M64
        p += 4
    while p < n:
        h = (rotl(h ^ ((data[p] * P5) & M64), 11) * P1) & M64
        p += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


def align64(x):
    return (x + 63) // 64 * 64


def spore_file(tensors, metadata):
    text = graph_text(lambda vals, k: f"= tensor<{k}>").encode()
    index, weights = struct.pack("<Q", len(tensors)), b""
    for name, shape, vals in tensors:
        data = struct.pack(f"<{len(vals)}f", *vals)
        index += struct.pack("<I", len(name)) + name.encode() + struct.pack("<BBH", 1, len(shape), 0)
        index += b"".join(struct.pack("<Q", d) for d in shape) + struct.pack("<QQ", len(weights), len(data))
        weights += data + b"\0" * (align64(len(data)) - len(data))
    meta = json.dumps(metadata).encode()
    g_off = 128
    i_off = g_off + len(text)
    m_off = i_off + len(index)
    w_off = align64(m_off + len(meta))
    size = w_off + len(weights)
    header = b"SPOREMDL" + struct.pack("<IIQ", 1, 128, size)
    header += struct.pack("<8Q", g_off, len(text), i_off, len(index), m_off, len(meta), w_off, len(weights))
    header += b"python test".ljust(32, b"\0")
    body = text + index + meta + b"\0" * (w_off - m_off - len(meta)) + weights
    checksum = xxh64(body, seed=xxh64(header))
    return header + struct.pack("<Q", checksum) + body


def close(got, want, what):
    for i, (g, w) in enumerate(zip(got, want)):
        if abs(g - w) > 1e-5 + 1e-4 * abs(w):
            fail(f"{what}[{i}] = {g}, reference {w}")
    if len(got) != len(want):
        fail(f"{what}: {len(got)} values, reference {len(want)}")


def main():
    if xxh64(b"") != 0xEF46DB3751D8E999 or xxh64(b"abc") != 0x44BC2CF5AD770999:
        fail("the test's own XXH64 is wrong")
    tmp = tempfile.mkdtemp(prefix="spore_run_bench_")
    ir = os.path.join(tmp, "mlp.ir")
    with open(ir, "w") as f:
        f.write(graph_text(lambda vals, k: f'= hex"{hexf(vals)}"'))
    sp = os.path.join(tmp, "mlp.spore")
    with open(sp, "wb") as f:
        f.write(spore_file([("w1", (D, H), W1), ("b1", (H,), B1), ("w2", (H, O), W2)], {"source": "run_bench_test"}))
    x_npy = os.path.join(tmp, "x.npy")
    write_npy(x_npy, X, (B, D))
    want_probs, want_logits = reference(X, B)

    # spore run on both files: outputs match the reference, and the two files give the same bits.
    outs = {}
    for model in (ir, sp):
        out = os.path.join(tmp, "out_" + os.path.basename(model).replace(".", "_"))
        p = ok("run", model, "--input", f"x={x_npy}", "--output", out, "--threads", "1")
        for name in ("probs", "logits"):
            if f"output {name}: f32[{B},{'4'}]" not in p.stdout:
                fail(f"spore run {model} does not print output {name}", p)
        probs, shape = read_npy(os.path.join(out, "probs.npy"))
        logits, _ = read_npy(os.path.join(out, "logits.npy"))
        if shape != (B, O):
            fail(f"probs.npy has shape {shape}, expected {(B, O)}")
        close(probs, want_probs, f"{os.path.basename(model)} probs")
        close(logits, want_logits, f"{os.path.basename(model)} logits")
        outs[model] = open(os.path.join(out, "probs.npy"), "rb").read()
    if outs[ir] != outs[sp]:
        fail("the .ir and the .spore model give different bits")

    # Random inputs: seeded (same seed, same output; another seed, another output), batch from --batch.
    def random_run(seed):
        out = os.path.join(tmp, f"rand{seed}")
        p = ok("run", sp, "--seed", str(seed), "--batch", "2", "--output", out)
        if "random (seed" not in p.stdout:
            fail("spore run without --input must say its inputs are random", p)
        return read_npy(os.path.join(out, "probs.npy"))
    a, b, c = random_run(5), random_run(5), random_run(6)
    if a != b or a == c or a[1] != (2, O):
        fail(f"random inputs: seed 5 twice {a == b}, seed 5 vs 6 differ {a != c}, shape {a[1]}")

    # bench --json: the documented keys, consistent figures.
    p = ok("bench", sp, "--batch", "4", "--warmup", "2", "--iters", "30", "--json")
    j = json.loads(p.stdout)
    for key in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "throughput_per_s", "batch", "threads", "peak_bytes", "kernels"):
        if key not in j:
            fail(f"bench --json lacks '{key}'", p)
    if not (0 < j["p50_ms"] <= j["p90_ms"] <= j["p99_ms"]) or j["batch"] != 4 or j["kernels"] < 2 or j["peak_bytes"] <= 0:
        fail("bench --json figures are inconsistent", p)
    if abs(j["throughput_per_s"] - 4 / (j["mean_ms"] / 1000)) > 1e-6 * j["throughput_per_s"]:
        fail("throughput_per_s != batch / mean latency", p)
    p = ok("bench", ir, "--time-s", "0.2")
    if "p99" not in p.stdout or "samples/s" not in p.stdout:
        fail("bench text output", p)
    # bench on a given tensor (--input, as run takes it): the batch comes from the file, the JSON names the input.
    p = ok("bench", sp, "--input", f"x={x_npy}", "--no-random", "--iters", "10", "--json")
    j = json.loads(p.stdout)
    if j["batch"] != B or j.get("inputs") != [{"name": "x", "dtype": "f32", "shape": [B, D], "file": x_npy}]:
        fail(f"bench --input: batch {j.get('batch')} (want {B}), inputs {j.get('inputs')}", p)
    if "specialization" not in j:
        fail("bench --json lacks 'specialization'", p)
    p = ok("bench", sp, "--batch", "3", "--iters", "10", "--json")
    if json.loads(p.stdout)["inputs"][0]["file"] is not None:
        fail("bench on random inputs must give file null", p)
    expect_error(["bench", sp, "--no-random"], "x")
    p = spore("bench", sp, "--input", f"x={x_npy}", "--find-max-batch", "--max-memory", "1GB")
    if p.returncode == 0 or "--find-max-batch" not in p.stderr:
        fail("bench --input with --find-max-batch must be refused", p)
    # profile and check-ops take --input too.
    p = ok("profile", sp, "--input", f"x={x_npy}", "--iters", "2", "--no-trace")
    p = ok("check-ops", sp, "--input", f"x={x_npy}")

    # Errors: one line, non-zero exit, naming the input or file.
    x_bad = os.path.join(tmp, "x_bad.npy")
    write_npy(x_bad, X[:10], (2, 5))
    x_f64 = os.path.join(tmp, "x_f64.npy")
    write_npy(x_f64, X, (B, D), "<f8")
    expect_error(["run", sp, "--input", f"x={x_bad}"], "input 'x'", "[2,5]", "f32[batch,8]")
    expect_error(["run", sp, "--input", f"x={x_f64}"], "input 'x'", "f64")
    expect_error(["run", sp, "--input", f"x={os.path.join(tmp, 'missing.npy')}"], "missing.npy")
    expect_error(["run", sp, "--input", f"y={x_npy}"], "no input 'y'", "inputs: x")
    expect_error(["run", sp, "--no-random"], "input(s) x")
    expect_error(["run", sp, "--input", "x"], "NAME=FILE.npy")
    expect_error(["bench", sp, "--input-shape", "x:2,8", "--batch", "4"], "--batch")
    corrupt = bytearray(open(sp, "rb").read())
    corrupt[-1] ^= 0x40
    bad_sp = os.path.join(tmp, "corrupt.spore")
    open(bad_sp, "wb").write(bytes(corrupt))
    expect_error(["run", bad_sp], "checksum mismatch")
    expect_error(["bench", os.path.join(tmp, "x.npy")], "neither a .spore model")
    print("run/bench: ok")


if __name__ == "__main__":
    main()
