#!/usr/bin/python3
"""Export PyTorch recurrent nets (nn.GRU / nn.LSTM, issue 41) to ONNX for rnn_vs_ort (tv_vs_ort.py --dir).

  /usr/bin/python3 bench/peers/export_rnn.py [--out out/bench/rnn] [--force]

Each model is torch.manual_seed(0) + the module's own init, eval mode, batch_first input "x" [B, 50, I] with a
dynamic batch axis, opset 17 (Debian's python3-torch, torch.onnx.export), outputs "y" (every step, both
directions) and "h" (the final states). Writes NAME.onnx, NAME.json ({"input","shape","opset"}) and seeded inputs
NAME.x1.npy / NAME.x8.npy (N(0,1), numpy seed 0), as export_torchvision.py does.
"""
import argparse
import json
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEQ = 50
# name: (cell, input size, hidden size, layers, bidirectional)
MODELS = {
    "gru_bi2_i64_h128": ("GRU", 64, 128, 2, True),
    "lstm_bi2_i64_h128": ("LSTM", 64, 128, 2, True),
    "gru_bi1_i256_h256": ("GRU", 256, 256, 1, True),
    "lstm_bi1_i256_h256": ("LSTM", 256, 256, 1, True),
    "gru_uni1_i64_h128": ("GRU", 64, 128, 1, False),
    "lstm_uni2_i256_h256": ("LSTM", 256, 256, 2, False),
}


class Net(torch.nn.Module):
    def __init__(self, cell, i, h, layers, bi):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(i, h, num_layers=layers, bidirectional=bi, batch_first=True)

    def forward(self, x):
        y, h = self.rnn(x)
        return y, (h[0] if isinstance(h, tuple) else h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(ROOT, "out", "bench", "rnn"))
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name, (cell, i, h, layers, bi) in MODELS.items():
        path = os.path.join(a.out, f"{name}.onnx")
        if os.path.exists(path) and not a.force:
            continue
        torch.manual_seed(0)
        m = Net(cell, i, h, layers, bi).eval()
        with torch.no_grad():
            torch.onnx.export(m, torch.randn(1, SEQ, i), path, opset_version=17, input_names=["x"],
                              output_names=["y", "h"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"},
                                                                     "h": {1: "batch"}}, do_constant_folding=True)
        json.dump({"input": "x", "shape": [SEQ, i], "opset": 17}, open(os.path.join(a.out, f"{name}.json"), "w"))
        rng = np.random.default_rng(0)
        for b in (1, 8):
            np.save(os.path.join(a.out, f"{name}.x{b}.npy"), rng.standard_normal((b, SEQ, i)).astype(np.float32))
        print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
