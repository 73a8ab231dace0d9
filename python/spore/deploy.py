"""Deployment from Python: spore.load(path) runs an .onnx / .spore / text-IR model as `spore run` does, and
spore.export(net, *inputs, file_name=...) writes a Cell as a .spore or ONNX model file as `spore export` does."""
import os

import numpy as np

from . import _spore
from ._spore import Tensor
from ._tensor import tensor


class LoadedModel:
    """A model file loaded for inference. Call it with tensors or NumPy arrays, positionally in the model's input
    order or by input name; it returns one tensor, or a tuple for several outputs.

    Symbolic dims (a dynamic batch, an image size) bind from the inputs given: a new input signature compiles one
    plan, kept in a bounded cache (`stats` counts compiles), as `spore run` and `spore serve` do.
    """

    def __init__(self, path):
        self._session = _spore.Session(str(path))

    @property
    def path(self):
        return self._session.path

    @property
    def inputs(self):
        """(name, dtype, dims) per input, dims holding ints or the names of symbolic dims."""
        return self._session.inputs

    @property
    def stats(self):
        return self._session.stats

    def __call__(self, *args, **kwargs):
        names = [n for n, _, _ in self.inputs]
        if len(args) > len(names):
            raise TypeError(f"{self.path}: takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
        given = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{self.path}: no input named '{k}' (inputs: {', '.join(names)})")
            if k in given:
                raise TypeError(f"{self.path}: input '{k}' given twice")
            given[k] = v
        missing = [n for n in names if n not in given]
        if missing:
            raise TypeError(f"{self.path}: missing input(s) {', '.join(missing)}")
        xs = []
        for n in names:
            v = given[n]
            if isinstance(v, Tensor):
                xs.append(v)
            elif isinstance(v, np.ndarray):
                shareable = v.flags.writeable and all(st >= 0 for st in v.strides)
                xs.append(_spore.from_numpy(v) if shareable else tensor(v))
            else:
                raise TypeError(f"{self.path}: input '{n}' must be a spore.Tensor or a NumPy array, got "
                                f"{type(v).__name__}")
        out = self._session.run(xs)
        return out[0] if len(out) == 1 else tuple(out)

    def __repr__(self):
        ins = ", ".join(f"{n}: {d.short_name}[{','.join(str(x) for x in dims)}]" for n, d, dims in self.inputs)
        return f"spore.LoadedModel({self.path!r}; {ins})"


def load(path):
    """Loads an .onnx, .spore or text-IR model for inference (see LoadedModel)."""
    return LoadedModel(path)


def _input_spec(x, i):
    """(dtype, dims) of an export input: a tensor or array (its shape), or a (shape, dtype) pair whose dims may be
    symbol names (a dynamic batch: ("batch", 1, 28, 28))."""
    from ._tensor import _as_dtype
    if isinstance(x, Tensor):
        return (x.dtype, list(x.shape))
    if isinstance(x, np.ndarray):
        return (_as_dtype(x.dtype, "export"), list(x.shape))
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], (tuple, list)):
        return (_as_dtype(x[1], "export"), list(x[0]))
    raise TypeError(f"export: input {i} is a {type(x).__name__}; give a tensor, an array or a (shape, dtype) pair")


def export(net, *inputs, file_name, file_format="SPORE", input_names=None):
    """Traces net (in inference mode: BatchNorm folded, Dropout off) on inputs shaped like `inputs` and writes it to
    file_name as a .spore (file_format "SPORE") or ONNX ("ONNX") model, its weights named after the parameters.
    A dim given as a string stays symbolic in the file. Returns a summary dict (path, ops, params, bytes)."""
    from ._spore import Cell
    if not isinstance(net, Cell):
        raise TypeError(f"export: net must be a spore.nn.Cell, got {type(net).__name__}")
    if not inputs:
        raise TypeError("export: give at least one input (a tensor, an array or a (shape, dtype) pair)")
    fmt = str(file_format).upper()
    ext = {"SPORE": ".spore", "ONNX": ".onnx"}.get(fmt)
    if ext is None:
        raise ValueError(f"export: file_format {file_format!r} (expected 'SPORE' or 'ONNX')")
    path = os.fspath(file_name)
    if not path.endswith(ext):
        path += ext
    names = list(input_names) if input_names is not None else []
    return _spore._export(net, [_input_spec(x, i) for i, x in enumerate(inputs)], names, path)


def save_checkpoint(net, ckpt_file_name):
    """Writes net's parameters and buffers (dotted names) to a .safetensors checkpoint."""
    _spore._save_checkpoint(net, os.fspath(ckpt_file_name))


def load_checkpoint(ckpt_file_name, net):
    """Loads a checkpoint into net (every name, shape and dtype must match; nothing changes otherwise). Returns the
    optimizer step it was saved at."""
    return _spore._load_checkpoint(net, os.fspath(ckpt_file_name))
