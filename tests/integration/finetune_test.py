#!/usr/bin/env python3
"""End-to-end check of `spore finetune`, `spore generate --lora` and `spore lora merge` (label integration).

usage: finetune_test.py SPORE_BINARY
A tiny Llama pretrained for a few steps by train-lm is LoRA-tuned on another text: the final --json line carries its
keys and the validation loss falls, the PEFT and GGUF adapters are written, generate --lora runs both (same tokens),
--lora-scale 0 gives the base's tokens, lora merge writes a model generate runs, and bad inputs give one clear line
on stderr and a non-zero exit.
"""
import json
import os
import subprocess
import sys
import tempfile


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def gen(spore, model, *extra):
    p = run([spore, "generate", model, "-p", "one little", "-n", "12", "--temp", "0", "--json", *extra])
    return json.loads(p.stdout.strip().splitlines()[-1])["tokens"]


def main():
    spore = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        names = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
        with open(f"{tmp}/a.txt", "w") as f:
            for i in range(300):
                f.write(f"{names[i % 8]} little ducks went out one day, {names[(i + 1) % 8]} came back.\n")
        with open(f"{tmp}/b.txt", "w") as f:
            for i in range(300):
                f.write(f"{names[i % 8]} green bottles hanging on the wall, {names[(i + 3) % 8]} fell down.\n")
        run([spore, "train-lm", "--dim", "32", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "64",
             "--ctx", "16", "--data", f"{tmp}/a.txt", "--train-tokenizer", "--vocab", "300", "--batch", "8",
             "--steps", "20", "--lr", "0.005", "--threads", "2", "--ckpt-dir", f"{tmp}/ck", "-o", f"{tmp}/base.gguf",
             "--json"])
        ft = [spore, "finetune", f"{tmp}/base.gguf", "--data", f"{tmp}/b.txt", "--lora-r", "4", "--lora-alpha", "8",
              "--lora-dropout", "0.05", "--lora-targets", "all-linear", "--steps", "20", "--lr", "0.02", "--batch",
              "8", "--eval-batches", "2", "--threads", "2", "-o", f"{tmp}/ad"]
        out = [json.loads(l) for l in run(ft + ["--json"]).stdout.splitlines() if l.strip()]
        fin = out[-1]
        assert fin.get("final") is True, fin
        for k in ("trainable_params", "all_params", "trainable_pct", "base_val_loss", "val_loss", "peft_dir",
                  "gguf_adapter"):
            assert k in fin, (k, fin)
        assert out[0].get("eval") and out[0]["step"] == 0, out[0]
        assert fin["val_loss"] < 0.97 * fin["base_val_loss"], fin
        for f in ("adapter_config.json", "adapter_model.safetensors", "adapter.gguf", "loss.svg"):
            assert os.path.getsize(f"{tmp}/ad/{f}") > 0, f
        print(f"finetune: val loss {fin['base_val_loss']:.3f} -> {fin['val_loss']:.3f}, "
              f"trainable {fin['trainable_params']} of {fin['all_params']}")

        base = gen(spore, f"{tmp}/base.gguf")
        peft = gen(spore, f"{tmp}/base.gguf", "--lora", f"{tmp}/ad")
        gguf = gen(spore, f"{tmp}/base.gguf", "--lora", f"{tmp}/ad/adapter.gguf")
        assert peft == gguf, (peft, gguf)
        assert gen(spore, f"{tmp}/base.gguf", "--lora", f"{tmp}/ad", "--lora-scale", "0") == base
        run([spore, "lora", "merge", f"{tmp}/base.gguf", f"{tmp}/ad", "-o", f"{tmp}/merged.gguf"])
        merged = gen(spore, f"{tmp}/merged.gguf")
        assert len(merged) > 0
        print(f"generate: base {base}, --lora {peft}, merged {merged}")

        # Bad input: one clear line, non-zero exit.
        run([spore, "train-lm", "--dim", "48", "--layers", "1", "--heads", "4", "--ffn", "64", "--ctx", "16",
             "--data", f"{tmp}/a.txt", "--train-tokenizer", "--vocab", "300", "--steps", "1", "--lr", "0.005",
             "--ckpt-dir", f"{tmp}/ck2", "-o", f"{tmp}/other.gguf"])
        bad = [
            (ft[:2] + [f"{tmp}/missing.gguf"] + ft[3:], "does not exist"),
            ([x if x != "all-linear" else "q_proj,x_proj" for x in ft], "'x_proj'"),
            ([spore, "generate", f"{tmp}/other.gguf", "-p", "one", "-n", "2", "--lora", f"{tmp}/ad"], "blk.0."),
            ([spore, "lora", "merge", f"{tmp}/base.gguf", f"{tmp}/nothing", "-o", f"{tmp}/m2.gguf"], "does not exist"),
        ]
        for cmd, want in bad:
            p = run(cmd, ok=False)
            assert p.returncode != 0, (cmd, p.stdout)
            assert want in p.stderr, (want, p.stderr)
    print("OK")


if __name__ == "__main__":
    main()
