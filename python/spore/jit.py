"""Graph mode for Python functions (MindSpore's @jit): the function is traced once per input signature (shapes and
dtypes) into one compiled plan, cached and replayed; later calls with that signature run the plan, not Python."""
import functools

import numpy as np

from . import _spore
from ._spore import Tensor
from ._tensor import tensor


class _Jit:
    def __init__(self, fn):
        self._fn = fn
        self._compiled = _spore.CompiledFunction(fn, getattr(fn, "__name__", "jit"))
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        if not args:
            raise TypeError(f"jit {self.__name__}: needs at least one tensor argument")
        xs = []
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                xs.append(a)
            elif isinstance(a, np.ndarray):
                xs.append(tensor(a))
            else:
                raise TypeError(f"jit {self.__name__}: argument {i} is a {type(a).__name__}; jit functions take "
                                "tensors (close over other values)")
        out = self._compiled(xs)
        return out[0] if len(out) == 1 else tuple(out)

    @property
    def cache_size(self):
        """Compiled plans, one per input signature seen."""
        return self._compiled.cache_size


def jit(fn):
    """Compiles fn (a function of tensors returning a tensor or a tuple of tensors) per input signature. While it is
    traced its tensors have no values: reading one (numpy(), item(), bool()) raises an error at that line."""
    return _Jit(fn)
