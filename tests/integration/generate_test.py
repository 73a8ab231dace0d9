#!/usr/bin/env python3
"""spore generate on the third-party tiny Llama GGUF (shared data): --json keys (DESIGN.md), greedy output identical
across runs, 1/2 threads and KV cache types (f16 cache = half the bytes, int8 = rows + a scale per row), seeded sampling reproducible, stop strings,
streaming text, and one-line errors for bad input (memory cap, bad flags, missing model).

usage: generate_test.py SPORE
Needs $SPORE_SHARED_DATA/gguf-models; exits 77 (skip) without it unless CI=true.
"""
import json
import os
import subprocess
import sys


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=300)


def fail(msg, p=None):
    if p is not None:
        msg += f"\n--- rc={p.returncode}\n--- stdout:\n{p.stdout[-2000:]}\n--- stderr:\n{p.stderr[-2000:]}"
    sys.exit(msg)


def gen_json(spore, model, *args):
    p = run(spore, "generate", model, "--json", *args)
    if p.returncode != 0:
        fail(f"spore generate {' '.join(args)} failed", p)
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        fail("spore generate --json printed no JSON", p)


def expect_error(spore, needle, *args):
    p = run(spore, "generate", *args)
    if p.returncode == 0:
        fail(f"spore generate {' '.join(args)} should fail", p)
    lines = [l for l in p.stderr.strip().splitlines() if l]
    if len(lines) != 1 or needle not in lines[0]:
        fail(f"spore generate {' '.join(args)}: expected one error line containing '{needle}'", p)


def main():
    spore = sys.argv[1]
    data = os.environ.get("SPORE_SHARED_DATA", "")
    model = os.path.join(data, "gguf-models", "llama-2-tiny-random.gguf")
    if not data or not os.path.isfile(model):
        if os.environ.get("CI") == "true":
            fail(f"shared data missing under CI=true: '{model}'")
        print(f"SKIP: no shared data at '{model}'")
        sys.exit(77)

    prompt = "Once upon a time"
    a = gen_json(spore, model, "-p", prompt, "-n", "24", "--ignore-eos", "--threads", "2")
    for key in ("tokens", "text", "prompt_tokens", "generated_tokens", "load_ms", "ttft_ms", "prefill_tok_s",
                "decode_tok_s"):
        if key not in a:
            fail(f"--json lacks '{key}': {sorted(a)}")
    if a["generated_tokens"] != 24 or len(a["tokens"]) != 24:
        fail(f"expected 24 tokens with --ignore-eos, got {a['generated_tokens']}")
    tok = run(spore, "tokenize", model, prompt, "--add-special")
    if tok.returncode != 0 or [int(x) for x in tok.stdout.split()] != a["prompt_ids"]:
        fail(f"prompt ids {a['prompt_ids']} differ from spore tokenize --add-special", tok)
    if not (a["ttft_ms"] > 0 and a["prefill_tok_s"] > 0 and a["decode_tok_s"] > 0):
        fail(f"timings not measured: {a}")

    # Greedy: same tokens again, with 1 thread, and with f16 / bf16 KV caches (which take half the bytes).
    b = gen_json(spore, model, "-p", prompt, "-n", "24", "--ignore-eos", "--threads", "1")
    if b["tokens"] != a["tokens"]:
        fail(f"greedy tokens differ between 2 and 1 threads:\n{a['tokens']}\n{b['tokens']}")
    f32 = gen_json(spore, model, "-p", prompt, "-n", "64", "--ignore-eos", "--ctx", "256")
    f16 = gen_json(spore, model, "-p", prompt, "-n", "64", "--ignore-eos", "--ctx", "256", "--kv-type", "f16")
    if f16["tokens"] != f32["tokens"]:
        fail(f"64 greedy tokens differ between KV f32 and f16:\n{f32['tokens']}\n{f16['tokens']}")
    if f16["kv_bytes"] * 2 != f32["kv_bytes"]:
        fail(f"KV f16 bytes {f16['kv_bytes']} are not half of f32's {f32['kv_bytes']}")
    i8 = gen_json(spore, model, "-p", prompt, "-n", "64", "--ignore-eos", "--ctx", "256", "--kv-type", "int8")
    if i8["tokens"] != f32["tokens"]:
        fail(f"64 greedy tokens differ between KV f32 and int8:\n{f32['tokens']}\n{i8['tokens']}")
    mdl = i8["model"]
    d = mdl["embd"] // mdl["heads"]
    want = 2 * mdl["layers"] * mdl["kv_heads"] * 256 * (d + 4)  # int8 rows + one f32 scale per row
    if i8["kv_bytes"] != want:
        fail(f"KV int8 bytes {i8['kv_bytes']}, expected {want}")

    # Seeded sampling reproduces; the prompt can be given as ids.
    ids = ",".join(str(i) for i in a["prompt_ids"])
    s1 = gen_json(spore, model, "--tokens", ids, "-n", "24", "--temp", "0.9", "--top-k", "40", "--seed", "7",
                  "--ignore-eos", "--threads", "2")
    s2 = gen_json(spore, model, "--tokens", ids, "-n", "24", "--temp", "0.9", "--top-k", "40", "--seed", "7",
                  "--ignore-eos", "--threads", "1")
    if s1["tokens"] != s2["tokens"]:
        fail(f"seeded sampling differs between runs:\n{s1['tokens']}\n{s2['tokens']}")

    # A stop string cut from the greedy text: the output ends right before it.
    text = a["text"]
    if len(text) >= 6:
        stop = text[3:6]
        st = gen_json(spore, model, "-p", prompt, "-n", "24", "--ignore-eos", "--stop", stop)
        if st["stop_reason"] != "stop" or stop in st["text"] or not text.startswith(st["text"]):
            fail(f"--stop '{stop}': got {st['stop_reason']} '{st['text']}' from '{text}'")

    # Streaming: the text on stdout, one stats line on stderr.
    p = run(spore, "generate", model, "-p", prompt, "-n", "24", "--ignore-eos")
    if p.returncode != 0 or p.stdout != a["text"] or "decode" not in p.stderr:
        fail(f"streamed text differs from --json text '{a['text']}'", p)

    expect_error(spore, "--max-memory allows", model, "-p", prompt, "--ctx", "100000000", "--max-memory", "1GB")
    expect_error(spore, "--kv-type 'q3'", model, "-p", prompt, "--kv-type", "q3")
    expect_error(spore, "outside the vocabulary", model, "--tokens", "1,99999999")
    expect_error(spore, "one of them", model, "-p", prompt, "--tokens", "1,2")
    expect_error(spore, "does not exist", "/nonexistent/model.gguf", "-p", prompt)
    print("OK")


if __name__ == "__main__":
    main()
