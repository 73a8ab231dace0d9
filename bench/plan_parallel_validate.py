#!/usr/bin/env python3
"""plan-parallel's predicted step times against measured ones, for every strategy that runs on this host
(docs/PERFORMANCE.md, "Model parallel and plan-parallel"). One small Llama, a global batch of 8 sequences:

  1 rank (1 and 4 micro-batches) | DP2 (--parallel data) | DP4 | PP2 (--parallel pipeline: 1F1B with 2, 4 and 8
  micro-batches, GPipe with 4) | PP4 | TP2 (--parallel tensor) | DP2 x PP2 and DP2 x TP2 (4 ranks, 2 replicas)

Each configuration runs `spore train-lm` REPEAT times (PyNative mode everywhere: the pipeline and tensor-parallel
trainers run eagerly, so the data-parallel and one-process runs do too; 1 thread per rank); a run's step time is the
median of its steps 2.. (from the --json progress), a configuration's the median over its runs. The communication
figures come from bench/allreduce_bench at 2 ranks (spore's allreduce: busbw at 256 KiB and the 4 KiB time as the
latency), the device's FLOP rate and per-op overhead from one-process runs at batch 8 and 2 (--flops-per-s,
--op-overhead; the op count is the model's for one step: forward + backward, accumulation and the optimizer update), the cores the host really gives from two one-process runs at once (the machine is shared), and the N
ranks share the host's cores
(--shared-cores). Prints a table and, with --json, one object.

usage: plan_parallel_validate.py BUILD_DIR [--repeat 3] [--steps 8] [--json] [--cores N] [--only NAME,NAME]"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODEL = dict(dim=128, layers=4, heads=4, kv_heads=2, ffn=352, ctx=64)
VOCAB = 512
GLOBAL_BATCH = 8


def main():
    build = sys.argv[1]
    args = sys.argv[2:]
    repeat = int(args[args.index("--repeat") + 1]) if "--repeat" in args else 3
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 8
    cores = int(args[args.index("--cores") + 1]) if "--cores" in args else os.cpu_count()
    as_json = "--json" in args
    spore = os.path.join(build, "spore")
    env = dict(os.environ, OMP_WAIT_POLICY="passive", SPORE_MPI_MODULE=os.path.join(build, "libspore_mpi.so"))
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
    tmp = tempfile.mkdtemp(prefix="spore_planval_")
    text = os.path.join(tmp, "text.txt")
    names = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
    with open(text, "w") as f:
        for i in range(3000):
            f.write(f"{names[i % 8]} little ducks went out one day, over the hills and far away; "
                    f"{names[(i + 3) % 8]} came back.\n")

    # Communication: spore's allreduce at N ranks, placed as the configurations of N ranks are (pinned to cores when
    # N <= cores, unpinned and time-sharing them otherwise): bus bandwidth at 256 KiB, and the 4 KiB time as the
    # latency of the ring's 2 (N - 1) messages. Each configuration is predicted with its rank count's figures.
    def comm(n):
        r = subprocess.run(mpirun + ["-np", str(n), "--bind-to", "core" if n <= cores else "none",
                                     os.path.join(build, "bench", "allreduce_bench"), "--json", "--max-mib", "1"],
                           capture_output=True, text=True, env=env, check=True)
        rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        row256 = min(rows, key=lambda x: abs(x["bytes"] - 256 * 1024))
        small = min(rows, key=lambda x: x["bytes"])
        return row256["spore_busbw_gbps"] * 1e9, small["spore_us"] * 1e-6 / (2 * (n - 1))

    base = [spore, "train-lm", "--arch", "llama", "--dim", str(MODEL["dim"]), "--layers", str(MODEL["layers"]),
            "--heads", str(MODEL["heads"]), "--kv-heads", str(MODEL["kv_heads"]), "--ffn", str(MODEL["ffn"]),
            "--ctx", str(MODEL["ctx"]), "--data", text, "--train-tokenizer", "--vocab", str(VOCAB),
            "--steps", str(steps), "--lr", "0.003", "--eval-every", "0", "--eval-batches", "1", "--threads", "1",
            "--mode", "pynative", "--json", "--log-every", "1", "--seed", "1"]
    pipe = ["--parallel", "pipeline"]
    configs = [  # name, ranks, extra args, (dp, pp, tp, micro)
        ("1 rank", 1, ["--batch", "8"], (1, 1, 1, 1)),
        ("1 rank, batch 2", 1, ["--batch", "2"], None),  # calibration only
        ("1 rank M=4", 1, ["--batch", "2", "--accum", "4"], (1, 1, 1, 4)),
        ("DP2", 2, ["--batch", "8", "--parallel", "data", "--grad-shards", "2"], (2, 1, 1, 1)),
        ("PP2 1F1B M=4", 2, ["--batch", "2", "--micro-batches", "4"] + pipe, (1, 2, 1, 4)),
        ("PP2 GPipe M=4", 2, ["--batch", "2", "--micro-batches", "4", "--schedule", "gpipe"] + pipe, (1, 2, 1, 4)),
        ("PP2 1F1B M=2", 2, ["--batch", "4", "--micro-batches", "2"] + pipe, (1, 2, 1, 2)),
        ("PP2 1F1B M=8", 2, ["--batch", "1", "--micro-batches", "8"] + pipe, (1, 2, 1, 8)),
        ("TP2", 2, ["--batch", "8", "--parallel", "tensor", "--tp", "2"], (1, 1, 2, 1)),
        ("DP4", 4, ["--batch", "8", "--parallel", "data", "--grad-shards", "4"], (4, 1, 1, 1)),
        ("PP4 1F1B M=4", 4, ["--batch", "2", "--micro-batches", "4"] + pipe, (1, 4, 1, 4)),
        # Data x model parallel: 2 replicas, each running half the micro-batches.
        ("DP2xPP2 M=4", 4, ["--batch", "2", "--micro-batches", "4", "--stages", "2"] + pipe, (2, 2, 1, 2)),
        ("DP2xTP2 M=2", 4, ["--batch", "4", "--accum", "2", "--parallel", "tensor", "--tp", "2"], (2, 1, 2, 1)),
    ]
    only = args[args.index("--only") + 1].split(",") if "--only" in args else None
    if only:  # the calibration runs always
        configs = [c for c in configs if c[0] in ("1 rank", "1 rank, batch 2") or c[0] in only]

    # The host: the cores N busy processes really get (other sessions share this machine, and 4 ranks on 2 cores
    # time-share them): N one-process runs at once, placed as mpirun places N ranks (pinned to different cores when
    # N <= cores, unpinned otherwise); effective cores = N x alone / together (at most the core count). Each
    # configuration of N ranks is predicted with the figure for N. Measured in every round, between the
    # configurations, so it sees the host as they do.
    groups = sorted({c[1] for c in configs if c[1] > 1})
    together = {n: [] for n in groups}

    def run_group(n, k):
        procs = []
        for j in range(n):
            ck = os.path.join(tmp, f"ck_group{n}_{k}_{j}")
            cmd = base + ["--batch", "8", "--ckpt-dir", ck, "-o", ck + ".gguf"]
            if n <= cores:
                cmd = ["taskset", "-c", str(j % cores)] + cmd
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env))
        for p in procs:
            lines = [json.loads(l) for l in p.communicate()[0].splitlines() if l.startswith("{")]
            st = [l for l in lines if "tokens_per_s" in l and not l.get("final")]
            ends = [l["step"] * 8 * MODEL["ctx"] / l["tokens_per_s"] for l in st]
            together[n].append(statistics.median([b - a for a, b in zip(ends, ends[1:])]))

    runs = {name: [] for name, _, _, _ in configs}
    for k in range(repeat):  # alternating: one run of every configuration and host measurement per round
        for n in groups:
            run_group(n, k)
        for i, (name, n, extra, _) in enumerate(configs):
            ck = os.path.join(tmp, f"ck_{i}_{k}")
            cmd = base + extra + ["--ckpt-dir", ck, "-o", ck + ".gguf"]
            if n == 1:
                cmd = ["taskset", "-c", "0"] + cmd
            else:
                cmd = mpirun + ["-np", str(n), "--bind-to", "core" if n <= cores else "none"] + cmd
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode != 0:
                print(r.stdout[-2000:], r.stderr[-2000:])
                raise SystemExit(f"{name}: exit {r.returncode}")
            lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
            st = [l for l in lines if "tokens_per_s" in l and "step" in l and not l.get("final") and "eval" not in l]
            micro = next((int(extra[extra.index(f) + 1]) for f in ("--micro-batches", "--accum") if f in extra), 1)
            tokens = int(extra[extra.index("--batch") + 1]) * MODEL["ctx"] * micro
            ends = [l["step"] * tokens / l["tokens_per_s"] for l in st]  # cumulative training seconds
            per_step = [b - a for a, b in zip(ends, ends[1:])]
            runs[name].append(statistics.median(per_step))
    measured = {name: statistics.median(t) for name, t in runs.items()}
    links = {n: comm(n) for n in groups}
    eff_cores = {n: min(float(cores), n * measured["1 rank"] / statistics.median(t)) for n, t in together.items()}
    spec = ",".join(f"{k}={v}" for k, v in MODEL.items()) + f",vocab={VOCAB}"
    # The device: t(b) = ops x overhead + b T x FLOPs per token / rate, from the one-process steps at b = 8 and 2 (one
    # micro-batch each); ops = the step's ops as the model counts them (forward + backward, accumulation, update).
    info = json.loads(subprocess.run([spore, "plan-parallel", spec, "--devices", "1", "--bandwidth", "1G",
                                      "--flops-per-s", "1G", "--global-batch", "8", "--strategy", "1,1,1,1", "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    fpt = info["flops"]["per_token"]
    ops = info["chosen"]["ops_per_step"]
    t8, t2 = measured["1 rank"], measured["1 rank, batch 2"]
    per_token = (t8 - t2) / (6 * MODEL["ctx"])
    rate = fpt / per_token
    overhead = max(0.0, (t8 - 8 * MODEL["ctx"] * per_token) / ops)
    one_tps = GLOBAL_BATCH * MODEL["ctx"] / t8
    device = ["--flops-per-s", f"{rate:.6g}", "--op-overhead", f"{overhead:.6g}"]
    out = []
    for name, n, _, strat in configs:
        if strat is None:
            continue
        dp, pp, tp, micro = strat
        bandwidth, latency = links.get(n, links[min(groups)])
        cmd = [spore, "plan-parallel", spec, "--devices", str(n), "--bandwidth", f"{bandwidth:.6g}",
               "--latency", f"{latency:.6g}", "--global-batch", str(GLOBAL_BATCH), "--shared-cores",
               f"{eff_cores.get(n, 1.0):.3g}", "--strategy", f"{dp},{pp},{tp},{micro}", "--json"] + device
        p = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        pred = p["chosen"]["step_s"]
        out.append({"config": name, "ranks": n, "measured_s": measured[name], "runs_s": runs[name], "predicted_s": pred,
                    "error": pred / measured[name] - 1})
    best = {}
    for n in sorted({c[1] for c in configs}):
        bandwidth, latency = links.get(n, links[min(groups)])
        cmd = [spore, "plan-parallel", spec, "--devices", str(n), "--bandwidth", f"{bandwidth:.6g}",
               "--latency", f"{latency:.6g}", "--global-batch", str(GLOBAL_BATCH), "--json"] + device
        if n > 1:
            cmd += ["--shared-cores", f"{eff_cores[n]:.3g}"]
        p = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        c = p["chosen"]
        best[n] = f"dp {c['dp']} x pp {c['pp']} x tp {c['tp']}, {c['micro_batches']} micro-batches"
    load = open("/proc/loadavg").read().split()[:3]
    if as_json:
        print(json.dumps({"links": {n: {"bandwidth": b, "latency": l} for n, (b, l) in links.items()}, "one_rank_tokens_per_s": one_tps,
                          "flops_per_s": rate, "op_overhead_s": overhead, "ops_per_step": ops,
                          "cores": cores, "effective_cores": eff_cores, "repeat": repeat, "steps": steps, "loadavg": load, "rows": out,
                          "chosen": best}))
        return 0
    print("allreduce: " + ", ".join(f"{n} ranks {b / 1e9:.3f} GB/s bus bandwidth at 256 KiB, latency {l * 1e6:.1f} us"
                                    for n, (b, l) in links.items()) + "; "
          f"1 rank: {one_tps:.0f} tokens/s; device: {rate / 1e9:.2f} GFLOP/s + {overhead * 1e6:.1f} us per op "
          f"({ops:.0f} ops per step); {cores} cores, effective "
          f"{', '.join(f'{v:.2f} for {n} processes at once' for n, v in eff_cores.items())}; load average {' '.join(load)}")
    print(f"{'config':<16} {'ranks':>5} {'measured':>11} {'predicted':>11} {'error':>8}  runs (ms)")
    for o in out:
        print(f"{o['config']:<16} {o['ranks']:>5} {o['measured_s'] * 1e3:>9.1f}ms {o['predicted_s'] * 1e3:>9.1f}ms "
              f"{o['error'] * 100:>+7.1f}%  {' '.join(f'{t * 1e3:.1f}' for t in o['runs_s'])}")
    for n, s in best.items():
        print(f"plan-parallel's choice for {n} device(s): {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
