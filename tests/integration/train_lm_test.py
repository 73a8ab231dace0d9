#!/usr/bin/env python3
"""End-to-end check of `spore train-lm` (label integration) on a small generated text.

usage: train_lm_test.py SPORE_BINARY
A tiny Llama trains for a few steps with --json: step, eval and final lines carry their keys, the loss falls, the
GGUF and the loss-curve SVG are written, `spore generate` runs the GGUF with the trained tokenizer and the --hf-out
folder with the same greedy text, the folder's tokenizer.json as --tokenizer gives a GGUF that tokenizes alike, a run stopped with
--stop-after and resumed gives the same final line (losses, validation loss) as an uninterrupted one, and bad flags
or bad data give one line on stderr and a non-zero exit.
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


def with_opt(cmd, flag, value):
    """cmd with flag's value replaced (CLI11 refuses an option given twice)."""
    i = cmd.index(flag)
    return cmd[:i + 1] + [value] + cmd[i + 2:]


def lines(p):
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def main():
    spore = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        names = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
        with open(text, "w") as f:
            for i in range(300):
                f.write(f"{names[i % 8]} little ducks went out one day, {names[(i + 1) % 8]} came back.\n")
        base = [spore, "train-lm", "--arch", "llama", "--dim", "32", "--layers", "2", "--heads", "4", "--kv-heads",
                "2", "--ffn", "48", "--ctx", "16", "--data", text, "--train-tokenizer", "--vocab", "300", "--batch",
                "4", "--steps", "12", "--lr", "0.005", "--warmup", "2", "--accum", "2", "--eval-every", "6",
                "--eval-batches", "2", "--seed", "3", "--threads", "2", "--json", "--log-every", "1"]
        a = lines(run(base + ["--ckpt-dir", f"{tmp}/a", "-o", f"{tmp}/a.gguf", "--hf-out", f"{tmp}/a-hf"]))
        steps = [l for l in a if "loss" in l and "eval" not in l and not l.get("final")]
        evals = [l for l in a if l.get("eval")]
        fin = a[-1]
        assert fin.get("final") is True, a[-1]
        assert len(steps) == 12 and len(evals) == 2, a
        for l in steps:
            assert {"step", "loss", "lr", "tokens_per_s"} <= l.keys(), l
        for l in evals:
            assert {"step", "train_loss", "train_ppl", "val_loss", "val_ppl"} <= l.keys(), l
        assert steps[-1]["loss"] < steps[0]["loss"] - 0.5, (steps[0], steps[-1])
        assert evals[1]["val_loss"] < evals[0]["val_loss"], evals
        assert os.path.getsize(f"{tmp}/a.gguf") > 0 and fin["gguf"] == f"{tmp}/a.gguf", fin
        with open(f"{tmp}/a.loss.svg") as f:
            assert f.read().startswith("<svg"), "loss curve"
        print(f"train-lm: loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f}, val {evals[-1]['val_loss']:.3f}, "
              f"{fin['tokens_per_s']:.0f} tok/s")

        g = run([spore, "generate", f"{tmp}/a.gguf", "-p", "three little", "-n", "8", "--temp", "0", "--json"])
        out = json.loads(g.stdout.strip().splitlines()[-1])
        assert out["generated_tokens"] > 0 and out["prompt_tokens"] > 0, out

        # --hf-out: the Hugging Face folder generates the GGUF's greedy tokens; its tokenizer.json, given back to
        # train-lm as --tokenizer, makes a GGUF that tokenizes as the folder does.
        assert fin["hf_dir"] == f"{tmp}/a-hf", fin
        for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            assert os.path.getsize(f"{tmp}/a-hf/{f}") > 0, f
        gen = {}
        for m in (f"{tmp}/a.gguf", f"{tmp}/a-hf"):
            g = run([spore, "generate", m, "-p", "five little", "-n", "12", "--temp", "0", "--json"])
            gen[m] = json.loads(g.stdout.strip().splitlines()[-1])
        assert gen[f"{tmp}/a.gguf"]["text"] == gen[f"{tmp}/a-hf"]["text"], gen
        assert gen[f"{tmp}/a.gguf"]["generated_tokens"] == gen[f"{tmp}/a-hf"]["generated_tokens"] > 0, gen
        t = lines(run([x for x in with_opt(base, "--steps", "3") if x != "--train-tokenizer"]
                      + ["--ckpt-dir", f"{tmp}/t", "-o", f"{tmp}/t.gguf", "--tokenizer", f"{tmp}/a-hf/tokenizer.json"]))
        assert t[-1]["vocab"] == fin["vocab"], t[-1]
        sample = "Eight speckled frogs, naïve café: they went out one day!\n"
        toks = [json.loads(run([spore, "tokenize", m, sample, "--json"]).stdout)["ids"]
                for m in (f"{tmp}/t.gguf", f"{tmp}/a-hf")]
        assert toks[0] == toks[1] and len(toks[0]) > 5, toks

        # Interrupted after step 5, resumed: the same final line as the uninterrupted run.
        b1 = lines(run(base + ["--ckpt-dir", f"{tmp}/b", "-o", f"{tmp}/b.gguf", "--stop-after", "5"]))
        assert b1[-1]["steps"] == 5 and b1[-1]["gguf"] == "", b1[-1]
        b = lines(run(base + ["--ckpt-dir", f"{tmp}/b", "-o", f"{tmp}/b.gguf"]))
        assert b[0].get("resumed") is True and b[-1]["start_step"] == 5, b[:2]
        for k in ("loss", "val_loss", "steps"):
            assert b[-1][k] == fin[k], (k, b[-1], fin)
        with open(f"{tmp}/a.gguf", "rb") as fa, open(f"{tmp}/b.gguf", "rb") as fb:
            assert fa.read() == fb.read(), "resumed model differs"

        # Bad input: one clear line, non-zero exit.
        garbage = f"{tmp}/garbage.json"
        with open(garbage, "w") as f:
            f.write('{"model": ')
        with open(f"{tmp}/a-hf/tokenizer.json") as f:
            tj = json.load(f)
        tj["model"]["byte_fallback"] = True
        fallback = f"{tmp}/fallback.json"
        with open(fallback, "w") as f:
            json.dump(tj, f)
        bad = [
            (base[:2] + ["--dim", "32"], "required"),
            ([a for a in base if a != "--train-tokenizer"] + ["--ckpt-dir", f"{tmp}/c", "-o", f"{tmp}/c.gguf"],
             "--tokenizer"),
            (with_opt(base, "--heads", "3") + ["--ckpt-dir", f"{tmp}/d", "-o", f"{tmp}/d.gguf"], "heads"),
            ([x if x != text else f"{tmp}/missing.txt" for x in base] + ["--ckpt-dir", f"{tmp}/e", "-o", "e.gguf"],
             "does not exist"),
            (with_opt(base, "--arch", "gpt2") + ["--ckpt-dir", f"{tmp}/f", "-o", f"{tmp}/f.gguf"], "arch"),
            (with_opt(base, "--dim", "64") + ["--ckpt-dir", f"{tmp}/a", "-o", f"{tmp}/g.gguf"], "another run"),
            ([x for x in base if x != "--train-tokenizer"] + ["--tokenizer", garbage, "--ckpt-dir", f"{tmp}/h", "-o",
                                                              f"{tmp}/h.gguf"], "not valid JSON"),
            ([x for x in base if x != "--train-tokenizer"] + ["--tokenizer", fallback, "--ckpt-dir", f"{tmp}/i", "-o",
                                                              f"{tmp}/i.gguf"], "model.byte_fallback"),
        ]
        for cmd, want in bad:
            p = run(cmd, ok=False)
            err = p.stderr.strip().splitlines()
            assert p.returncode != 0, (cmd, p.stdout)
            assert len(err) >= 1 and want in p.stderr, (want, p.stderr)
            if "error:" in p.stderr:
                assert len([l for l in err if "error" in l]) == 1, p.stderr
    print("OK")


if __name__ == "__main__":
    main()
