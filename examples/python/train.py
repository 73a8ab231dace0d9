#!/usr/bin/python3
"""A CNN written as a Python Cell, trained with spore.Model in graph mode on the bundled digits (MindSpore's
quick-start flow), evaluated, exported to ONNX and loaded back for inference.

    .venv/bin/python examples/python/train.py [EPOCHS] [OUT_DIR]
"""
import os
import sys

import numpy as np

import spore
from spore import nn

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "out", "python")


class SimpleNet(nn.Cell):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = nn.Conv2d(1, 64, 3, pad_mode="same")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(64 * 4 * 4, num_classes)

    def construct(self, x):
        return self.fc(self.flatten(self.pool(self.relu(self.conv(x)))))


spore.set_context(mode=spore.GRAPH_MODE)  # each training step runs as one compiled plan
spore.set_seed(0)
train, test = spore.dataset.load("digits:" + os.path.join(ROOT, "data", "digits.csv.gz"))
net = SimpleNet()
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
steps_per_epoch = train.batch(16).get_dataset_size()
opt = nn.Momentum(net.trainable_params(), learning_rate=nn.cosine_decay_lr(0.05, epochs * steps_per_epoch))
model = spore.Model(net, loss, opt, metrics={"accuracy"})


class EpochLog(spore.train.Callback):
    def on_epoch_end(self, run_context):
        print(f"epoch {run_context.cur_epoch_num}: train loss {run_context.metrics['loss']:.4f}, "
              f"test accuracy {run_context.metrics['eval_accuracy']:.4f}")


model.train(epochs, train.shuffle(0).batch(16), callbacks=[EpochLog()], valid_dataset=test.batch(256))
result = model.eval(test.batch(256))
print(f"test accuracy {result['accuracy']:.4f} on {int(result['samples'])} digits")

os.makedirs(out_dir, exist_ok=True)
info = spore.export(net, (("batch", 1, 8, 8), spore.float32), file_name=os.path.join(out_dir, "simplenet"),
                    file_format="ONNX")
print(f"exported {info['path']}: {info['ops']} ops, {info['params']} parameters")
deployed = spore.load(info["path"])
(x, y), = [next(iter(test.batch(8)))]
pred = np.asarray(deployed(x)).argmax(axis=1)
print("predicted", pred.tolist(), "labels", y.numpy().tolist())
np.testing.assert_allclose(np.asarray(deployed(x)), model.predict(x).numpy(), rtol=1e-5, atol=1e-6)
assert result["accuracy"] > 0.85, result
