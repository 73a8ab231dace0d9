#!/usr/bin/env python3
"""Python-side eager dispatch overhead per small op: spore vs PyTorch 1.13 eager, in the same process.

    .venv/bin/python bench/python/dispatch_vs_torch.py [--repeats 7] [--iters 20000] [--json FILE] [--no-layers]

Run it with the project's venv (`.venv/bin/python`): it has spore installed and sees Debian's NumPy and PyTorch
(python3-torch, 1.13) through the system site-packages. The shebang's python3 only works where both import.

What is timed: one Python-level call of each op, `iters` times in a loop compiled by `timeit` (no extra function
call per iteration; the loop itself costs ~10 ns), timed with time.perf_counter_ns, garbage collection off during a
sample (timeit's default). Each case runs its warm-up (iters/10 calls, at least 200) first, then `repeats` samples of
spore and torch alternating (spore first on even repeats, torch first on odd ones) so machine noise hits both alike.
The table shows the median microseconds per call of each and spore/torch (< 1: spore has less overhead).

Peers, configured alike: float32 tensors made from the same NumPy arrays (spore.from_numpy, torch.from_numpy),
one thread each (spore.set_threads(1), torch.set_num_threads(1); OMP/OpenBLAS/MKL thread counts set to 1 in the
environment before NumPy and torch load, so no BLAS pool spins on the second core), PyTorch in its default mode (grad
mode on, inputs without requires_grad: what an eager user gets; torch.inference_mode would be faster still).
Each case's results are compared once (np.allclose) so both sides do the same work.

Cases: add (x + y), mul by a Python scalar (x * 2.0), relu (spore.ops.relu vs torch.relu), matmul through the ops
function (spore.ops.matmul vs torch.matmul) and through `@`, reduce_sum over all (spore.ops.reduce_sum vs torch.sum),
reduce_mean over the last axis (an op with an attribute: reduce_mean(x, axes=[-1]) vs torch.mean(x, dim=-1)) and
the chain relu(x * 2 - 1) (3 ops per call). Sizes: "tiny" (8 elements; 4x4 for matmul and the axis reduction),
where the fixed cost dominates, and "64x64" (4096 elements), a moderate size.

Unless --no-layers, a second table splits spore's cost into layers (same method): the raw binding
spore._spore._op_call(name, [tensors], {attrs}), the generated spore.ops.<op> wrapper, and the Tensor operator.
The project's goal is spore's per-op overhead <= PyTorch's, i.e. ratio <= 1 on the tiny cases.
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import timeit  # noqa: E402

import numpy as np  # noqa: E402

try:
    import torch
except ImportError:
    sys.exit("dispatch_vs_torch.py: PyTorch is not importable here; run it with the project's .venv/bin/python "
             "(which sees Debian's python3-torch)")
import spore  # noqa: E402
from spore import _spore  # noqa: E402

# (name, spore statement, torch statement, shape kind): statements run in a namespace holding x, y (elementwise
# operands), a, b (matmul operands) and their torch twins tx, ty, ta, tb, plus ops (spore.ops) and torch.
CASES = [
    ("add  x+y", "x + y", "tx + ty", "vec"),
    ("mul  x*2.0", "x * 2.0", "tx * 2.0", "vec"),
    ("relu", "relu(x)", "torch_relu(tx)", "vec"),
    ("matmul ops.matmul", "matmul(a, b)", "torch_matmul(ta, tb)", "mat"),
    ("matmul a@b", "a @ b", "ta @ tb", "mat"),
    ("sum (all)", "reduce_sum(x)", "torch_sum(tx)", "vec"),
    ("mean axis=-1", "reduce_mean(a, axes=[-1])", "torch_mean(ta, dim=-1)", "mat"),
    ("chain relu(x*2-1)", "relu(x * 2 - 1)", "torch_relu(tx * 2 - 1)", "vec"),
]
# spore only: the layers of one call (binding, ops wrapper, operator).
LAYERS = [
    ("add", [("_op_call", "op_call('add', [x, y], {})"), ("ops.add", "add(x, y)"), ("x + y", "x + y")],
     "tx + ty"),
    ("relu", [("_op_call", "op_call('relu', [x], {})"), ("ops.relu", "relu(x)")], "torch_relu(tx)"),
    ("mul scalar", [("_op_call", "op_call('mul', [x, two], {})"), ("ops.mul", "mul(x, two)"),
                    ("x * 2.0", "x * 2.0")], "tx * 2.0"),
    ("mean axis", [("_op_call", "op_call('reduce_mean', [a], {'axes': [-1]})"),
                   ("ops.reduce_mean", "reduce_mean(a, axes=[-1])")], "torch_mean(ta, dim=-1)"),
]
SIZES = {"tiny": {"vec": (8,), "mat": (4, 4)}, "64x64": {"vec": (64, 64), "mat": (64, 64)}}


def namespace(size, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {k: rng.standard_normal(SIZES[size]["vec" if k in "xy" else "mat"]).astype(np.float32)
              for k in "xyab"}
    ns = {k: spore.from_numpy(v) for k, v in arrays.items()}
    ns.update({"t" + k: torch.from_numpy(v) for k, v in arrays.items()})
    ns.update(relu=spore.ops.relu, add=spore.ops.add, mul=spore.ops.mul, matmul=spore.ops.matmul,
              reduce_sum=spore.ops.reduce_sum, reduce_mean=spore.ops.reduce_mean, op_call=_spore._op_call,
              two=spore.from_numpy(np.array(2.0, np.float32)), torch_relu=torch.relu, torch_matmul=torch.matmul,
              torch_sum=torch.sum, torch_mean=torch.mean)
    ns["_keep"] = arrays  # the arrays outlive the tensors that share their memory
    return ns


def per_call_us(stmt, ns, iters):
    t = timeit.Timer(stmt, timer=time.perf_counter_ns, globals=ns)
    return t.timeit(iters) / iters / 1e3


def measure(stmts, ns, iters, repeats):
    """stmts: {label: statement}. Warm-up, then `repeats` rounds over the labels, rotating the order each round."""
    for s in stmts.values():
        per_call_us(s, ns, max(200, iters // 10))
    runs = {k: [] for k in stmts}
    labels = list(stmts)
    for r in range(repeats):
        order = labels[r % len(labels):] + labels[:r % len(labels)]
        for k in order:
            runs[k].append(per_call_us(stmts[k], ns, iters))
    return runs


def check_same(case, s_stmt, t_stmt, ns):
    s = np.asarray(eval(s_stmt, ns))
    t = eval(t_stmt, ns).numpy()
    if s.shape != t.shape or not np.allclose(s, t, rtol=1e-4, atol=1e-5):
        raise SystemExit(f"{case}: spore and torch disagree ({s.shape} vs {t.shape})")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=7, help="alternating samples per case and engine (median taken)")
    p.add_argument("--iters", type=int, default=20000, help="calls per sample")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    p.add_argument("--no-layers", action="store_true", help="skip the spore layer breakdown")
    a = p.parse_args()

    spore.set_threads(1)
    torch.set_num_threads(1)
    env = {"python": platform.python_version(), "spore": spore.__version__, "torch": torch.__version__,
           "numpy": np.__version__, "spore_threads": spore.get_threads(), "torch_threads": torch.get_num_threads(),
           "cpus": os.cpu_count(), "loadavg": os.getloadavg(), "repeats": a.repeats, "iters": a.iters}
    print(f"spore {env['spore']} vs torch {env['torch']} (Python {env['python']}, NumPy {env['numpy']}), 1 thread "
          f"each, {a.repeats} alternating samples x {a.iters} calls, median us per call; load avg "
          f"{env['loadavg'][0]:.2f}", flush=True)

    rows = []
    print(f"\n{'case':20s} {'size':6s} {'spore us':>9s} {'torch us':>9s} {'spore/torch':>11s}")
    for size in SIZES:
        ns = namespace(size)
        for case, s_stmt, t_stmt, _ in CASES:
            check_same(case, s_stmt, t_stmt, ns)
            runs = measure({"spore": s_stmt, "torch": t_stmt}, ns, a.iters, a.repeats)
            s, t = statistics.median(runs["spore"]), statistics.median(runs["torch"])
            rows.append({"case": case, "size": size, "spore_stmt": s_stmt, "torch_stmt": t_stmt, "spore_us": s,
                         "torch_us": t, "ratio": s / t, "spore_runs": runs["spore"], "torch_runs": runs["torch"]})
            print(f"{case:20s} {size:6s} {s:9.3f} {t:9.3f} {s / t:10.2f}x", flush=True)

    tiny = [r["ratio"] for r in rows if r["size"] == "tiny"]
    geo = math.exp(sum(math.log(r) for r in tiny) / len(tiny))
    worst = max(rows, key=lambda r: r["ratio"] if r["size"] == "tiny" else 0)
    met = all(r <= 1.0 for r in tiny)
    print(f"\ntiny sizes: geo-mean spore/torch {geo:.2f}x, worst {worst['ratio']:.2f}x ({worst['case']}); goal "
          f"(spore per-op overhead <= torch's on every tiny case): {'MET' if met else 'NOT MET'}")

    layers = []
    if not a.no_layers:
        ns = namespace("tiny")
        print("\nspore layers, tiny size (median us per call; torch's call for scale):")
        for op, stmts, t_stmt in LAYERS:
            all_stmts = dict(stmts)
            all_stmts["torch"] = t_stmt
            runs = measure(all_stmts, ns, a.iters, a.repeats)
            med = {k: statistics.median(v) for k, v in runs.items()}
            layers.append({"op": op, "median_us": med, "stmts": all_stmts, "runs": runs})
            print(f"  {op:11s} " + "  ".join(f"{k} {v:6.3f}" for k, v in med.items()), flush=True)

    if a.json:
        with open(a.json, "w") as f:
            json.dump({"env": env, "rows": rows, "tiny_geomean_ratio": geo, "goal_met": met, "layers": layers}, f,
                      indent=1)
        print(f"\nwrote {a.json}")


if __name__ == "__main__":
    main()
