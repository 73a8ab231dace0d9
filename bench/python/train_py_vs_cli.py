#!/usr/bin/env python3
"""SimpleNet training throughput: a Python spore.nn.Cell trained with spore.Model vs `spore train --model simplenet`.

    .venv/bin/python bench/python/train_py_vs_cli.py [--spore build/spore] [--modes graph,pynative] [--epochs 3]
        [--repeats 5] [--threads 1] [--dataset digits:data/digits.csv.gz] [--json FILE]

Run it with the project's venv (`.venv/bin/python`, where spore is installed). The same engine does the work on both
sides; what differs is the front end: the Python side is a SimpleNet written as a spore.nn.Cell (Conv2d(1, 64, 3,
pad_mode="same") -> ReLU -> MaxPool2d(2, 2) -> Flatten -> Dense(64*4*4, 10)), the CLI side the C++ zoo model.

Both configured alike, as the CLI does it (tools/spore/cmd_train.cpp): the digits data (train/test split of the
dataset spec), .shuffle(seed).batch(16), Momentum (lr 0.05, momentum 0.9), SoftmaxCrossEntropyWithLogits(sparse=True,
reduction="mean"), metrics {"accuracy"}, seed 7 (spore.set_seed before building the net, Model(seed=7); the CLI's
--seed 7), the same thread count (spore.set_threads(N); the CLI's --threads N), graph or PyNative mode. Each epoch
is one Model.train(1, ...) call timed on its own (CLI: steady_clock around model.train(1, ...); Python:
time.perf_counter around Model.train(1, ...)), then the test set is evaluated (batch 256) outside the timing, as the
CLI does; so neither side's figure includes process start-up, data loading, model construction or evaluation.

Each repeat runs the CLI and the Python side (this script re-run as a worker with --worker, so both are fresh
processes) alternating which goes first. Per run: "all epochs" = train samples x epochs / summed epoch times (the
CLI's final samples_per_s), and "steady" = the same over epochs 2..E only (epoch 1 also traces and compiles the
step in graph mode). Reported: the medians over repeats and python/cli (goal: >= 0.95, i.e. within 5%). The test
accuracy and loss after the last epoch are printed for both: they should be equal (same engine step, init stream and
shuffles; tests/python/test_nn_train.py checks the loss bits).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def worker(a):
    """One Python training run: prints one JSON line per epoch."""
    import spore
    from spore import nn

    spore.set_threads(a.threads)

    class SimpleNet(nn.Cell):
        """The CLI's simplenet in Python: conv 3x3 (64, same) -> relu -> max pool 2 -> flatten -> dense."""

        def __init__(self, c, h, w, classes=10):
            super().__init__()
            self.conv = nn.Conv2d(c, 64, 3, pad_mode="same")
            self.relu = nn.ReLU()
            self.pool = nn.MaxPool2d(2, 2)
            self.flatten = nn.Flatten()
            self.fc = nn.Dense(64 * (h // 2) * (w // 2), classes)

        def construct(self, x):
            return self.fc(self.flatten(self.pool(self.relu(self.conv(x)))))

    train, test = spore.dataset.load(a.dataset)
    (xtr, _), _, _ = spore.dataset.load_arrays(a.dataset)
    n_train, (c, h, w) = xtr.shape[0], xtr.shape[1:]
    spore.set_seed(a.seed)
    net = SimpleNet(c, h, w)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=a.lr)
    model = spore.Model(net, loss, opt, metrics={"accuracy"}, mode=a.worker, seed=a.seed)
    train_ds = train.shuffle(a.seed).batch(a.batch)
    test_ds = test.batch(max(a.batch, 256))
    for e in range(a.epochs):
        t0 = time.perf_counter()
        model.train(1, train_ds)
        s = time.perf_counter() - t0
        m = model.eval(test_ds)
        print(json.dumps({"epoch": e + 1, "seconds": s, "samples_per_s": n_train / s, "accuracy": m["accuracy"],
                          "test_loss": m["loss"], "train_samples": n_train}), flush=True)


def run_lines(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def summarize(epochs):
    """epochs: [{"epoch", "samples_per_s"}, ...] -> samples/s over all epochs and over epochs 2..E."""
    n = epochs[0]["train_samples"]
    secs = [n / e["samples_per_s"] for e in epochs]
    steady = secs[1:] or secs
    return {"all": n * len(secs) / sum(secs), "steady": n * len(steady) / sum(steady),
            "epoch_sps": [e["samples_per_s"] for e in epochs], "accuracy": epochs[-1]["accuracy"],
            "test_loss": epochs[-1]["test_loss"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--spore", default=os.path.join(ROOT, "build", "spore"), help="the spore CLI")
    p.add_argument("--dataset", default="digits:" + os.path.join(ROOT, "data", "digits.csv.gz"))
    p.add_argument("--modes", default="graph,pynative", help="comma list of graph, pynative")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    p.add_argument("--worker", choices=["graph", "pynative"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a)
    if a.epochs < 2:
        p.error("--epochs must be >= 2 (the steady figure leaves out epoch 1)")
    if not os.access(a.spore, os.X_OK):
        p.error(f"--spore {a.spore}: no such executable (build the CLI first)")

    common = ["--epochs", str(a.epochs), "--batch", str(a.batch), "--lr", str(a.lr), "--seed", str(a.seed),
              "--threads", str(a.threads), "--dataset", a.dataset]
    cli_cmd = [a.spore, "train", "--model", "simplenet", "--optimizer", "momentum", "--json", "--no-progress"] + common
    py_cmd = [sys.executable, os.path.abspath(__file__)] + common

    print(f"SimpleNet on {a.dataset.split(os.sep)[-1]}, batch {a.batch}, momentum lr {a.lr}, {a.threads} thread(s), "
          f"{a.epochs} epochs x {a.repeats} alternating repeats; load avg {os.getloadavg()[0]:.2f}", flush=True)
    print(f"samples/s: 'steady' = epochs 2..{a.epochs}, 'all' = epochs 1..{a.epochs} (medians over repeats)")
    print(f"\n{'mode':9s} {'cli steady':>10s} {'py steady':>10s} {'py/cli':>7s}   {'cli all':>9s} {'py all':>9s} "
          f"{'py/cli':>7s}   test acc cli / py")
    rows = []
    for mode in a.modes.split(","):
        runs = {"cli": [], "python": []}
        for r in range(a.repeats):
            order = ["cli", "python"] if r % 2 == 0 else ["python", "cli"]
            for side in order:
                if side == "cli":
                    lines = run_lines(cli_cmd + ["--mode", mode])
                    final = lines[-1]
                    epochs = [dict(d, train_samples=final["train_samples"]) for d in lines if "final" not in d]
                    runs["cli"].append(epochs)
                else:
                    runs["python"].append(run_lines(py_cmd + ["--worker", mode]))
        summ = {k: [summarize(v) for v in runs[k]] for k in runs}
        med = {k: {m: statistics.median(s[m] for s in summ[k]) for m in ("all", "steady")} for k in summ}
        row = {"mode": mode, "cli_steady": med["cli"]["steady"], "py_steady": med["python"]["steady"],
               "cli_all": med["cli"]["all"], "py_all": med["python"]["all"],
               "ratio_steady": med["python"]["steady"] / med["cli"]["steady"],
               "ratio_all": med["python"]["all"] / med["cli"]["all"],
               "cli_accuracy": summ["cli"][-1]["accuracy"], "py_accuracy": summ["python"][-1]["accuracy"],
               "cli_test_loss": summ["cli"][-1]["test_loss"], "py_test_loss": summ["python"][-1]["test_loss"],
               "runs": summ}
        rows.append(row)
        print(f"{mode:9s} {row['cli_steady']:10.0f} {row['py_steady']:10.0f} {row['ratio_steady']:6.3f}x   "
              f"{row['cli_all']:9.0f} {row['py_all']:9.0f} {row['ratio_all']:6.3f}x   "
              f"{row['cli_accuracy']:.4f} / {row['py_accuracy']:.4f}"
              f"{'' if row['cli_test_loss'] == row['py_test_loss'] else '  (test losses differ!)'}", flush=True)
    ok = all(r["ratio_steady"] >= 0.95 for r in rows)
    print(f"\ngoal (python within 5% of the CLI, steady epochs): {'MET' if ok else 'NOT MET'} "
          "(" + ", ".join(f"{r['mode']} {r['ratio_steady']:.3f}" for r in rows) + ")")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": vars(a), "rows": rows}, f, indent=1)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
