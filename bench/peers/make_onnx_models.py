#!/usr/bin/python3
"""Writes the ONNX models that bench/peers/infer_vs_ort.py times in spore and ONNX Runtime (random weights, fixed
seeds, dynamic batch dim), into out/bench/models/NAME.onnx + NAME.json (input name, per-sample shape):

  cnn          Conv(1->32,3x3)+BN+ReLU+MaxPool, Conv(32->64,3x3)+BN+ReLU+MaxPool, Linear(3136->128)+ReLU, Linear(128->10)
  mlp          784 -> 512 -> 512 -> 10 with ReLU
  transformer  2 x TransformerEncoderLayer(d_model 128, 4 heads, ff 512), seq 32, mean-pool, Linear(128->10)

Needs python3-torch (bench/peers/setup.sh installs it). Exported by torch.onnx (opset 14, eval, constant folding).
"""
import json
import os
import sys

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "out", "bench", "models")


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.f(x)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                               nn.Linear(512, 10))

    def forward(self, x):
        return self.f(x)


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


MODELS = {"cnn": (Cnn, [1, 28, 28]), "mlp": (Mlp, [1, 28, 28]), "transformer": (Transformer, [32, 128])}


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    for name, (cls, sample) in MODELS.items():
        m = cls().eval()
        x = torch.randn([2] + sample)
        path = os.path.join(OUT, f"{name}.onnx")
        torch.onnx.export(m, x, path, input_names=["x"], output_names=["y"], opset_version=14,
                          do_constant_folding=True, dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        json.dump({"input": "x", "sample_shape": sample}, open(os.path.join(OUT, f"{name}.json"), "w"))
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    sys.exit(main())
