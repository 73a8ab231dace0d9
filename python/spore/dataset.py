"""Datasets (MindSpore's mindspore.dataset) over the engine's deterministic pipeline: samples x[i], y[i], then
.shuffle(seed), per-sample transforms (.normalize, .random_crop, .random_flip_horizontal), .batch(n) and .repeat.
Every random choice is keyed by (seed, epoch, sample), so the batches are a pure function of the seed.

    train, test = spore.dataset.load("digits:data/digits.csv.gz")      # the CLI's dataset specs
    ds = spore.dataset.NumpySlicesDataset((x, y)).shuffle(0).batch(32)
    for xb, yb in ds: ...
"""
import numpy as np

from . import _spore
from ._spore import Dataset, Tensor
from ._tensor import tensor


def _column(v, what):
    if isinstance(v, Tensor):
        return v
    a = np.asarray(v)
    if a.dtype == np.float64:
        a = a.astype(np.float32)  # as spore.tensor does for Python floats; pass float64 tensors to keep them
    if a.ndim == 0:
        raise ValueError(f"{what}: a column needs a leading sample dim, got a scalar")
    return tensor(np.ascontiguousarray(a))


def _columns(data, column_names, what):
    if isinstance(data, dict):
        names = list(column_names) if column_names else list(data)
        cols = [data[n] for n in names]
    elif isinstance(data, tuple) or (isinstance(data, list) and 1 <= len(data) <= 2 and
                                     all(isinstance(c, (np.ndarray, Tensor)) for c in data)):
        cols = list(data)
    else:
        cols = [data]
    if not 1 <= len(cols) <= 2:
        raise ValueError(f"{what}: spore datasets hold one or two columns (data, label), got {len(cols)}")
    cols = [_column(c, f"{what} column {i}") for i, c in enumerate(cols)]
    if len(cols) == 2 and cols[0].shape[0] != cols[1].shape[0]:
        raise ValueError(f"{what}: the columns have {cols[0].shape[0]} and {cols[1].shape[0]} samples")
    return cols


def NumpySlicesDataset(data, column_names=None, shuffle=None, seed=0):
    """A dataset of the rows of (x, y) (or x alone, or a dict of one or two columns): NumPy arrays, lists or tensors.
    shuffle=True shuffles with `seed` (reshuffled every epoch)."""
    cols = _columns(data, column_names, "NumpySlicesDataset")
    ds = Dataset.from_tensors(cols[0], cols[1] if len(cols) > 1 else None)
    return ds.shuffle(int(seed)) if shuffle else ds


def GeneratorDataset(source, column_names=None, shuffle=None, seed=0):
    """A dataset of what `source` yields: a generator function, an iterable, or an object with __getitem__ and
    __len__; each item is (x, y) or x. The items are read once, stacked into arrays, and then served by the engine's
    pipeline (so shuffling and batching are deterministic and do not call back into Python)."""
    if callable(source) and not hasattr(source, "__getitem__"):
        source = source()
    if hasattr(source, "__getitem__") and hasattr(source, "__len__"):
        items = [source[i] for i in range(len(source))]
    else:
        items = list(source)
    if not items:
        raise ValueError("GeneratorDataset: the source yielded nothing")
    pairs = isinstance(items[0], tuple)
    if pairs and not 1 <= len(items[0]) <= 2:
        raise ValueError(f"GeneratorDataset: items have {len(items[0])} columns; spore datasets hold (data, label)")
    if pairs:
        cols = tuple(np.stack([np.asarray(it[c]) for it in items]) for c in range(len(items[0])))
    else:
        cols = (np.stack([np.asarray(it) for it in items]),)
    return NumpySlicesDataset(cols if len(cols) > 1 else cols[0], column_names, shuffle, seed)


def load(spec, limit_train=0, limit_test=0):
    """(train, test) datasets from a CLI dataset spec: "digits:FILE", "mnist:DIR", "fashion-mnist:DIR" (the same
    splits `spore train --dataset` uses). Unbatched and unshuffled: add .shuffle(seed).batch(n)."""
    (xtr, ytr), (xte, yte), _ = _spore._load_dataset_spec(str(spec), int(limit_train), int(limit_test))
    return Dataset.from_tensors(xtr, ytr), Dataset.from_tensors(xte, yte)


def load_arrays(spec, limit_train=0, limit_test=0):
    """((x_train, y_train), (x_test, y_test), description) as tensors, from a CLI dataset spec."""
    return _spore._load_dataset_spec(str(spec), int(limit_train), int(limit_test))


def _iterate(self, epoch=0):
    for b in range(self.get_dataset_size()):
        yield self._batch_at(epoch, b)


def _create_tuple_iterator(self, num_epochs=1):
    for e in range(num_epochs):
        yield from _iterate(self, e)


Dataset.__iter__ = _iterate
Dataset.__len__ = Dataset.get_dataset_size
Dataset.create_tuple_iterator = _create_tuple_iterator

__all__ = ["Dataset", "NumpySlicesDataset", "GeneratorDataset", "load", "load_arrays"]
