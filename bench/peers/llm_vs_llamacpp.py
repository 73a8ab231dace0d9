#!/usr/bin/env python3
"""spore's LLM path against llama.cpp on the same GGUF files, in the same run (issue 6).

1. Numerics: for each model, the same prompt ids; llama.cpp (bench/peers/llama/build/bin/llama_ref, F32 KV cache)
   and `spore generate --tokens ... --dump-logits` (F32 KV cache) each give the logits after the prompt and after
   each of 32 greedy tokens. Reported: how many greedy tokens agree, and the largest row-relative logit error
   max|spore - llama| / max|llama| over the rows before the first differing token.
2. Speed (2 threads): prefill of 512 tokens (pp512) and decode of 128 tokens (tg128), llama-bench vs spore generate,
   interleaved, medians of --reps runs; ratios spore / llama.cpp. Decode also as % of the memory-bandwidth roofline:
   (weight bytes read per token) / (STREAM triad bandwidth measured in this run with build/bench/stream_triad).

usage: /usr/bin/python3 bench/peers/llm_vs_llamacpp.py [--spore build/spore] [--models DIR] [--reps 3]
       [--threads 2] [--skip-speed] [--skip-numerics] [--json OUT]
Models are written by bench/peers/make_llm_gguf.py into --models (default bench/peers/llama/models, gitignored) when
missing. llama.cpp must be built first: bash bench/peers/llama/build.sh.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LLAMA_BIN = os.path.join(HERE, "llama", "build", "bin")
SHARED_TINY = os.path.join(ROOT, "..", "shared", "data", "gguf-models", "llama-2-tiny-random.gguf")

MODELS = [  # (file, make_llm_gguf args, numerics, speed)
    ("llama-tiny-f32.gguf", ["--arch", "llama", "--shape", "tiny", "--dtype", "f32"], True, False),
    ("qwen2-tiny-f32.gguf", ["--arch", "qwen2", "--shape", "tiny", "--dtype", "f32"], True, False),
    ("llama-small-f32.gguf", ["--arch", "llama", "--shape", "small", "--dtype", "f32"], True, False),
    ("qwen2-small-f16.gguf", ["--arch", "qwen2", "--shape", "small", "--dtype", "f16"], True, False),
    ("qwen2.5-0.5b-f16.gguf", ["--arch", "qwen2", "--shape", "qwen2.5-0.5b", "--dtype", "f16"], True, True),
    ("qwen2.5-0.5b-q8_0.gguf", ["--arch", "qwen2", "--shape", "qwen2.5-0.5b", "--dtype", "q8_0"], True, True),
]


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def ensure_models(d):
    os.makedirs(d, exist_ok=True)
    out = []
    for name, args, num, speed in MODELS:
        path = os.path.join(d, name)
        if not os.path.exists(path):
            print(f"writing {path}", flush=True)
            run([sys.executable, os.path.join(HERE, "make_llm_gguf.py"), *args, "-o", path])
        out.append((path, num, speed))
    if os.path.exists(SHARED_TINY):
        out.insert(0, (os.path.abspath(SHARED_TINY), True, False))
    return out


def prompt_ids(n_vocab, n, seed=1):
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(3, min(n_vocab, 30000), size=n)]


def n_vocab_of(spore, model):
    j = json.loads(run([spore, "generate", model, "--tokens", "1", "-n", "1", "--json", "--ctx", "64"]))
    return j["model"]["vocab"], j["model"]["weight_bytes_per_token"], j["model"]["weights"]


def numerics(spore, model, threads, n_decode=32):
    vocab, _, wtype = n_vocab_of(spore, model)
    ids = prompt_ids(vocab, 8)
    with tempfile.TemporaryDirectory() as tmp:
        run([os.path.join(LLAMA_BIN, "llama_ref"), model, "--tokens", ",".join(map(str, ids)), "--n-decode",
             str(n_decode), "--threads", str(threads), "--ctk", "f32", "--out", tmp])
        ref = np.fromfile(os.path.join(tmp, "logits.f32"), dtype=np.float32).reshape(-1, vocab)
        ref_tokens = [int(x) for x in open(os.path.join(tmp, "tokens.txt")).read().split()]
        dump = os.path.join(tmp, "spore.f32")
        j = json.loads(run([spore, "generate", model, "--tokens", ",".join(map(str, ids)), "-n", str(n_decode + 1),
                            "--ignore-eos", "--json", "--threads", str(threads), "--ctx", "256", "--kv-type", "f32",
                            "--dump-logits", dump]))
        got = np.fromfile(dump, dtype=np.float32).reshape(-1, vocab)
    tokens = j["tokens"][:n_decode]
    same = 0
    while same < len(tokens) and same < len(ref_tokens) and tokens[same] == ref_tokens[same]:
        same += 1
    rows = min(same + 1, len(ref), len(got))  # rows computed from identical histories
    err = max(float(np.max(np.abs(got[r].astype(np.float64) - ref[r])) / np.max(np.abs(ref[r]))) for r in range(rows))
    return {"model": os.path.basename(model), "weights": wtype, "greedy_same": same, "greedy_of": n_decode,
            "max_rel_err": err, "rows_compared": rows}


def stream_bw(threads):
    """(STREAM triad, read-only sum) GB/s with `threads` threads over 256 MiB arrays, best of 5
    (build/bench/stream_triad)."""
    exe = os.path.join(ROOT, "build", "bench", "stream_triad")
    if not os.path.exists(exe):
        return None, None
    out = run([exe, "--benchmark_format=json", f"--benchmark_filter=n:33554432/threads:{threads}/",
               "--benchmark_repetitions=5"])
    best = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") == "iteration" and "GB/s" in b:
            kind = "read" if b["name"].startswith("BM_read") else "triad"
            best[kind] = max(best.get(kind, 0), b["GB/s"])
    return best.get("triad"), best.get("read")


def llama_bench(model, threads, mmap):
    out = run([os.path.join(LLAMA_BIN, "llama-bench"), "-m", model, "-p", "512", "-n", "128", "-t", str(threads),
               "-r", "1", "-o", "json", "-mmp", "1" if mmap else "0"])
    pp = tg = None
    for r in json.loads(out):
        if r.get("n_prompt") == 512 and r.get("n_gen") == 0:
            pp = r["avg_ts"]
        if r.get("n_gen") == 128 and r.get("n_prompt") == 0:
            tg = r["avg_ts"]
    return pp, tg


def spore_bench(spore, model, threads, vocab, mmap):
    # --warmup: one untimed run of the same prompt (and a decode step) first, as llama-bench's default warm-up run;
    # both sides then time the steady state (a cold first prefill pays its arena's page faults).
    no_mmap = [] if mmap else ["--no-mmap"]
    ids = ",".join(map(str, prompt_ids(vocab, 512, seed=2)))
    pp = json.loads(run([spore, "generate", model, "--tokens", ids, "-n", "1", "--json", "--threads", str(threads),
                         "--ctx", "1024", "--warmup"] + no_mmap))["prefill_tok_s"]
    tg = json.loads(run([spore, "generate", model, "--tokens", "1", "-n", "129", "--ignore-eos", "--json",
                         "--threads", str(threads), "--ctx", "1024", "--warmup"] + no_mmap))["decode_tok_s"]
    return pp, tg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spore", default=os.path.join(ROOT, "build", "spore"))
    ap.add_argument("--models", default=os.path.join(HERE, "llama", "models"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-numerics", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--no-mmap", action="store_true",
                    help="both engines read the weights into memory (spore --no-mmap, llama-bench -mmp 0) instead of "
                         "mapping the file; see docs/LLM.md on page-cache stalls")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(LLAMA_BIN, "llama_ref")):
        sys.exit("llama.cpp is not built: bash bench/peers/llama/build.sh")
    models = ensure_models(a.models)
    result = {"numerics": [], "speed": []}
    if not a.skip_numerics:
        print("\n## Numerics vs llama.cpp (F32 KV cache, 8 prompt ids, 32 greedy tokens)")
        print("| model | weights | greedy tokens identical | max row-rel logit error |")
        print("|---|---|---|---|")
        for m, num, _ in models:
            if not num:
                continue
            r = numerics(a.spore, m, a.threads)
            result["numerics"].append(r)
            print(f"| {r['model']} | {r['weights']} | {r['greedy_same']}/{r['greedy_of']} | {r['max_rel_err']:.2e} |",
                  flush=True)
    if not a.skip_speed:
        triad, read = stream_bw(a.threads)
        bw = max(x for x in (triad, read, 0) if x is not None) or None
        print(f"\n## Speed, {a.threads} threads, weights {'read into memory' if a.no_mmap else 'mmapped'}, medians of "
              f"{a.reps} interleaved runs; bandwidth (best of 5): STREAM "
              f"triad {triad and round(triad, 1)} GB/s, read-only {read and round(read, 1)} GB/s; the roofline uses "
              f"the larger")
        print("| model | llama.cpp pp512 | spore pp512 | ratio | llama.cpp tg128 | spore tg128 | ratio | "
              "roofline tok/s | spore % | llama.cpp % |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for m, _, speed in models:
            if not speed:
                continue
            vocab, wbytes, wtype = n_vocab_of(a.spore, m)
            lp, lt, sp, st = [], [], [], []
            for _ in range(a.reps):
                p, t = llama_bench(m, a.threads, not a.no_mmap)
                lp.append(p)
                lt.append(t)
                p, t = spore_bench(a.spore, m, a.threads, vocab, not a.no_mmap)
                sp.append(p)
                st.append(t)
            mp, mt, msp, mst = (statistics.median(x) for x in (lp, lt, sp, st))
            roof = bw * 1e9 / wbytes if bw else float("nan")
            r = {"model": os.path.basename(m), "weights": wtype, "mmap": not a.no_mmap, "llama_pp512": mp, "spore_pp512": msp,
                 "pp_ratio": msp / mp, "llama_tg128": mt, "spore_tg128": mst, "tg_ratio": mst / mt,
                 "weight_bytes_per_token": wbytes, "stream_triad_gbs": triad, "read_gbs": read, "roofline_tok_s": roof,
                 "runs": {"llama_pp": lp, "llama_tg": lt, "spore_pp": sp, "spore_tg": st}}
            result["speed"].append(r)
            print(f"| {r['model']} | {mp:.1f} | {msp:.1f} | {msp / mp:.2f}x | {mt:.1f} | {mst:.1f} | {mst / mt:.2f}x | "
                  f"{roof:.1f} | {100 * mst / roof:.0f}% | {100 * mt / roof:.0f}% |", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
