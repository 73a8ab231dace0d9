#!/usr/bin/python3
"""Checks llama_ref's output against an independent float64 numpy forward pass of the same GGUF file.

  numpy_ref.py MODEL.gguf OUT_DIR --tokens 1,2,3 [--emulate-vec-dot]

OUT_DIR is what `llama_ref MODEL.gguf --tokens 1,2,3 --out OUT_DIR` wrote. The prompt plus llama_ref's greedy tokens
are run through a plain Llama/Qwen2 decoder (RMSNorm, RoPE "norm" for llama / "neox" for qwen2, GQA, causal softmax,
SwiGLU, tied output when output.weight is absent) and the rows llama_ref kept are compared. With --emulate-vec-dot the
activations are rounded the way llama.cpp's CPU backend does before a matmul with F16 weights (to F16) or Q8_0
weights (to Q8_0 blocks of 32); without it, F16/Q8_0 files differ by that rounding. Only for small models (the whole
sequence is recomputed in float64). Needs numpy; reads GGUF with the reader of ../make_llm_gguf.py.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from make_llm_gguf import Reader  # noqa: E402


def load_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    r = Reader(data)
    magic, version, n_tensors, n_kv = r.take("4sIQQ")
    if magic != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        t = r.take("I")
        kv[k] = r.value(t)
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("Q") for _ in range(r.take("I"))]
        infos.append((name, dims, r.take("I"), r.take("Q")))
    align = kv.get("general.alignment", 32)
    base = (r.p + align - 1) // align * align
    weights, types = {}, {}
    for name, dims, ty, off in infos:
        n, shape = int(np.prod(dims)), tuple(reversed(dims))  # GGUF lists dims fastest first
        if ty == 0:
            a = np.frombuffer(data, "<f4", n, base + off).astype(np.float64)
        elif ty == 1:
            a = np.frombuffer(data, "<f2", n, base + off).astype(np.float64)
        elif ty == 8:
            blocks = np.frombuffer(data, np.uint8, n // 32 * 34, base + off).reshape(-1, 34)
            d = blocks[:, :2].copy().view("<f2").astype(np.float64)
            a = (blocks[:, 2:].view(np.int8).astype(np.float64) * d).reshape(-1)
        else:
            sys.exit(f"{path}: tensor {name} has ggml type {ty}; only F32, F16 and Q8_0 are handled")
        weights[name], types[name] = a.reshape(shape), ty
    return kv, weights, types


def round_q8_0(x):
    """x as ggml's x86 quantize_row_q8_0 leaves it: per 32 values, codes rint(x * 127/amax) (ties to even, in f32)
    times the scale amax/127 stored as f16."""
    b = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    mul = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax != 0)
    q = np.rint(b * mul[:, None])
    d = (amax / np.float32(127)).astype(np.float16).astype(np.float64)
    return (q * d[:, None]).reshape(x.shape)


def forward(kv, w, types, tokens, emulate):
    arch = kv["general.architecture"]
    if arch not in ("llama", "qwen2"):
        sys.exit(f"architecture {arch} is not handled")

    def hp(key, default=None):
        return kv.get(f"{arch}.{key}", default)

    hidden, heads, kv_heads = hp("embedding_length"), hp("attention.head_count"), hp("attention.head_count_kv")
    eps, theta = hp("attention.layer_norm_rms_epsilon"), hp("rope.freq_base", 10000.0)
    hd, n = hidden // heads, len(tokens)

    def mm(x, name):
        if emulate and types[name] == 1:
            x = x.astype(np.float16).astype(np.float64)
        elif emulate and types[name] == 8:
            x = round_q8_0(x)
        return x @ w[name].T

    def norm(x, name):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w[name]

    ang = np.arange(n)[:, None] * theta ** (-np.arange(0, hd, 2) / hd)[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(x):  # (n, heads, hd)
        if arch == "llama":  # "norm": rotate adjacent pairs
            a, b = x[..., 0::2], x[..., 1::2]
            out = np.empty_like(x)
            out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
            return out
        a, b = x[..., :hd // 2], x[..., hd // 2:]  # "neox": rotate (i, i + hd/2)
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)

    causal = np.tril(np.ones((n, n), bool))[None]
    x = w["token_embd.weight"][tokens]
    for layer in range(hp("block_count")):
        p = f"blk.{layer}."
        h = norm(x, p + "attn_norm.weight")
        q, k, v = (mm(h, p + f"attn_{t}.weight") + w.get(p + f"attn_{t}.bias", 0) for t in "qkv")
        q, k = rope(q.reshape(n, heads, hd)), rope(k.reshape(n, kv_heads, hd))
        k, v = np.repeat(k, heads // kv_heads, 1), np.repeat(v.reshape(n, kv_heads, hd), heads // kv_heads, 1)
        s = np.where(causal, np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd), -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + mm(np.einsum("hqk,khd->qhd", s, v).reshape(n, hidden), p + "attn_output.weight")
        h = norm(x, p + "ffn_norm.weight")
        g = mm(h, p + "ffn_gate.weight")
        x = x + mm(g / (1 + np.exp(-g)) * mm(h, p + "ffn_up.weight"), p + "ffn_down.weight")
    x = norm(x, "output_norm.weight")
    return mm(x, "output.weight" if "output.weight" in w else "token_embd.weight")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out_dir")
    ap.add_argument("--tokens", required=True, help="the prompt given to llama_ref")
    ap.add_argument("--emulate-vec-dot", action="store_true")
    args = ap.parse_args()

    prompt = [int(t) for t in args.tokens.split(",")]
    with open(os.path.join(args.out_dir, "meta.json")) as f:
        meta = json.load(f)
    got = np.fromfile(os.path.join(args.out_dir, "logits.f32"), "<f4").reshape(1 + meta["n_decode"], meta["n_vocab"])
    with open(os.path.join(args.out_dir, "tokens.txt")) as f:
        greedy = [int(line) for line in f]
    kv, w, types = load_gguf(args.model)
    ref = forward(kv, w, types, prompt + greedy, args.emulate_vec_dot)[len(prompt) - 1:]
    err = np.abs(ref - got)
    print(f"{args.model}: {got.shape[0]} rows, max |llama_ref - numpy| = {err.max():.3g} "
          f"(max |logit| {np.abs(ref).max():.3g}), argmax agrees on {np.mean(ref.argmax(1) == got.argmax(1)):.0%} "
          f"of rows{' (vec_dot rounding emulated)' if args.emulate_vec_dot else ''}")


if __name__ == "__main__":
    main()
