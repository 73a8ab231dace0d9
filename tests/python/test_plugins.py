"""spore.load_custom_ops: a plugin's ops become spore.ops functions that run eagerly, under jit and under grad."""
import os

import numpy as np
import pytest

import spore


@pytest.fixture
def plugin():
    path = os.environ.get("TANHCUSTOM_PLUGIN_PATH", "")
    if not path or not os.path.exists(path):
        if os.environ.get("CI") == "true":
            pytest.fail("TANHCUSTOM_PLUGIN_PATH is not set (ctest sets it to build/.../libtanhcustom.so)")
        pytest.skip("the tanhcustom example plugin is not built here")
    return path


def test_a_plugin_adds_ops_that_run_eagerly_traced_and_differentiated(plugin):
    info = spore.load_custom_ops(plugin)
    assert info["name"] and "tanhcustom_v3" in info["ops"]
    assert spore.load_custom_ops(plugin) == info  # a second load is a no-op
    x = np.random.default_rng(0).uniform(-3, 3, 257).astype(np.float32)
    y = spore.ops.tanhcustom_v3(spore.tensor(x)).numpy()
    np.testing.assert_allclose(y, np.tanh(x.astype(np.float64)), rtol=0, atol=2e-7)
    f = spore.jit(lambda t: spore.ops.tanhcustom_v3(t) * 2.0)
    np.testing.assert_array_equal(f(spore.tensor(x)).numpy(), y * 2.0)
    g = spore.grad(lambda t: spore.ops.reduce_sum(spore.ops.tanhcustom_v3(t)))(spore.tensor(x)).numpy()
    np.testing.assert_allclose(g, 1 - np.tanh(x.astype(np.float64)) ** 2, rtol=0, atol=1e-6)
    assert "tanhcustom_v3" in spore.ops.__all__ and spore.ops.tanhcustom_v3.__doc__


def test_bad_plugins_raise(tmp_path):
    with pytest.raises(spore.Error, match="nope.so"):
        spore.load_custom_ops(tmp_path / "nope.so")
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"not an ELF file")
    with pytest.raises(spore.Error, match="bad.so"):
        spore.load_custom_ops(str(bad))
