"""Tensor construction and the Python operators of spore.Tensor (arithmetic and comparisons run spore's ops)."""
import numbers

import numpy as np

from . import _spore
from ._spore import Tensor, dtype, from_numpy

_NUMPY_DTYPES = {np.dtype(np.float64): dtype.float64, np.dtype(np.float32): dtype.float32,
                 np.dtype(np.float16): dtype.float16, np.dtype(np.int64): dtype.int64, np.dtype(np.int32): dtype.int32,
                 np.dtype(np.int8): dtype.int8, np.dtype(np.uint8): dtype.uint8, np.dtype(np.bool_): dtype.bool_}


def _call(name, inputs, **attrs):
    out = _spore._op_call(name, list(inputs), attrs)
    return out[0] if len(out) == 1 else tuple(out)


def _as_dtype(d, what):
    if isinstance(d, dtype):
        return d
    if isinstance(d, str) and hasattr(dtype, d):
        return getattr(dtype, d)
    try:
        nd = np.dtype(d)
    except TypeError:
        nd = None
    if nd is not None and nd in _NUMPY_DTYPES:
        return _NUMPY_DTYPES[nd]
    raise TypeError(f"{what}: {d!r} is not a spore dtype (spore.float32, 'float16', np.int64, ...)")


def to_dtype(t, d):
    """t converted to dtype d (a copy, through the cast op); t itself when it has that dtype already."""
    d = _as_dtype(d, "to")
    return t if t.dtype == d else _call("cast", [t], dtype=d)


def tensor(data, dtype=None):
    """A new tensor holding a copy of data (a NumPy array, nested lists or a scalar, another tensor)."""
    if isinstance(data, Tensor):
        t = data.clone()
    else:
        if dtype is not None and _as_dtype(dtype, "tensor") == _spore.dtype.bfloat16:
            t = from_numpy(np.array(data, dtype=np.float32, copy=True))
        else:
            arr = np.array(data, copy=True)
            if dtype is None and arr.dtype == np.float64 and not isinstance(data, np.ndarray):
                arr = arr.astype(np.float32)  # Python floats become float32, as in PyTorch and MindSpore
            if not arr.flags.writeable:
                arr = arr.copy()
            t = from_numpy(arr if arr.flags.c_contiguous else arr.copy(order="C"))
    return to_dtype(t, dtype) if dtype is not None else t


def zeros(shape, dtype=None):
    """A tensor of zeros (float32 unless dtype says otherwise)."""
    return tensor(np.zeros(tuple(shape), np.float32), dtype)


def ones(shape, dtype=None):
    """A tensor of ones (float32 unless dtype says otherwise)."""
    return tensor(np.ones(tuple(shape), np.float32), dtype)


def from_dlpack(obj):
    """A tensor sharing the memory of a DLPack producer (a torch tensor, a NumPy array, another spore tensor)."""
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"from_dlpack: {type(obj).__name__} has no __dlpack__ method")
    return _spore._from_dlpack_capsule(obj.__dlpack__())


# ---- operators ---------------------------------------------------------------------------------------------------

# numpy_name of a tensor's dtype (one per dtype; "" for bfloat16) -> (NumPy dtype or None for bfloat16, is bool, is
# floating point). Comparing or hashing spore.dtype values costs ~0.2-0.5 us each (pybind11 enums); a str key does not.
_SCALAR_KIND = {}
_F32 = np.dtype(np.float32)


def _scalar_kind(d):
    key = d.numpy_name
    k = _SCALAR_KIND.get(key)
    if k is None:
        k = _SCALAR_KIND[key] = (None if d == dtype.bfloat16 else np.dtype(key), d == dtype.bool_,
                                 bool(d.is_floating_point))
    return k


def _operand(other, like):
    """A tensor for the other side of a binary operator: scalars take the tensor's dtype (as NumPy's weak scalars)."""
    if isinstance(other, Tensor):
        return other
    kind = type(other)
    if kind is float or kind is int or isinstance(other, (numbers.Number, np.generic)):
        np_dtype, is_bool, is_float = _scalar_kind(like.dtype)
        if not is_bool and isinstance(other, (bool, np.bool_)):
            other = int(other)
        if np_dtype is None:  # bfloat16
            return to_dtype(tensor(np.array(other, np.float32)), dtype.bfloat16)
        if not is_float and isinstance(other, float):
            np_dtype = _F32
        # np.array makes a new writable C-contiguous 0-d array: wrap it directly (tensor() would copy it again).
        return from_numpy(np.array(other, dtype=np_dtype))
    if isinstance(other, (np.ndarray, list, tuple)):
        return tensor(other)
    return NotImplemented


def _binary(name, reverse=False):
    fast = _spore._fast_call
    index = _spore._op_index(name)

    def op(self, other):
        # What the C operator (_operator) declined: NumPy scalars, arrays, Python numbers with bf16/f16/bool tensors.
        o = _operand(other, self)
        if o is NotImplemented:
            return NotImplemented
        return fast(index, o, self) if reverse else fast(index, self, o)
    op.__name__ = f"__{'r' if reverse else ''}{name}__"
    return op


def _operator(py_name, op, reverse=False):
    """A C-level Tensor operator: tensors and Python numbers run the op directly, the rest goes to _binary's path."""
    f = _spore._op_function(op, _binary(op, reverse), method=True, reversed=reverse)
    f.__name__ = f.__qualname__ = py_name
    return f


for _py, _op in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"), ("matmul", "matmul"),
                 ("pow", "pow"), ("mod", "mod")]:
    setattr(Tensor, f"__{_py}__", _operator(f"__{_py}__", _op))
    setattr(Tensor, f"__r{_py}__", _operator(f"__r{_py}__", _op, reverse=True))
for _py, _op in [("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"), ("ge", "ge")]:
    setattr(Tensor, f"__{_py}__", _operator(f"__{_py}__", _op))
Tensor.__hash__ = object.__hash__  # __eq__ is elementwise; tensors hash by identity
Tensor.__neg__ = lambda self: _call("sub", [_operand(0, self), self])
Tensor.__pos__ = lambda self: self


def _array(self, dtype=None, copy=None):
    a = self.numpy() if self.dtype != _spore.dtype.bfloat16 else to_dtype(self, _spore.dtype.float32).numpy()
    if dtype is not None:
        a = a.astype(dtype, copy=False)
    return a.copy() if copy else a


Tensor.__array__ = _array
Tensor.to = to_dtype
Tensor.tolist = lambda self: _array(self).tolist()


def _len(self):
    if self.ndim == 0:
        raise TypeError("len() of a 0-d tensor")
    return self.shape[0]


Tensor.__len__ = _len


def _bool(self):
    if self.numel() != 1:
        raise ValueError(f"the truth value of a tensor with {self.numel()} elements is ambiguous")
    return bool(self.item())


Tensor.__bool__ = _bool
Tensor.__float__ = lambda self: float(self.item())
Tensor.__int__ = lambda self: int(self.item())


def _setitem(self, key, value):
    """t[key] = value: writes into the view t[key] (NumPy's broadcasting and casting rules)."""
    view = self[key]
    if view.dtype == _spore.dtype.bfloat16:
        src = value if isinstance(value, Tensor) else tensor(np.asarray(value, np.float32), _spore.dtype.bfloat16)
        src = to_dtype(src, _spore.dtype.bfloat16)
        np.copyto(view.view_bits(), np.broadcast_to(src.view_bits(), view.shape))
        return
    np.copyto(view.numpy(), np.asarray(value), casting="same_kind")


Tensor.__setitem__ = _setitem
