#!/usr/bin/python3
"""PyTorch twin of `spore train`: the same models, data split, batch, optimizer and thread count.

Prints JSON lines like `spore train --json` ({"epoch":..,"samples_per_s":..} per epoch, then {"final": true, ...})
so bench/peers/train_vs_torch.py can compare the two in one run. samples/s counts the training loop only
(batching from an in-memory tensor, forward, backward, optimizer step), as spore's does.

Run with Debian's /usr/bin/python3 (apt python3-torch 1.13). Thread count: torch.set_num_threads(T); OpenBLAS
(torch's fp32 matmul on Debian) ignores it, so OPENBLAS_NUM_THREADS / OMP_NUM_THREADS are set before import.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="simplenet", choices=["simplenet", "lenet", "mlp"])
    p.add_argument("--dataset", required=True, help="mnist:DIR | fashion-mnist:DIR (IDX files, .gz or not)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--blas-threads", type=int, default=0,
                   help="OpenBLAS's pool (0: the same as --threads); 1 keeps a second pool from spinning beside "
                        "torch's OpenMP threads")
    p.add_argument("--omp-wait", choices=["active", "passive"], default="active",
                   help="OMP_WAIT_POLICY of torch's OpenMP pool (passive: idle threads sleep instead of spinning)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit-train", type=int, default=0)
    return p.parse_args()


args = parse_args()
# Set before torch and NumPy load their libraries: torch's OpenMP pool gets --threads, OpenBLAS (Debian torch's fp32
# matmul) its own count. Two pools of T threads each on T cores, both spinning between calls, was the 2-thread
# oversubscription the comparison used to measure; the variants let the harness pick torch's fastest setting.
os.environ["OMP_NUM_THREADS"] = str(args.threads)
os.environ["MKL_NUM_THREADS"] = str(args.threads)
os.environ["OPENBLAS_NUM_THREADS"] = str(args.blas_threads or args.threads)
os.environ["OMP_WAIT_POLICY"] = args.omp_wait.upper()
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402


def read_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
                data = f.read()
            break
    else:
        sys.exit(f"train_torch.py: missing {path}[.gz]")
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(spec):
    """Same split rule as spore's train::load_dataset_spec."""
    kind, where = spec.split(":", 1)
    assert kind in ("mnist", "fashion-mnist"), spec
    have_train = all(os.path.exists(os.path.join(where, s)) or os.path.exists(os.path.join(where, s + ".gz"))
                     for s in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"))
    if have_train:
        xtr, ytr = read_idx(os.path.join(where, "train-images-idx3-ubyte")), read_idx(os.path.join(where, "train-labels-idx1-ubyte"))
        xte, yte = read_idx(os.path.join(where, "t10k-images-idx3-ubyte")), read_idx(os.path.join(where, "t10k-labels-idx1-ubyte"))
    else:
        x, y = read_idx(os.path.join(where, "t10k-images-idx3-ubyte")), read_idx(os.path.join(where, "t10k-labels-idx1-ubyte"))
        cut = 8000 if len(x) == 10000 else len(x) * 4 // 5
        xtr, ytr, xte, yte = x[:cut], y[:cut], x[cut:], y[cut:]
    if args.limit_train:
        xtr, ytr = xtr[:args.limit_train], ytr[:args.limit_train]
    f = lambda a: torch.from_numpy(a.astype(np.float32) / 255.0).unsqueeze(1).contiguous()
    g = lambda a: torch.from_numpy(a.astype(np.int64))
    return f(xtr), g(ytr), f(xte), g(yte)


def make_model(name):
    if name == "simplenet":
        return nn.Sequential(nn.Conv2d(1, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(64 * 14 * 14, 10))
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84),
                             nn.ReLU(), nn.Linear(84, 10))
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    xtr, ytr, xte, yte = load(args.dataset)
    net = make_model(args.model)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)
    n = len(xtr)
    total = 0.0
    for epoch in range(args.epochs):
        net.train()
        order = torch.randperm(n, generator=gen)
        t0 = time.perf_counter()
        loss_sum, seen = 0.0, 0
        for b in range(0, n, args.batch):
            idx = order[b:b + args.batch]
            x, y = xtr[idx], ytr[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
            seen += len(idx)
        s = time.perf_counter() - t0
        total += s
        net.eval()
        with torch.no_grad():
            logits = torch.cat([net(xte[i:i + 256]) for i in range(0, len(xte), 256)])
            acc = (logits.argmax(1) == yte).float().mean().item()
            test_loss = loss_fn(logits, yte).item()
        print(json.dumps({"epoch": epoch + 1, "loss": loss_sum / seen, "accuracy": acc, "test_loss": test_loss,
                          "samples_per_s": n / s}), flush=True)
    print(json.dumps({"final": True, "accuracy": acc, "loss": test_loss, "samples_per_s": n * args.epochs / total,
                      "epochs": args.epochs, "model": args.model, "threads": args.threads,
                      "blas_threads": args.blas_threads or args.threads, "omp_wait": args.omp_wait,
                      "torch": torch.__version__}), flush=True)


main()
