#!/usr/bin/env python3
"""The language model shipped in data/lm/shakespeare.gguf (trained by spore train-lm; data/README.md) through
spore generate: it loads as an f16 Llama with its own BPE tokenizer, greedy decoding gives the same tokens at 1
and 2 threads, and the text is the corpus' kind - speaker headings ("KING RICHARD III:") and, with the corpus
present, words the corpus has. A random-weight model of this shape prints neither.

usage: shipped_lm_test.py SPORE
The word check needs $SPORE_SHARED_DATA/text-corpus (skipped without it unless CI=true); the rest always runs.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "data", "lm", "shakespeare.gguf")


def fail(msg, p=None):
    if p is not None:
        msg += f"\n--- rc={p.returncode}\n--- stdout:\n{p.stdout[-2000:]}\n--- stderr:\n{p.stderr[-2000:]}"
    sys.exit(msg)


def greedy(spore, prompt, threads):
    p = subprocess.run([spore, "generate", MODEL, "-p", prompt, "-n", "64", "--temp", "0", "--ignore-eos",
                        "--threads", str(threads), "--json"], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail(f"spore generate on the shipped model failed (threads {threads})", p)
    return json.loads(p.stdout)


def main():
    spore = sys.argv[1]
    if not os.path.exists(MODEL):
        fail(f"{MODEL} is missing (the repository ships it)")
    for prompt in ("ROMEO:", "First Citizen:\n"):
        a, b = greedy(spore, prompt, 1), greedy(spore, prompt, 2)
        if a["model"]["arch"] != "llama" or a["model"]["weights"] != "f16" or a["model"]["vocab"] != 768:
            fail(f"unexpected model summary {a['model']}")
        if len(a["tokens"]) != 64:
            fail(f"asked for 64 tokens, got {len(a['tokens'])}")
        if a["tokens"] != b["tokens"]:
            fail(f"greedy tokens differ between 1 and 2 threads:\n{a['tokens']}\n{b['tokens']}")
        text = a["text"]
        if not re.search(r"\n[A-Z][A-Za-z]+( [A-Z][A-Za-z]+)*:\n", text):
            fail(f"no speaker heading in the greedy text after {prompt!r}: {text!r}")
        print(f"{prompt!r} -> {text[:120]!r}")
        corpus_dir = os.path.join(os.environ.get("SPORE_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data")),
                                  "text-corpus")
        corpus = os.path.join(corpus_dir, "tinyshakespeare.txt")
        if not os.path.exists(corpus):
            if os.environ.get("CI") == "true":
                fail(f"CI=true but {corpus} is missing")
            print("SKIPPED the word check: no text corpus")
            continue
        vocab = set(re.findall(r"[A-Za-z']+", open(corpus, encoding="utf-8").read()))
        words = re.findall(r"[A-Za-z']+", text)
        known = sum(w in vocab for w in words)
        if len(words) < 10 or known < 0.9 * len(words):
            fail(f"only {known} of {len(words)} generated words are in the corpus: {text!r}")
        print(f"  {known} of {len(words)} words are corpus words")


main()
