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


class _JitCell(_Jit):
    """A Cell compiled per input signature with its parameters (and buffers) as plan inputs, so the plan sees their
    current values on every call (after training, set_data, load_checkpoint) without a recompile."""

    def __init__(self, cell):
        if cell.training:
            raise ValueError(f"jit: {type(cell).__name__} is in training mode; compile it for inference "
                             "(cell.set_train(False)) - training in graph mode is spore.Model(..., mode='graph')")
        self._cell = cell
        self._params = [p for _, p in cell.parameters_and_names()]
        n_params = len(self._params)

        def construct(*xs):
            inputs, values = xs[:len(xs) - n_params], xs[len(xs) - n_params:]
            saved = [p._swap(v) for p, v in zip(self._params, values)]
            try:
                return cell(*inputs)
            finally:
                for p, v in zip(self._params, saved):
                    p._swap(v)

        construct.__name__ = type(cell).__name__
        super().__init__(construct)

    def __call__(self, *args):
        if self._cell.training:
            raise ValueError(f"jit: {type(self._cell).__name__} was put in training mode after it was compiled")
        return super().__call__(*args, *[p.data for p in self._params])


def jit(fn):
    """Compiles fn per input signature: a function of tensors returning a tensor or a tuple of tensors, or a Cell in
    inference mode (its parameters become plan inputs, so later updates are seen). While it is traced its tensors have
    no values: reading one (numpy(), item(), bool()) raises an error at that line."""
    from ._spore import Cell
    if isinstance(fn, Cell):
        return _JitCell(fn)
    return _Jit(fn)
