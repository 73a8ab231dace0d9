"""Deployed models from Python: spore.load(path) runs an .onnx / .spore / text-IR model as `spore run` does."""
import numpy as np

from . import _spore
from ._spore import Tensor
from ._tensor import tensor


class Model:
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
        return f"spore.Model({self.path!r}; {ins})"


def load(path):
    """Loads an .onnx, .spore or text-IR model for inference (see Model)."""
    return Model(path)
