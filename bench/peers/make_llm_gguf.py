#!/usr/bin/python3
"""Writes random-weight Llama- or Qwen2-shaped GGUF files (v3) that llama.cpp and spore can load.

  make_llm_gguf.py --arch llama --shape tiny --dtype q8_0 -o llama-tiny-q8_0.gguf
  make_llm_gguf.py --arch qwen2 --shape qwen2.5-0.5b --dtype f16 -o qwen2.5-0.5b-random-f16.gguf

Weights are N(0, 0.02) (norm weights 1 + N(0, 0.02)), from numpy's PCG64 seeded with --seed, generated tensor by
tensor in file order, so the same arguments always give the same bytes. 2-D weights are stored as --dtype; norms and
biases stay F32 (as llama.cpp's converter does). The tokenizer metadata is real: Llama copies the tokenizer.* keys of
llama.cpp's ggml-vocab-llama-spm.gguf, Qwen2 builds a byte-level BPE vocab (model "gpt2", pre "qwen2") from the
Hugging Face tokenizer.json of hf-qwen3, padded to the vocab size with [PADn] tokens. Both come from
$SPORE_SHARED_DATA (default ../shared/data next to the repository).

The GGUF encoding is written here (no gguf package): header, key/values, tensor infos, then the data at 32-byte
alignment; Q8_0 blocks are an f16 scale max|x|/127 followed by 32 int8 codes round(x/scale), halves away from zero.
Needs only the standard library and numpy.
"""
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np

ALIGN = 32

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
# ggml tensor types, and general.file_type values for files that are "mostly" that type
GGML = {"f32": (0, 0), "f16": (1, 1), "q8_0": (8, 7)}

SHAPES = {
    # hidden, layers, heads, kv heads, ffn, context
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, context=2048),
    "small": dict(hidden=256, layers=4, heads=8, kv_heads=2, ffn=704, context=4096),
    "qwen2.5-0.5b": dict(hidden=896, layers=24, heads=14, kv_heads=2, ffn=4864, context=32768),
}


# ---- reading GGUF (for the Llama vocab file) ----

class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.d[self.p:self.p + n]
        self.p += n
        return s.decode("utf-8")

    SCALAR = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?", U64: "Q", I64: "q",
              F64: "d"}

    def value(self, t):
        if t == STRING:
            return self.string()
        if t == ARRAY:
            et, n = self.take("I"), self.take("Q")
            if et in self.SCALAR and et != BOOL:
                fmt = self.SCALAR[et]
                arr = np.frombuffer(self.d, dtype="<" + fmt, count=n, offset=self.p)
                self.p += n * struct.calcsize(fmt)
                return (et, arr.tolist())
            return (et, [self.value(et) for _ in range(n)])
        return self.take(self.SCALAR[t])


def read_kv(path):
    """The metadata of a GGUF file as {key: (type, value)}; arrays as (ARRAY, (elem_type, list))."""
    with open(path, "rb") as f:
        r = Reader(f.read())
    magic, version, n_tensors, n_kv = r.take("4sIQQ")
    if magic != b"GGUF" or version not in (2, 3):
        sys.exit(f"{path}: not a GGUF v2/v3 file")
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        t = r.take("I")
        kv[k] = (t, r.value(t))
    return kv


# ---- tokenizers ----

def llama_tokenizer(data_dir):
    kv = read_kv(os.path.join(data_dir, "tokenizer-tests/llama.cpp-vocab/ggml-vocab-llama-spm.gguf"))
    return {k: v for k, v in kv.items() if k.startswith("tokenizer.")}


def looks_special(tok):
    # The token texts llama.cpp's converter treats as control tokens even when not marked special.
    return (tok in ("<pad>", "<mask>") or (tok.startswith("<|") and tok.endswith("|>")) or
            tok.startswith("<start_of_") or tok.startswith("<end_of_"))


def qwen2_tokenizer(data_dir, vocab_size):
    with gzip.open(os.path.join(data_dir, "tokenizer-tests/hf-qwen3/tokenizer.json.gz"), "rt", encoding="utf-8") as f:
        tj = json.load(f)
    by_id = {i: (t, 1) for t, i in tj["model"]["vocab"].items()}  # 1 = normal
    for a in tj.get("added_tokens", []):
        by_id[a["id"]] = (a["content"], 3 if a["special"] or looks_special(a["content"]) else 4)  # control / user
    n = max(vocab_size, max(by_id) + 1)
    tokens, types = [], []
    for i in range(n):
        t, ty = by_id.get(i, (f"[PAD{i}]", 5))  # 5 = unused
        tokens.append(t)
        types.append(ty)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    eot = tj["model"]["vocab"].get("<|endoftext|>")
    if eot is None:
        eot = next(a["id"] for a in tj["added_tokens"] if a["content"] == "<|endoftext|>")
    return {
        "tokenizer.ggml.model": (STRING, "gpt2"),
        "tokenizer.ggml.pre": (STRING, "qwen2"),
        "tokenizer.ggml.tokens": (ARRAY, (STRING, tokens)),
        "tokenizer.ggml.token_type": (ARRAY, (I32, types)),
        "tokenizer.ggml.merges": (ARRAY, (STRING, merges)),
        "tokenizer.ggml.bos_token_id": (U32, eot),
        "tokenizer.ggml.eos_token_id": (U32, eot),
        "tokenizer.ggml.padding_token_id": (U32, eot),
        "tokenizer.ggml.add_bos_token": (BOOL, False),
    }


# ---- writing ----

def enc_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


SCALAR_FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?", U64: "Q", I64: "q",
              F64: "d"}


def enc_value(t, v):
    if t == STRING:
        return enc_string(v)
    if t == ARRAY:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        if et == STRING:
            return out + b"".join(enc_string(s) for s in items)
        return out + np.asarray(items, dtype="<" + SCALAR_FMT[et]).tobytes()
    return struct.pack("<" + SCALAR_FMT[t], v)


def quantize_q8_0(x):
    blocks = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    d = amax / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    v = blocks * inv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)  # round half away from zero
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def tensor_plan(arch, s, vocab):
    """[(name, row-major shape, kind)] in file order; kind is 'norm', 'bias' or 'weight'."""
    hd = s["hidden"] // s["heads"]
    h, kvd, ffn = s["hidden"], s["kv_heads"] * hd, s["ffn"]
    plan = [("token_embd.weight", (vocab, h), "weight")]
    for i in range(s["layers"]):
        b = f"blk.{i}."
        plan += [(b + "attn_norm.weight", (h,), "norm"),
                 (b + "attn_q.weight", (s["heads"] * hd, h), "weight"),
                 (b + "attn_k.weight", (kvd, h), "weight"),
                 (b + "attn_v.weight", (kvd, h), "weight")]
        if arch == "qwen2":
            plan += [(b + "attn_q.bias", (s["heads"] * hd,), "bias"), (b + "attn_k.bias", (kvd,), "bias"),
                     (b + "attn_v.bias", (kvd,), "bias")]
        plan += [(b + "attn_output.weight", (h, s["heads"] * hd), "weight"),
                 (b + "ffn_norm.weight", (h,), "norm"),
                 (b + "ffn_gate.weight", (ffn, h), "weight"),
                 (b + "ffn_up.weight", (ffn, h), "weight"),
                 (b + "ffn_down.weight", (h, ffn), "weight")]
    plan.append(("output_norm.weight", (h,), "norm"))
    if arch == "llama":  # Qwen2 (0.5B) ties the output projection to the embedding
        plan.append(("output.weight", (vocab, h), "weight"))
    return plan


def nbytes(shape, ggml_type):
    n = int(np.prod(shape))
    return {0: 4 * n, 1: 2 * n, 8: n // 32 * 34}[ggml_type]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=["llama", "qwen2"], required=True)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--dtype", choices=sorted(GGML), default="f32", help="type of the 2-D weights")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, help="override the shape's layer count")
    ap.add_argument("--data", default=os.environ.get("SPORE_SHARED_DATA") or
                    os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../shared/data"))
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()

    s = dict(SHAPES[args.shape])
    if args.layers:
        s["layers"] = args.layers
    arch = args.arch
    if arch == "llama":
        tok = llama_tokenizer(args.data)
        rope_base = 10000.0
    else:
        tok = qwen2_tokenizer(args.data, 151936)
        rope_base = 1000000.0
    vocab = len(tok["tokenizer.ggml.tokens"][1][1])
    wtype, file_type = GGML[args.dtype]

    kv = [("general.architecture", STRING, arch),
          ("general.name", STRING, f"spore random {arch} {args.shape} {args.dtype} seed {args.seed}"),
          ("general.file_type", U32, file_type),
          ("general.quantization_version", U32, 2),
          (f"{arch}.vocab_size", U32, vocab),
          (f"{arch}.context_length", U32, s["context"]),
          (f"{arch}.embedding_length", U32, s["hidden"]),
          (f"{arch}.block_count", U32, s["layers"]),
          (f"{arch}.feed_forward_length", U32, s["ffn"]),
          (f"{arch}.attention.head_count", U32, s["heads"]),
          (f"{arch}.attention.head_count_kv", U32, s["kv_heads"]),
          (f"{arch}.rope.dimension_count", U32, s["hidden"] // s["heads"]),
          (f"{arch}.attention.layer_norm_rms_epsilon", F32, 1e-6 if arch == "qwen2" else 1e-5),
          (f"{arch}.rope.freq_base", F32, rope_base)]
    kv += [(k, t, v) for k, (t, v) in tok.items()]

    plan = []
    offset = 0
    for name, shape, kind in tensor_plan(arch, s, vocab):
        t = wtype if kind == "weight" else 0
        if t == 8 and shape[-1] % 32:
            t = 1  # a row that does not fill Q8_0 blocks stays F16
        plan.append((name, shape, kind, t, offset))
        offset += (nbytes(shape, t) + ALIGN - 1) // ALIGN * ALIGN

    head = bytearray(struct.pack("<4sIQQ", b"GGUF", 3, len(plan), len(kv)))
    for k, t, v in kv:
        head += enc_string(k) + struct.pack("<I", t) + enc_value(t, v)
    for name, shape, kind, t, off in plan:
        head += enc_string(name) + struct.pack("<I", len(shape))
        head += b"".join(struct.pack("<Q", d) for d in reversed(shape))  # GGUF lists dims fastest first
        head += struct.pack("<IQ", t, off)
    head += b"\0" * (-len(head) % ALIGN)

    rng = np.random.default_rng(args.seed)
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head)
        pos = 0
        for name, shape, kind, t, off in plan:
            f.write(b"\0" * (off - pos))
            x = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
            if kind == "norm":
                x += np.float32(1)
            data = x.astype("<f4").tobytes() if t == 0 else x.astype("<f2").tobytes() if t == 1 else quantize_q8_0(x)
            assert len(data) == nbytes(shape, t)
            f.write(data)
            pos = off + len(data)
    os.replace(tmp, args.out)
    print(f"{args.out}: {arch} {args.shape} {args.dtype}, {len(plan)} tensors, vocab {vocab}, "
          f"{os.path.getsize(args.out) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
