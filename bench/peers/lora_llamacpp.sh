#!/usr/bin/env bash
# spore's LoRA adapter in llama.cpp (issue 25): a base trained by `spore train-lm` (by default the Shakespeare model
# shipped in data/lm/shakespeare.gguf; `train` trains the README's ctx-64 one), LoRA-tuned on KJV text by `spore finetune`, and its GGUF adapter (adapter.gguf) loaded by the llama.cpp build of
# bench/peers/llama (llama-completion --lora). Greedy decoding of spore generate --lora and of llama.cpp, both on the
# f32 base with the adapter applied at run time, from the same prompt; prints both texts and exits non-zero when they
# differ. Also prints the KJV validation loss of the base and of the tuned model (spore finetune's report).
#   bash bench/peers/lora_llamacpp.sh [SPORE=build/spore] [BASE.gguf (default: data/lm/shakespeare.gguf) | train]
#                                     [ADAPTER_DIR (default: tuned here)]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
spore="${1:-$root/build/spore}"
data="$root/../shared/data/text-corpus"
bin="$root/bench/peers/llama/build/bin"
[ -x "$bin/llama-completion" ] || { echo "build llama.cpp first: bash bench/peers/llama/build.sh" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
base="${2:-$root/data/lm/shakespeare.gguf}"
adapter="${3:-}"
ctx=128
if [ "$base" = train ]; then
  ctx=64
  base="$work/base.gguf"
  "$spore" train-lm --arch llama --dim 192 --layers 4 --heads 6 --kv-heads 2 --ffn 512 --ctx 64 \
    --data "$data/tinyshakespeare.txt" --train-tokenizer --vocab 768 --batch 16 --steps 300 --lr 3e-3 --warmup 15 \
    --eval-every 100 --ckpt-dir "$work/ck" -o "$base" --json | tail -1
fi
if [ -z "$adapter" ]; then
  adapter="$work/adapter"
  head -c 3000000 "$data/kjv-bible.txt" | tail -c 2000000 >"$work/kjv_train.txt"
  tail -c 300000 "$data/kjv-bible.txt" >"$work/kjv_val.txt"
  "$spore" finetune "$base" --data "$work/kjv_train.txt" --val-data "$work/kjv_val.txt" --lora-r 8 --lora-alpha 16 \
    --lora-dropout 0.05 --lora-targets all-linear --steps 200 --lr 5e-3 --warmup 10 --batch 16 --ctx "$ctx" \
    --eval-batches 8 --eval-every 100 -o "$adapter" --json | tail -1
fi

prompt="And God said"
n=40
"$spore" generate "$base" --lora "$adapter/adapter.gguf" -p "$prompt" -n "$n" --temp 0 --ignore-eos --json \
  >"$work/spore.json"
"$spore" generate "$base" -p "$prompt" -n "$n" --temp 0 --ignore-eos --json >"$work/spore_base.json"
"$bin/llama-completion" -m "$base" --lora "$adapter/adapter.gguf" -p "$prompt" -n "$n" -c "$ctx" --temp 0 \
  --ignore-eos -no-cnv --no-display-prompt --simple-io -t 2 2>"$work/llama.err" >"$work/llama.txt" || {
  cat "$work/llama.err" >&2
  exit 1
}
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
s = json.load(open(f"{work}/spore.json"))["text"]
b = json.load(open(f"{work}/spore_base.json"))["text"]
l = open(f"{work}/llama.txt", encoding="utf-8", errors="replace").read()
# llama-completion may end its output with a newline or an end-of-text marker of its own
l = l.replace(" [end of text]", "").rstrip("\n") if not s.endswith("\n") else l
n = min(len(s), len(l))
first = next((i for i in range(n) if s[i] != l[i]), n)
print("spore generate --lora:", repr(s))
print("llama.cpp --lora:     ", repr(l))
print("spore without adapter:", repr(b))
print(f"identical characters: {first} of spore's {len(s)} (llama.cpp {len(l)}); the adapter changes the text: {s != b}")
sys.exit(0 if first == len(s) and len(s) > 0 and s != b else 1)
PY
