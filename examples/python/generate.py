#!/usr/bin/python3
"""Streams a completion from a GGUF model: python3 generate.py MODEL.gguf "prompt" [max_tokens]."""
import sys

import spore


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: generate.py MODEL.gguf PROMPT [MAX_TOKENS]")
    lm = spore.llm.load(sys.argv[1], ctx=512, kv_type="f16")
    stream = lm.generate(sys.argv[2], max_tokens=int(sys.argv[3]) if len(sys.argv) > 3 else 32, stream=True)
    for piece in stream:
        print(piece, end="", flush=True)
    r = stream.result
    print(f"\n[{len(r.tokens)} tokens, {r.decode_tok_s:.1f} tok/s, stop: {r.stop_reason}]")


if __name__ == "__main__":
    main()
