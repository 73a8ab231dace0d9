#!/usr/bin/python3
"""Tensors shared with NumPy (no copies), ops, and a few steps of gradient descent on a least-squares fit."""
import numpy as np

import spore
from spore import ops

rng = np.random.default_rng(0)
x_np = rng.standard_normal((64, 3)).astype(np.float32)
true_w = np.array([[1.5], [-2.0], [0.5]], np.float32)
y_np = x_np @ true_w

x, y = spore.from_numpy(x_np), spore.from_numpy(y_np)    # views of the arrays
w = spore.zeros((3, 1))
loss_and_grad = spore.value_and_grad(lambda w: ops.reduce_mean((x @ w - y) * (x @ w - y)))
for step in range(200):
    loss, g = loss_and_grad(w)
    w = w - 0.1 * g
print(f"loss {loss.item():.2e}, w = {np.asarray(w).ravel().round(3)} (true {true_w.ravel()})")
assert loss.item() < 1e-6
