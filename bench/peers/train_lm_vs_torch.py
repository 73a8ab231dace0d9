#!/usr/bin/python3
"""Language-model pretraining: `spore train-lm` vs the same model, data, steps and seed in PyTorch 1.13.

  /usr/bin/python3 bench/peers/train_lm_vs_torch.py [--spore build/spore]
      [--data ../shared/data/text-corpus/tinyshakespeare.txt] [--threads 1,2] [--steps 150] [--json]

spore trains a Llama-shaped decoder (default: vocab 768 byte-level BPE trained by spore on the text, dim 192,
4 layers, 6 heads / 2 kv heads, SwiGLU 512, ctx 64, untied, ~1.9 M parameters) with --json; the script then takes
spore's tokenizer (`spore tokenize CKPT/tokenizer.gguf - --json`, so both see the same token ids), the same
train/validation split (the last 10% of the tokens), the same batches (spore's splitmix64 window offsets per
micro-batch), AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.01), linear warm-up then cosine to lr * 0.1 (spore's
warmup_lr/cosine_lr formulas), global-norm clipping 1.0, normal(0, 0.02) initialization, and the same validation
windows, and trains the same model in PyTorch. Printed: validation loss of both, tokens/s of both (training steps
only, evaluation excluded; spore's includes its graph compile) and the ratios. Accuracy comes from one full run
of each; tokens/s from --repeats short runs (--speed-steps) of each, interleaved, the best of each counting (the
machine is shared: the best run is the least disturbed one).

PyTorch's threads, fairly: each torch run is a child process with torch.set_num_threads(T), OMP_NUM_THREADS=T and
OPENBLAS_NUM_THREADS=T set before torch loads; at T > 1 it also runs with OpenBLAS at 1 thread and with
OMP_WAIT_POLICY=passive (Debian's torch runs fp32 GEMMs in OpenBLAS, whose pool spins beside OpenMP's), and the
fastest is the peer figure (all are printed).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def lr_at(step, a):
    """spore's warmup_lr(warmup, cosine_lr(lr, steps - warmup, lr * min_ratio))."""
    def cos(s):
        total = a["steps"] - a["warmup"]
        frac = min(s, total) / total
        lo = a["lr"] * a["min_lr_ratio"]
        return lo + (a["lr"] - lo) * 0.5 * (1 + math.cos(math.pi * frac))
    if step < a["warmup"]:
        return cos(0) * step / a["warmup"]
    return cos(step - a["warmup"])


def torch_worker(cfg_path):
    with open(cfg_path) as f:
        a = json.load(f)
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a["threads"])
    torch.manual_seed(a["seed"])
    with open(a["tokens"]) as f:
        ids = json.load(f)
    n_val = int(len(ids) * 0.1)
    train, val = ids[: len(ids) - n_val], ids[len(ids) - n_val:]
    train_t, val_t = torch.tensor(train, dtype=torch.long), torch.tensor(val, dtype=torch.long)
    V, E, L, H, Hkv, FF, T, B = (a[k] for k in ("vocab", "dim", "layers", "heads", "kv_heads", "ffn", "ctx", "batch"))
    D, G = E // H, H // Hkv

    def mat(r, c):
        return torch.nn.Parameter(torch.randn(r, c) * 0.02)

    params = {"tok": mat(V, E), "out_norm": torch.nn.Parameter(torch.ones(E)), "out": mat(V, E)}
    for l in range(L):
        for n, (r, c) in {"q": (H * D, E), "k": (Hkv * D, E), "v": (Hkv * D, E), "o": (E, H * D), "g": (FF, E),
                          "u": (FF, E), "d": (E, FF)}.items():
            params[f"{l}.{n}"] = mat(r, c)
        params[f"{l}.an"] = torch.nn.Parameter(torch.ones(E))
        params[f"{l}.fn"] = torch.nn.Parameter(torch.ones(E))
    plist = list(params.values())
    inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]  # [T, D/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    mask = torch.full((T, T), float("-inf")).triu(1)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(x):  # [B, T, h, D], adjacent pairs (GGUF llama, spore's "normal")
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)

    def forward(x):
        b, t = x.shape
        h = F.embedding(x, params["tok"])
        for l in range(L):
            p = lambda n: params[f"{l}.{n}"]
            z = rms(h, p("an"))
            q = rope(F.linear(z, p("q")).view(b, t, H, D)).transpose(1, 2)
            k = rope(F.linear(z, p("k")).view(b, t, Hkv, D)).transpose(1, 2).repeat_interleave(G, 1)
            v = F.linear(z, p("v")).view(b, t, Hkv, D).transpose(1, 2).repeat_interleave(G, 1)
            s = (q @ k.transpose(-1, -2)) * (D ** -0.5) + mask[:t, :t]
            o = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, H * D)
            h = h + F.linear(o, p("o"))
            z = rms(h, p("fn"))
            h = h + F.linear(F.silu(F.linear(z, p("g"))) * F.linear(z, p("u")), p("d"))
        return F.linear(rms(h, params["out_norm"]), params["out"])

    opt = torch.optim.AdamW(plist, lr=a["lr"], betas=(0.9, 0.95), eps=1e-8, weight_decay=a["weight_decay"])
    n_train, base = len(train), splitmix64(a["seed"])
    train_s = 0.0
    for step in range(a["steps"]):
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        opt.zero_grad(set_to_none=True)
        for i in range(a["accum"]):
            m = step * a["accum"] + i
            offs = [splitmix64(base ^ ((m * B + b) & M64)) % (n_train - T - 1) for b in range(B)]
            x = torch.stack([train_t[o:o + T] for o in offs])
            y = torch.stack([train_t[o + 1:o + T + 1] for o in offs])
            loss = F.cross_entropy(forward(x).view(-1, V), y.view(-1)) / a["accum"]
            loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, a["clip"])
        opt.step()
        train_s += time.perf_counter() - t0
    with torch.no_grad():
        n_windows = min(a["eval_batches"] * B, (len(val) - 1) // T)
        total = 0.0
        for w0 in range(0, n_windows, B):
            offs = [w * T for w in range(w0, min(n_windows, w0 + B))]
            x = torch.stack([val_t[o:o + T] for o in offs])
            y = torch.stack([val_t[o + 1:o + T + 1] for o in offs])
            total += F.cross_entropy(forward(x).view(-1, V), y.view(-1), reduction="sum").item()
        val_loss = total / (n_windows * T)
    tokens = a["steps"] * a["accum"] * B * T
    print(json.dumps({"val_loss": val_loss, "tokens_per_s": tokens / train_s, "train_s": train_s}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--spore", default=os.path.join(ROOT, "build", "spore"))
    p.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "text-corpus", "tinyshakespeare.txt"))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--vocab", type=int, default=768)
    p.add_argument("--dim", type=int, default=192)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--speed-steps", type=int, default=40, help="steps of each timed run")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per system and thread count (best counts)")
    p.add_argument("--torch-worker", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.torch_worker:
        return torch_worker(a.torch_worker)
    cfg = {"vocab": a.vocab, "dim": a.dim, "layers": a.layers, "heads": a.heads, "kv_heads": a.kv_heads,
           "ffn": a.ffn, "ctx": a.ctx, "batch": a.batch, "accum": a.accum, "steps": a.steps, "lr": a.lr,
           "warmup": a.warmup, "min_lr_ratio": 0.1, "clip": 1.0, "weight_decay": 0.01, "seed": a.seed,
           "eval_batches": a.eval_batches}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        state = {"tokens": None, "n": 0}

        def spore_run(t, steps):
            state["n"] += 1
            d = f"{tmp}/run{state['n']}"
            cmd = [a.spore, "train-lm", "--arch", "llama", "--dim", str(a.dim), "--layers", str(a.layers), "--heads",
                   str(a.heads), "--kv-heads", str(a.kv_heads), "--ffn", str(a.ffn), "--ctx", str(a.ctx), "--data",
                   a.data, "--train-tokenizer", "--vocab", str(a.vocab), "--batch", str(a.batch), "--accum",
                   str(a.accum), "--steps", str(steps), "--lr", str(a.lr), "--warmup", str(min(a.warmup, steps - 1)),
                   "--eval-batches", str(a.eval_batches), "--seed", str(a.seed), "--threads", str(t),
                   "--ckpt-dir", f"{d}/ckpt", "-o", f"{d}/model.gguf", "--json"]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            sp = [json.loads(l) for l in out.splitlines() if l.startswith("{")][-1]
            if state["tokens"] is None:  # spore's token ids of the text, for torch
                with open(a.data, "rb") as f:
                    ids = json.loads(subprocess.run([a.spore, "tokenize", f"{d}/ckpt/tokenizer.gguf", "-", "--json"],
                                                    input=f.read(), check=True, capture_output=True).stdout)["ids"]
                state["tokens"] = f"{tmp}/tokens.json"
                with open(state["tokens"], "w") as f:
                    json.dump(ids, f)
                cfg["vocab"] = sp["vocab"]
            return sp

        def torch_run(t, steps, extra):
            wc = dict(cfg, threads=t, tokens=state["tokens"], steps=steps, warmup=min(a.warmup, steps - 1))
            wp = f"{tmp}/torch.json"
            with open(wp, "w") as f:
                json.dump(wc, f)
            env = dict(os.environ, OMP_NUM_THREADS=str(t), **extra)
            r = subprocess.run([sys.executable, __file__, "--torch-worker", wp], check=True, capture_output=True,
                               text=True, env=env).stdout
            return json.loads(r.strip().splitlines()[-1])

        threads = [int(x) for x in a.threads.split(",")]
        # Accuracy: the full run once per system (spore's bits do not depend on the thread count).
        t_acc = max(threads)
        sp_full = spore_run(t_acc, a.steps)
        th_full = torch_run(t_acc, a.steps, {"OPENBLAS_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive"})
        if not a.json:
            print(f"accuracy ({a.steps} steps, {t_acc} threads): {sp_full['params']} params, val loss spore "
                  f"{sp_full['val_loss']:.4f} torch {th_full['val_loss']:.4f} (ratio "
                  f"{sp_full['val_loss'] / th_full['val_loss']:.4f}); full-run tokens/s spore "
                  f"{sp_full['tokens_per_s']:.0f} torch {th_full['tokens_per_s']:.0f}", flush=True)
        # Speed: short runs interleaved --repeats times (machine noise hits both alike); the best of each.
        for t in threads:
            variants = [("blas=T", {"OPENBLAS_NUM_THREADS": str(t)})]
            if t > 1:
                variants += [("blas=1", {"OPENBLAS_NUM_THREADS": "1"}),
                             ("blas=T passive", {"OPENBLAS_NUM_THREADS": str(t), "OMP_WAIT_POLICY": "passive"})]
            sp_speed, torch_speed = [], {name: [] for name, _ in variants}
            for _ in range(a.repeats):
                sp_speed.append(spore_run(t, a.speed_steps)["tokens_per_s"])
                for name, extra in variants:
                    torch_speed[name].append(torch_run(t, a.speed_steps, extra)["tokens_per_s"])
            best_torch = max(max(v) for v in torch_speed.values())
            row = {"threads": t, "params": sp_full["params"], "spore_val_loss": sp_full["val_loss"],
                   "torch_val_loss": th_full["val_loss"], "val_loss_ratio": sp_full["val_loss"] / th_full["val_loss"],
                   "spore_tokens_per_s": max(sp_speed), "torch_tokens_per_s": best_torch,
                   "speedup": max(sp_speed) / best_torch, "spore_runs": sp_speed, "torch_runs": torch_speed}
            rows.append(row)
            if not a.json:
                print(f"threads {t}: tokens/s spore {max(sp_speed):.0f} torch {best_torch:.0f} "
                      f"(x{row['speedup']:.2f}); runs: spore {', '.join(f'{v:.0f}' for v in sp_speed)}; torch "
                      + "; ".join(f"{k} {', '.join(f'{x:.0f}' for x in v)}" for k, v in torch_speed.items()),
                      flush=True)
    if a.json:
        print(json.dumps({"config": cfg, "rows": rows}))


if __name__ == "__main__":
    main()
