"""spore.jit: a Python function compiled per input signature gives eager's bits; reading a value while tracing
raises at that line; bad uses raise."""
import numpy as np
import pytest

import spore
from spore import ops


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def mlp(x, w1, w2):
    return ops.softmax(ops.relu(x @ w1) @ w2, axis=-1)


def test_jit_equals_eager_and_compiles_once_per_signature():
    calls = []

    def f(x, w1, w2):
        calls.append(1)  # Python runs only while tracing
        return mlp(x, w1, w2)

    g = spore.jit(f)
    w1, w2 = spore.tensor(rnd(8, 16, seed=1)), spore.tensor(rnd(16, 4, seed=2))
    for batch in (3, 3, 5, 3):
        x = spore.tensor(rnd(batch, 8, seed=batch))
        eager = mlp(x, w1, w2)
        y = g(x, w1, w2)
        assert y.shape == (batch, 4)
        np.testing.assert_allclose(np.asarray(y), np.asarray(eager), rtol=1e-6, atol=1e-7)
    assert g.cache_size == 2 and len(calls) == 2  # batch 3 and batch 5


def test_two_outputs_and_closures():
    bias = spore.tensor(rnd(4, seed=9))

    @spore.jit
    def both(x):
        y = x + bias
        return y, ops.reduce_sum(y)

    x = spore.tensor(rnd(2, 4))
    y, s = both(x)
    np.testing.assert_allclose(np.asarray(y), np.asarray(x) + np.asarray(bias), rtol=0, atol=0)
    np.testing.assert_allclose(s.item(), float(np.asarray(y).sum()), rtol=1e-6)


def test_reading_a_value_while_tracing_raises_and_bad_uses():
    @spore.jit
    def peeks(x):
        if x.numpy().sum() > 0:  # no value while tracing
            return x
        return -x

    with pytest.raises(spore.Error, match="symbolic"):
        peeks(spore.tensor(rnd(3)))
    with pytest.raises(ValueError, match="not a tensor"):
        spore.jit(lambda x: 3.0)(spore.tensor(rnd(3)))
    with pytest.raises(TypeError, match="argument 0"):
        spore.jit(lambda x: x)("text")
