"""spore.ops generated from the op registry, Python operators, broadcasting as NumPy's, errors as exceptions."""
import inspect

import numpy as np
import pytest

import spore


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_every_registered_op_is_a_function_with_a_signature_and_docs():
    assert len(spore.ops.names) > 60
    for name in spore.ops.names:
        fn = getattr(spore.ops, name)
        assert fn.__doc__ and isinstance(inspect.signature(fn), inspect.Signature), name
    sig = inspect.signature(spore.ops.conv2d)
    assert list(sig.parameters)[:2] == ["x", "w"] or len(sig.parameters) >= 2
    assert "stride" in str(sig) or "strides" in str(sig)
    assert "Attributes:" in spore.ops.softmax.__doc__


def test_operators_broadcast_as_numpy():
    a, b = rnd(3, 1, 4), rnd(5, 1, seed=1)
    x, y = spore.from_numpy(a), spore.from_numpy(b)
    np.testing.assert_allclose((x + y).numpy(), a + b, rtol=0, atol=0)
    np.testing.assert_allclose((x - y).numpy(), a - b, rtol=0, atol=0)
    np.testing.assert_allclose((x * y).numpy(), a * b, rtol=0, atol=0)
    np.testing.assert_allclose((x / y).numpy(), a / b, rtol=1e-6)
    np.testing.assert_allclose((2 * x - 1).numpy(), 2 * a - 1, rtol=0, atol=0)
    np.testing.assert_allclose((1 - x).numpy(), 1 - a, rtol=0, atol=0)
    np.testing.assert_allclose((-x).numpy(), -a, rtol=0, atol=0)
    assert ((x > 0).numpy() == (a > 0)).all()
    m, n = rnd(3, 4, seed=2), rnd(4, 2, seed=3)
    np.testing.assert_allclose((spore.from_numpy(m) @ spore.from_numpy(n)).numpy(), m @ n, rtol=1e-5, atol=1e-6)


def test_ops_with_attributes_and_defaults():
    a = rnd(2, 5)
    x = spore.from_numpy(a)
    s = spore.ops.softmax(x, axis=-1).numpy()
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(s, e / e.sum(axis=-1, keepdims=True), rtol=1e-6)
    t = spore.ops.transpose(x, perm=[1, 0])
    assert t.shape == (5, 2) and np.array_equal(np.asarray(t), a.T)
    parts = spore.ops.split(spore.from_numpy(rnd(6, 2)), axis=0, sizes=[2, 4]) if "sizes" in str(
        inspect.signature(spore.ops.split)) else None
    if parts is not None:
        assert isinstance(parts, tuple) and [p.shape for p in parts] == [(2, 2), (4, 2)]


def test_bad_input_is_an_exception_never_a_crash():
    x = spore.from_numpy(rnd(2, 3))
    with pytest.raises(spore.Error):
        spore.ops.matmul(x, x)  # 2x3 @ 2x3
    with pytest.raises(ValueError, match="shape|dim|3"):
        spore.ops.matmul(x, x)
    with pytest.raises(TypeError, match="must be a spore.Tensor"):
        spore.ops.relu(np.zeros(3)) if hasattr(spore.ops, "relu") else spore.ops.add(np.zeros(3), x)
    with pytest.raises(TypeError, match="softmax"):
        spore.ops.softmax()  # missing input
    with pytest.raises(ValueError, match="axis"):
        spore.ops.softmax(x, axis="last")  # wrong attribute type
    with pytest.raises(ValueError, match="no attribute 'bogus'"):
        spore._spore._op_call("softmax", [x], {"bogus": 1})
    with pytest.raises(KeyError, match="unknown op"):
        spore._spore._op_call("no_such_op", [x], {})
    with pytest.raises(TypeError):
        x + "a string"


def test_threads_setting():
    n = spore.get_threads()
    spore.set_threads(1)
    assert spore.get_threads() == 1
    spore.set_threads(n)
    with pytest.raises(ValueError):
        spore.set_threads(0)


def test_type_stubs_cover_the_extension():
    import ast
    import os
    pyi = os.path.join(os.path.dirname(spore.__file__), "_spore.pyi")
    tree = ast.parse(open(pyi).read())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    public = {n for n in dir(spore._spore) if not n.startswith("__")}
    assert public <= names, f"not in _spore.pyi: {sorted(public - names)}"
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    methods = {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
    tensor_api = {n for n in dir(spore.Tensor) if not n.startswith("_")}
    assert tensor_api <= methods, f"Tensor members not in _spore.pyi: {sorted(tensor_api - methods)}"


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int64, np.float16])
def test_python_scalars_are_weak_and_the_fast_path_equals_numpys(dt):
    """x op scalar takes x's dtype (NumPy's weak scalars). C++ builds the scalar for f32/f64/i32/i64, Python (NumPy)
    for the rest; either way the result equals the op on an explicit 0-d array of x's dtype."""
    x = spore.tensor(np.array([1, -2, 3, 7], dtype=dt))
    floats = [0.1, 2.5, -1e20, 16777217.0] if np.issubdtype(dt, np.floating) else []
    for v in [2, -3, 16777217, 2 ** 40, 2 ** 60, *floats]:
        if not np.issubdtype(dt, np.floating) and not np.can_cast(np.min_scalar_type(v), dt):
            continue
        if dt == np.float16 and abs(v) > 6e4:
            continue  # beyond float16's range
        want_s = spore.tensor(np.array(v, dtype=dt))
        for got, want in ((x * v, x * want_s), (v - x, want_s - x), (spore.ops.add(x, v), x + want_s)):
            assert got.dtype == x.dtype
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    if not np.issubdtype(dt, np.floating):
        with pytest.raises(spore.Error):
            x * 2.5  # a float scalar does not silently become an int
