#!/usr/bin/env python3
"""End-to-end checks of `spore bench`'s memory planning: --memory-optimize-level, the planned peak,
--max-memory failing before running, and --find-max-batch (its answer fits, one more does not).

usage: bench_memory_test.py SPORE
"""
import json
import os
import subprocess
import sys
import tempfile

SPORE = sys.argv[1]

# A chain of elementwise ops on a symbolic batch: level 1 ping-pongs two buffers, level 2 runs it in place.
MODEL = """graph @chain(%x: f32[batch,256]) {
  %a = exp(%x) : f32[batch,256]
  %b = relu(%a) : f32[batch,256]
  %c = tanh(%b) : f32[batch,256]
  %d = add(%c, %x) : f32[batch,256]
  %e = sigmoid(%d) : f32[batch,256]
  %f = neg(%e) : f32[batch,256]
  return %f
}
"""


def fail(msg, p=None):
    if p is not None:
        msg += f"\n  stdout: {p.stdout.strip()}\n  stderr: {p.stderr.strip()}"
    sys.exit("FAIL: " + msg)


def spore(*args, opt_level="0"):
    # --opt-level 0: these checks are about the planner, so the chain must not be fused into one kernel.
    extra = ["--opt-level", opt_level] if args and args[0] == "bench" else []
    return subprocess.run([SPORE, *args, *extra], capture_output=True, text=True, timeout=120)


def bench_json(*args, opt_level="0"):
    p = spore("bench", *args, "--json", opt_level=opt_level)
    if p.returncode != 0:
        fail(f"spore bench {' '.join(args)} exited {p.returncode}", p)
    return json.loads(p.stdout)


def main():
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "chain.ir")
        with open(model, "w") as f:
            f.write(MODEL)
        row = 256 * 4
        peaks = []
        for level in (0, 1, 2):
            j = bench_json(model, "--batch", "16", "--iters", "2", "--warmup", "0", "--memory-optimize-level", str(level))
            if j["memory_optimize_level"] != level:
                fail(f"level {level}: json says {j['memory_optimize_level']}")
            if j["planned_peak_bytes"] != j["arena_bytes"] + j["weights_bytes"] + j["io_bytes"]:
                fail(f"level {level}: planned_peak_bytes is not arena + weights + io: {j}")
            if j["io_bytes"] != 2 * 16 * row:
                fail(f"level {level}: io_bytes {j['io_bytes']}, expected {2 * 16 * row}")
            peaks.append(j["arena_bytes"])
        if peaks != [5 * 16 * row, 2 * 16 * row, 16 * row]:
            fail(f"arena bytes at O0/O1/O2: {peaks}, expected {[5 * 16 * row, 2 * 16 * row, 16 * row]}")

        # The default pipeline fuses the whole chain into one kernel that writes only the output.
        fused = bench_json(model, "--batch", "16", "--iters", "2", "--warmup", "0", opt_level="1")
        plain = bench_json(model, "--batch", "16", "--iters", "2", "--warmup", "0")
        if fused["kernels"] != 1 or plain["kernels"] != 6 or fused["arena_bytes"] != 0:
            fail(f"kernels fused/plain {fused['kernels']}/{plain['kernels']}, fused arena {fused['arena_bytes']}: "
                 "expected 1/6 and 0")
        p = spore("bench", model, "--disable-pass", "no_such_pass", "--iters", "1")
        if p.returncode == 0 or "no_such_pass" not in p.stderr or "fuse_elementwise" not in p.stderr:
            fail("an unknown --disable-pass should be an error listing the passes", p)

        cap = 1_000_000
        j = bench_json(model, "--find-max-batch", "--max-memory", "1MB", "--memory-optimize-level", "2")
        b = j["max_batch"]
        if j["max_memory"] != cap or j["planned_peak_bytes"] > cap or b != cap // (3 * row):
            fail(f"find-max-batch: {j} (expected max_batch {cap // (3 * row)})")
        bench_json(model, "--batch", str(b), "--max-memory", "1MB", "--memory-optimize-level", "2", "--iters", "1")
        p = spore("bench", model, "--batch", str(b + 1), "--max-memory", "1MB", "--memory-optimize-level", "2")
        if p.returncode == 0 or "--max-memory" not in p.stderr or "smaller --batch" not in p.stderr:
            fail(f"batch {b + 1} should not fit 1MB", p)
        # The arena alone over the cap: the planner's error, naming the largest live tensors.
        p = spore("bench", model, "--batch", "4096", "--max-memory", "1MiB")
        if p.returncode == 0 or "largest live buffers" not in p.stderr or "memory_optimize_level=2" not in p.stderr:
            fail("a 4096 batch at level 1 should fail against 1MiB, naming tensors and level 2", p)
        p = spore("bench", model, "--find-max-batch", "--max-memory", "2XB")
        if p.returncode == 0 or "unknown unit" not in p.stderr:
            fail("a bad --max-memory unit should be an error", p)
        p = spore("bench", model, "--find-max-batch")
        if p.returncode == 0:
            fail("--find-max-batch without --max-memory should be an error", p)
    print("bench memory: OK")


if __name__ == "__main__":
    main()
