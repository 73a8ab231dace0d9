#!/usr/bin/env python3
"""Writes the PyTorch-exported ONNX models that tests/onnx/torch_models_test.cpp imports.

For each model NAME: NAME.onnx (torch.onnx.export, eval mode, constant folding), NAME.input.npy and
NAME.output.npy (PyTorch's own output for that input). Fixed seeds, small sizes (< 300 KB in all).
Needs python3-torch (Debian 12: 1.13) and python3-onnx; run from anywhere:

    /usr/bin/python3 tests/data/torch_models/gen.py
"""
import os
import sys

import numpy as np
import onnx
import torch
from torch import nn

OUT = os.path.dirname(os.path.abspath(__file__))
OPSET = 14


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(6 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.bn(self.conv(x)))), 1))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 5))

    def forward(self, x):
        return self.net(x)


class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(input_size=8, hidden_size=16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1, :])


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


def randomize_bn(m):
    # Fresh BatchNorm stats are 0/1 (an identity); give them values so the test sees them used.
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
                mod.weight.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
                mod.bias.copy_(torch.randn(mod.num_features, generator=g) * 0.1)


MODELS = {
    "cnn": (Cnn, (2, 1, 8, 8)),
    "mlp": (Mlp, (3, 20)),
    "lstm": (Lstm, (2, 5, 8)),
    "transformer": (Transformer, (2, 6, 32)),
}


def main():
    total = 0
    for name, (cls, shape) in MODELS.items():
        torch.manual_seed(0)
        model = cls()
        randomize_bn(model)
        model.eval()
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(42))
        with torch.no_grad():
            y = model(x)
        path = os.path.join(OUT, name + ".onnx")
        torch.onnx.export(model, (x,), path, opset_version=OPSET, do_constant_folding=True,
                          input_names=["x"], output_names=["y"])
        onnx.checker.check_model(onnx.load(path), full_check=True)
        np.save(os.path.join(OUT, name + ".input.npy"), x.numpy().astype(np.float32))
        np.save(os.path.join(OUT, name + ".output.npy"), y.numpy().astype(np.float32))
        size = sum(os.path.getsize(os.path.join(OUT, name + s)) for s in (".onnx", ".input.npy", ".output.npy"))
        total += size
        ops = sorted({n.op_type for n in onnx.load(path).graph.node})
        print(f"{name}: {size} bytes, output {tuple(y.shape)}, ops {' '.join(ops)}")
    print(f"total {total} bytes (torch {torch.__version__}, onnx {onnx.__version__}, opset {OPSET})")
    return 0 if total < 300 * 1024 else 1


if __name__ == "__main__":
    sys.exit(main())
