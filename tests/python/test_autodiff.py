"""spore.grad / value_and_grad / GradientTape against PyTorch autograd on the same function and inputs."""
import numpy as np
import pytest

import spore
from conftest import require_torch
from spore import ops

torch = require_torch()


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_value_and_grad_matches_torch():
    x, w, b = rnd(4, 6), rnd(6, 3, seed=1), rnd(3, seed=2)

    def f(x, w, b):
        h = ops.relu(x @ w + b)
        return ops.reduce_mean(ops.tanh(h) * h)

    def f_torch(x, w, b):
        h = torch.relu(x @ w + b)
        return (torch.tanh(h) * h).mean()

    value, grads = spore.value_and_grad(f, grad_position=(0, 1, 2))(spore.tensor(x), spore.tensor(w), spore.tensor(b))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    tv = f_torch(tx, tw, tb)
    tv.backward()
    np.testing.assert_allclose(value.item(), tv.item(), rtol=1e-5)
    for g, t in zip(grads, (tx, tw, tb)):
        np.testing.assert_allclose(np.asarray(g), t.grad.numpy(), rtol=1e-4, atol=1e-6)
    gw = spore.grad(f, 1)(spore.tensor(x), spore.tensor(w), spore.tensor(b))  # one position: one tensor
    np.testing.assert_allclose(np.asarray(gw), tw.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_tape_directly_and_misuse():
    x = spore.tensor(rnd(3))
    with spore.GradientTape() as tape:
        wx = tape.watch(x)
        y = ops.reduce_sum(wx * wx)
        (g,) = tape.gradient(y, [wx])
    np.testing.assert_allclose(np.asarray(g), 2 * np.asarray(x), rtol=1e-6)
    with pytest.raises(ValueError, match="inside"):
        spore.GradientTape().watch(x)
    with pytest.raises(ValueError, match="not watched"):
        with spore.GradientTape() as tape:
            tape.gradient(ops.reduce_sum(x * x), [x])
    with pytest.raises(ValueError, match="grad_position"):
        spore.grad(lambda a: a, 3)(x)
    with pytest.raises(TypeError, match="not a spore.Tensor"):
        spore.grad(lambda a: 1.0)(x)
