#!/usr/bin/env python3
"""spore tokenize: ids for known texts (GPT-2 and Llama SentencePiece GGUF vocabularies, the Qwen3 Hugging Face
folder), --add-special adds BOS only where the model asks, --json, and a bad file is a one-line error.

usage: tokenize_test.py SPORE
Needs $SPORE_SHARED_DATA/tokenizer-tests; exits 77 (skip) without it unless CI=true.
"""
import json
import os
import subprocess
import sys
import tempfile


def run(*args, stdin=None):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, input=stdin)


def fail(msg, p=None):
    if p is not None:
        msg += f"\n--- rc={p.returncode}\n--- stdout:\n{p.stdout[-2000:]}\n--- stderr:\n{p.stderr[-2000:]}"
    sys.exit(msg)


def ids(spore, *args, stdin=None):
    p = run(spore, "tokenize", *args, stdin=stdin)
    if p.returncode != 0:
        fail(f"spore tokenize {' '.join(args)} failed", p)
    return p.stdout.strip()


def main():
    spore = sys.argv[1]
    data = os.environ.get("SPORE_SHARED_DATA", "")
    tests = os.path.join(data, "tokenizer-tests")
    if not data or not os.path.isdir(tests):
        if os.environ.get("CI") == "true":
            fail(f"shared data missing under CI=true: '{tests}'")
        print(f"SKIP: no shared data at '{tests}'")
        sys.exit(77)
    vocab = os.path.join(tests, "llama.cpp-vocab")
    gpt2 = os.path.join(vocab, "ggml-vocab-gpt-2.gguf")
    spm = os.path.join(vocab, "ggml-vocab-llama-spm.gguf")
    qwen = os.path.join(tests, "hf-qwen3")

    checks = [
        ((gpt2, "Hello world"), "15496 995"),
        ((gpt2, " Hello, world!"), "18435 11 995 0"),
        ((gpt2, "Hello world", "--add-special"), "15496 995"),  # GPT-2 adds no BOS
        ((spm, "Hello world"), "15043 3186"),
        ((spm, "Hello world", "--add-special"), "1 15043 3186"),
        ((qwen, "Hello world"), "9707 1879"),
        ((qwen, " Hello, world!"), "21927 11 1879 0"),
        ((qwen, "<|im_start|>", "--parse-special"), "151644"),
    ]
    for args, want in checks:
        got = ids(spore, *args)
        if got != want:
            fail(f"spore tokenize {args}: expected '{want}', got '{got}'")
    if ids(spore, spm, "-", stdin="Hello world") != "15043 3186":
        fail("spore tokenize MODEL - (standard input) gave different ids")

    p = run(spore, "tokenize", gpt2, " Hello, world!", "--json")
    if p.returncode != 0:
        fail("--json failed", p)
    j = json.loads(p.stdout)
    if j.get("ids") != [18435, 11, 995, 0] or j.get("pieces") != ["\u0120Hello", ",", "\u0120world", "!"]:
        fail(f"--json: unexpected {j}")

    p = run(spore, "tokenize", qwen, "Hi", "--chat", "--json")
    if p.returncode != 0:
        fail("--chat failed", p)
    pieces = json.loads(p.stdout)["pieces"]
    if pieces[0] != "<|im_start|>" or pieces[-3:] != ["<|im_start|>", "assistant", "\u010a"]:
        fail(f"--chat with the Qwen3 template: unexpected pieces {pieces}")

    with tempfile.TemporaryDirectory() as tmp:
        bad = os.path.join(tmp, "broken.gguf")
        with open(bad, "wb") as f:
            f.write(b"GGUF\x03\x00\x00\x00\x01")
        for path in (bad, os.path.join(tmp, "missing.gguf")):
            p = run(spore, "tokenize", path, "Hello")
            err = p.stderr.strip()
            if p.returncode == 0 or not err or "\n" in err or os.path.basename(path) not in err:
                fail(f"a bad model file must be a one-line error naming it ({path})", p)
    print("ok")


main()
