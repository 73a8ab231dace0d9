#!/usr/bin/env python3
"""End-to-end check of `spore train` / `spore eval` on the bundled digits (label integration).

usage: train_test.py SPORE_BINARY DIGITS_CSV_GZ
SimpleNet, 2 epochs, batch 16, momentum lr 0.05 reaches ~0.91 test accuracy on the held-out last 20%
(the bar below leaves margin); graph and PyNative mode must agree bit for bit on every reported loss,
and `spore eval` on the checkpoint must reproduce the final accuracy and loss.
"""
import json
import subprocess
import sys
import tempfile

MIN_ACCURACY = 0.85


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def main():
    spore, digits = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        finals, epochs = {}, {}
        for mode in ("graph", "pynative"):
            lines = run([spore, "train", "--model", "simplenet", "--dataset", f"digits:{digits}", "--epochs", "2",
                         "--batch", "16", "--lr", "0.05", "--optimizer", "momentum", "--mode", mode, "--seed", "1",
                         "--threads", "2", "--ckpt-dir", f"{tmp}/{mode}", "--json"])
            epochs[mode] = [l for l in lines if "epoch" in l and not l.get("final")]
            finals[mode] = lines[-1]
            assert finals[mode].get("final") is True, lines[-1]
            assert len(epochs[mode]) == 2, lines
            for l in epochs[mode]:
                assert {"epoch", "loss", "accuracy", "samples_per_s"} <= l.keys(), l
            print(f"{mode}: accuracy {finals[mode]['accuracy']:.4f} loss {finals[mode]['loss']:.6f} "
                  f"{finals[mode]['samples_per_s']:.0f} samples/s")
            assert finals[mode]["accuracy"] > MIN_ACCURACY, finals[mode]
        g, p = finals["graph"], finals["pynative"]
        assert g["loss"] == p["loss"] and g["accuracy"] == p["accuracy"], (g, p)
        assert [e["loss"] for e in epochs["graph"]] == [e["loss"] for e in epochs["pynative"]], epochs
        for mode in ("graph", "pynative"):
            ev = run([spore, "eval", "--model", "simplenet", "--ckpt", finals[mode]["checkpoint"], "--dataset",
                      f"digits:{digits}", "--mode", mode, "--json"])[-1]
            assert ev["accuracy"] == finals[mode]["accuracy"], (ev, finals[mode])
            assert abs(ev["loss"] - finals[mode]["loss"]) < 1e-9, (ev, finals[mode])
            assert ev["samples"] == finals[mode]["test_samples"], ev
        # Bad input: one clear line, non-zero exit.
        bad = subprocess.run([spore, "train", "--dataset", "cifar:/nope"], capture_output=True, text=True)
        assert bad.returncode != 0 and "unknown kind 'cifar'" in bad.stderr, bad.stderr
        bad = subprocess.run([spore, "eval", "--ckpt", f"{tmp}/missing.safetensors", "--dataset",
                              f"digits:{digits}"], capture_output=True, text=True)
        assert bad.returncode != 0 and "missing.safetensors" in bad.stderr, bad.stderr
        # Mixed precision: O2 f16 with dynamic loss scaling skips the overflowed first steps (2^24 overflows f16),
        # reports the scale and the step plan's dtypes, and gives the same bits in both modes.
        amp = {}
        for mode in ("graph", "pynative"):
            amp[mode] = run([spore, "train", "--model", "simplenet", "--dataset", f"digits:{digits}", "--epochs", "1",
                             "--batch", "16", "--lr", "0.05", "--mode", mode, "--json", "--amp-level", "O2",
                             "--amp-dtype", "f16", "--loss-scale", "dynamic"])[-1]
        g, p = amp["graph"], amp["pynative"]
        assert g["overflow_steps"] > 0 and g["loss_scale"] < 2 ** 24 and g["amp_level"] == "O2", g
        assert g["step_ops_per_dtype"].get("f16", 0) > 10, g
        assert (g["loss"], g["train_loss"], g["overflow_steps"]) == (p["loss"], p["train_loss"], p["overflow_steps"])
        assert g["accuracy"] > MIN_ACCURACY - 0.1, g
        # O3 f16 without scaling at a silly learning rate diverges, and says so.
        div = subprocess.run([spore, "train", "--model", "simplenet", "--dataset", f"digits:{digits}", "--epochs",
                              "1", "--batch", "16", "--lr", "1000", "--json", "--amp-level", "O3", "--amp-dtype",
                              "f16"], capture_output=True, text=True)
        assert div.returncode == 0 and "training diverged" in div.stderr, div.stderr
        assert json.loads(div.stdout.splitlines()[-1])["nonfinite_loss_steps"] > 0
        for spec in ("sometimes", "fixed", "dynamic:-3"):
            bad = subprocess.run([spore, "train", "--dataset", f"digits:{digits}", "--loss-scale", spec],
                                 capture_output=True, text=True)
            assert bad.returncode != 0 and "--loss-scale" in bad.stderr, (spec, bad.stderr)
    print("OK")


if __name__ == "__main__":
    main()
