"""spore.Tensor and NumPy / DLPack: memory shared where the issue says so (same pointer), every dtype, views kept as
views, clear errors for what cannot be shared. Run by ctest (python_pytest) against the build tree's package."""
import numpy as np
import pytest

import spore
from conftest import require_torch

NUMPY_DTYPES = [(np.float64, spore.float64), (np.float32, spore.float32), (np.float16, spore.float16),
                (np.int64, spore.int64), (np.int32, spore.int32), (np.int8, spore.int8), (np.uint8, spore.uint8),
                (np.bool_, spore.bool_)]


def random_array(np_dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if np_dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(np_dtype, np.integer):
        info = np.iinfo(np_dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(np_dtype)
    return rng.standard_normal(shape).astype(np_dtype)


@pytest.mark.parametrize("np_dtype,sp_dtype", NUMPY_DTYPES)
def test_numpy_round_trip_shares_memory_for_every_dtype(np_dtype, sp_dtype):
    a = random_array(np_dtype, (3, 5))
    t = spore.from_numpy(a)
    assert t.dtype == sp_dtype and t.shape == (3, 5)
    assert t.data_ptr() == a.ctypes.data  # no copy in
    b = t.numpy()
    assert b.ctypes.data == a.ctypes.data  # no copy out
    assert b.dtype == a.dtype and np.array_equal(a, b)
    a[1, 2] = a[0, 0] if np_dtype != np.bool_ else not a[1, 2]
    assert np.array_equal(t.numpy(), a)  # the same memory, seen through the tensor
    assert np.shares_memory(np.asarray(t), a)  # __array__ / the buffer protocol share it too
    assert np.shares_memory(memoryview(t), a)


def test_strided_numpy_views_stay_views():
    base = random_array(np.float32, (6, 8))
    v = base[1:5:2, ::3]  # a strided view
    t = spore.from_numpy(v)
    assert t.shape == (2, 3) and not t.is_contiguous()
    assert t.strides == (16, 3)  # in elements
    assert np.shares_memory(t.numpy(), base)
    assert np.array_equal(t.numpy(), v)
    c = t.contiguous()
    assert c.is_contiguous() and np.array_equal(c.numpy(), v) and not np.shares_memory(c.numpy(), base)


def test_the_array_outlives_its_python_name():
    t = spore.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))  # the only reference is the tensor's
    import gc
    gc.collect()
    assert t.numpy().sum() == 66.0
    n = t.numpy()
    del t
    gc.collect()
    assert n.sum() == 66.0  # the NumPy view keeps the tensor (and so the array) alive


def test_what_cannot_be_shared_is_a_clear_error():
    with pytest.raises(spore.errors.InvalidArgumentError, match="negative|stride"):
        spore.from_numpy(np.arange(5, dtype=np.float32)[::-1])
    with pytest.raises(spore.errors.DTypeMismatchError, match="complex128"):
        spore.from_numpy(np.zeros(3, np.complex128))
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        spore.from_numpy(ro)
    with pytest.raises(TypeError):
        spore.from_numpy("not an array")


def test_bfloat16_is_a_dtype_and_converts():
    x = spore.tensor(np.array([1.0, -2.5, 3.140625], np.float32), dtype=spore.bfloat16)
    assert x.dtype == spore.bfloat16 and x.dtype.itemsize == 2
    assert np.array_equal(np.asarray(x), np.array([1.0, -2.5, 3.140625], np.float32))  # exact in bf16
    assert list(x.view_bits()) == [0x3F80, 0xC020, 0x4049]
    with pytest.raises(TypeError, match="bfloat16"):
        x.numpy()
    with pytest.raises(BufferError, match="bfloat16"):
        memoryview(x)
    assert x.to(spore.float32).dtype == spore.float32


def test_tensor_copies_and_python_floats_are_float32():
    a = np.arange(4, dtype=np.int64)
    t = spore.tensor(a)
    assert t.dtype == spore.int64 and not np.shares_memory(t.numpy(), a)
    assert spore.tensor([[1.5, 2.0]]).dtype == spore.float32
    assert spore.tensor([1, 2], dtype="float16").dtype == spore.float16
    assert spore.tensor(3.0).item() == 3.0 and spore.tensor(3.0).shape == ()
    assert spore.zeros((2, 3)).numpy().sum() == 0 and spore.ones((2,), spore.int32).tolist() == [1, 1]
    with pytest.raises(TypeError, match="not a spore dtype"):
        spore.tensor([1], dtype="complex")


torch = require_torch()


@pytest.mark.parametrize("td,sd", [(torch.float32, spore.float32), (torch.float64, spore.float64),
                                   (torch.float16, spore.float16), (torch.bfloat16, spore.bfloat16),
                                   (torch.int64, spore.int64), (torch.int32, spore.int32), (torch.int8, spore.int8),
                                   (torch.uint8, spore.uint8)])
def test_dlpack_with_torch_both_ways_shares_memory(td, sd):
    g = torch.Generator().manual_seed(3)
    src = (torch.randn(4, 6, generator=g) * 50).to(td)
    t = spore.from_dlpack(src)
    assert t.dtype == sd and t.shape == (4, 6) and t.data_ptr() == src.data_ptr()
    back = torch.from_dlpack(t)
    assert back.data_ptr() == src.data_ptr() and torch.equal(back, src)
    view = src[:, 1::2]
    tv = spore.from_dlpack(view)
    assert tv.strides == (6, 2) and torch.equal(torch.from_dlpack(tv), view)


def test_numpy_from_dlpack_and_spore_from_dlpack_of_numpy():
    a = random_array(np.float32, (2, 3))
    t = spore.from_dlpack(a)
    assert t.data_ptr() == a.ctypes.data
    n = np.from_dlpack(t)
    assert n.ctypes.data == a.ctypes.data and np.array_equal(n, a)
    with pytest.raises(TypeError, match="__dlpack__"):
        spore.from_dlpack([1, 2, 3])


def test_basic_indexing_gives_views_as_numpy():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = spore.from_numpy(a)
    for key in [1, -1, (1, 2), (slice(None), 1), (Ellipsis, 2), (slice(1, None, 2), Ellipsis, slice(0, 5, 3)),
                (None, 0), (0, None, slice(1, 3)), (2, 3, 4), slice(10, 20)]:
        v = t[key]
        assert v.shape == a[key].shape, key
        np.testing.assert_array_equal(np.asarray(v), a[key])
        if v.numel():
            assert np.shares_memory(v.numpy(), a), key
    t[1, 2] = 7.0
    assert (a[1, 2] == 7.0).all()
    t[0] = np.arange(5, dtype=np.float32)
    assert (a[0] == np.arange(5)).all()
    with pytest.raises(IndexError, match="out of range"):
        t[3]
    with pytest.raises(IndexError, match="too many"):
        t[0, 0, 0, 0]
    with pytest.raises(IndexError, match="positive step"):
        t[::-1]
    with pytest.raises(TypeError, match="basic indexing"):
        t[[0, 1]]


def test_empty_tensors_round_trip():
    t = spore.from_numpy(np.zeros((0, 3), np.float32))
    assert t.shape == (0, 3) and t.numpy().shape == (0, 3) and memoryview(t).shape == (0, 3)
    assert spore.ops.relu(t).shape == (0, 3) and t[1:].shape == (0, 3)
    assert torch.from_dlpack(t).shape == (0, 3) and spore.from_dlpack(torch.zeros(0, 4)).shape == (0, 4)
