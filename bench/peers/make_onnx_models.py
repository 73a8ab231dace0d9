#!/usr/bin/python3
"""Writes the ONNX models that bench/peers/infer_vs_ort.py times in spore and ONNX Runtime (random weights, fixed
seeds, dynamic batch dim), into out/bench/models/NAME.onnx + NAME.json (input name, per-sample shape):

  cnn          Conv(1->32,3x3)+BN+ReLU+MaxPool, Conv(32->64,3x3)+BN+ReLU+MaxPool, Linear(3136->128)+ReLU, Linear(128->10)
  resnet       ResNet-style CNN on 3x32x32: stem Conv(3->32)+BN+ReLU, 4 basic blocks (conv-BN-ReLU-conv-BN + skip, ReLU;
               the 2nd and 4th downsample with a strided 1x1 conv-BN skip, 32->64->128 channels), global avg pool, Linear
  mlp          784 -> 512 -> 512 -> 10 with ReLU
  transformer  6 x TransformerEncoderLayer(d_model 128, 4 heads, ff 512, ReLU), seq 32, mean-pool, Linear(128->10)

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


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.skip is None else self.skip(x)))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.blocks = nn.Sequential(Block(32, 32, 1), Block(32, 64, 2), Block(64, 64, 1), Block(64, 128, 2))
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean(dim=(2, 3)))


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
        self.enc = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)
        # TransformerEncoder deep-copies one layer: give each its own weights, as a trained model has.
        for mod in self.enc.modules():
            if isinstance(mod, nn.MultiheadAttention):
                mod._reset_parameters()
            elif isinstance(mod, nn.Linear):
                mod.reset_parameters()
            elif isinstance(mod, nn.LayerNorm):
                nn.init.normal_(mod.weight, 1.0, 0.1)
                nn.init.normal_(mod.bias, 0.0, 0.1)
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


MODELS = {"cnn": (Cnn, [1, 28, 28]), "resnet": (ResNet, [3, 32, 32]), "mlp": (Mlp, [1, 28, 28]),
          "transformer": (Transformer, [32, 128])}
VERSION = 2  # bump when a model changes: infer_vs_ort.py regenerates files of another version


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    for name, (cls, sample) in MODELS.items():
        m = cls()
        # Non-trivial batch-norm statistics (fresh ones are 0/1, which would make BN folding look exact).
        g = torch.Generator().manual_seed(1)
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
                mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
                mod.bias.data.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
        m = m.eval()
        x = torch.randn([2] + sample)
        path = os.path.join(OUT, f"{name}.onnx")
        torch.onnx.export(m, x, path, input_names=["x"], output_names=["y"], opset_version=14,
                          do_constant_folding=True, dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        json.dump({"input": "x", "sample_shape": sample, "version": VERSION}, open(os.path.join(OUT, f"{name}.json"), "w"))
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    sys.exit(main())
