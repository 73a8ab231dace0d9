#!/usr/bin/env bash
# A model pretrained by `spore train-lm` run in llama.cpp (issue 25): by default the Shakespeare model shipped in
# data/lm/shakespeare.gguf (f16, ctx 128; data/lm/README.md has the command that trained it), read by the llama.cpp
# build of bench/peers/llama (build.sh first), then
#   - tokenization: llama-completion --verbose-prompt on a passage of the corpus against `spore tokenize`;
#   - greedy decoding: bench/peers/llama/build/bin/llama_ref on spore's prompt ids against `spore generate --temp 0`,
#     64 tokens after the prompt (the model's context must hold prompt + 64).
# With MODEL=train it first trains the README's ctx-64 model (300 steps), which leaves 59 tokens after the prompt.
# Prints both comparisons and exits non-zero when either differs.
#   bash bench/peers/train_lm_llamacpp.sh [SPORE=build/spore] [DATA=../shared/data/text-corpus/tinyshakespeare.txt]
#                                         [MODEL=data/lm/shakespeare.gguf | train]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
spore="${1:-$root/build/spore}"
data="${2:-$root/../shared/data/text-corpus/tinyshakespeare.txt}"
model="${3:-$root/data/lm/shakespeare.gguf}"
bin="$root/bench/peers/llama/build/bin"
[ -x "$bin/llama_ref" ] && [ -x "$bin/llama-completion" ] || { echo "build llama.cpp first: bash bench/peers/llama/build.sh" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ "$model" = train ]; then
  "$spore" train-lm --arch llama --dim 192 --layers 4 --heads 6 --kv-heads 2 --ffn 512 --ctx 64 --data "$data" \
    --train-tokenizer --vocab 768 --batch 16 --steps 300 --lr 3e-3 --warmup 15 --eval-every 100 \
    --ckpt-dir "$work/ck" -o "$work/m.gguf" --json | tail -1
else
  cp "$model" "$work/m.gguf"
fi
ctx=$("$spore" generate "$work/m.gguf" -p x -n 1 --json 2>/dev/null | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin).get('ctx', 0))" || echo 0)

# Tokenization of 13 lines of the corpus (newlines included).
text="$(sed -n 100,112p "$data")"
"$spore" tokenize "$work/m.gguf" "$text" | tr ' ' '\n' >"$work/spore_tok.txt"
"$bin/llama-completion" -m "$work/m.gguf" -p "$text" -n 1 -c 512 --verbose-prompt -no-cnv --temp 0 2>&1 |
  grep " -> '" | sed -E 's/^.* I +([0-9]+) -> .*$/\1/' >"$work/llama_tok.txt"
tok_ok=0
cmp -s "$work/spore_tok.txt" "$work/llama_tok.txt" && tok_ok=1
echo "tokenization: spore $(wc -l <"$work/spore_tok.txt") tokens, llama.cpp $(wc -l <"$work/llama_tok.txt"), identical: $tok_ok"

# Greedy decoding from "ROMEO:" (no BOS: the model's metadata asks for none).
prompt="$("$spore" tokenize "$work/m.gguf" "ROMEO:" | tr ' ' ',')"
n_prompt=$(echo "$prompt" | tr ',' '\n' | wc -l)
n=64
[ "$ctx" -gt 0 ] && [ $((ctx - n_prompt)) -lt $n ] && n=$((ctx - n_prompt))
"$spore" generate "$work/m.gguf" -p "ROMEO:" -n "$n" --temp 0 --ignore-eos --json >"$work/spore_gen.json"
"$bin/llama_ref" "$work/m.gguf" --tokens "$prompt" --n-decode "$n" --threads 2 --out "$work/ref" >/dev/null
/usr/bin/python3 - "$work" "$tok_ok" <<'EOF'
import json, sys
work, tok_ok = sys.argv[1], sys.argv[2] == "1"
s = json.load(open(f"{work}/spore_gen.json"))["tokens"]
r = [int(x) for x in open(f"{work}/ref/tokens.txt").read().split()]
n = min(len(s), len(r))
first = next((i for i in range(n) if s[i] != r[i]), n)
print(f"greedy: spore {len(s)} tokens, llama.cpp {len(r)}, identical for the first {first} of {n}")
print("spore text:", repr(json.load(open(f"{work}/spore_gen.json"))["text"][:160]))
sys.exit(0 if tok_ok and first == n and n > 0 else 1)
EOF
