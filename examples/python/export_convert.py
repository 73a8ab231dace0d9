#!/usr/bin/python3
"""Deployment from Python: a Python Cell trained on the bundled digits, exported to ONNX, converted to fp16 and to
calibrated int8 (each with its accuracy report), and profiled.

    .venv/bin/python examples/python/export_convert.py [OUT_DIR]
"""
import os
import sys

import numpy as np

import spore
from spore import nn

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DIGITS = "digits:" + os.path.join(ROOT, "data", "digits.csv.gz")
out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "out", "python")
os.makedirs(out_dir, exist_ok=True)

spore.set_seed(0)
net = nn.SequentialCell(nn.Conv2d(1, 32, 3, pad_mode="same"), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(),
                        nn.Dense(32 * 4 * 4, 64, activation="relu"), nn.Dense(64, 10))
train, test = spore.dataset.load(DIGITS)
model = spore.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                    nn.Adam(net.trainable_params(), learning_rate=3e-3), metrics={"accuracy"}, mode="graph")
model.train(4, train.shuffle(0).batch(32))
print(f"f32 test accuracy {model.eval(test.batch(256))['accuracy']:.4f}")

onnx = spore.export(net, (("batch", 1, 8, 8), spore.float32), file_name=os.path.join(out_dir, "digits_cnn"),
                    file_format="ONNX")["path"]
for name, kw in (("fp16", dict(precision_mode="allow_fp32_to_fp16")),
                 ("int8", dict(quantize="int8", calib_data=DIGITS))):
    rep = spore.convert(onnx, os.path.join(out_dir, f"digits_cnn_{name}.spore"), eval_data=DIGITS, **kw)
    print(f"{name}: {rep['size_before_bytes']} -> {rep['size_after_bytes']} bytes, accuracy {rep['accuracy_f32']:.4f} "
          f"-> {rep['accuracy_converted']:.4f} ({rep['accuracy_delta_points']:+.2f} points), output cosine "
          f"{rep['outputs'][0]['cosine']:.6f}")
    assert abs(rep["accuracy_delta_points"]) < 3.0, rep

x = np.asarray(next(iter(test.batch(32)))[0])
prof = spore.profile(os.path.join(out_dir, "digits_cnn_int8.spore"), inputs={"x": x}, runs=5, top=3)
print("int8 top ops:", ", ".join(f"{t['op']} {t['pct']:.0f}%" for t in prof["top"]))
