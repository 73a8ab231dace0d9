"""spore: a deep-learning engine (C++20) with a MindSpore-style API. This package is its Python front end.

    import numpy as np, spore
    x = spore.from_numpy(np.ones((2, 3), np.float32))   # shares the array's memory
    y = spore.ops.relu(x * 2 - 1)
    y.numpy()                                          # shares the tensor's memory

Tensors convert to and from NumPy without copying (buffer protocol, __array__, from_numpy) and to and from PyTorch
through DLPack (torch.from_dlpack(t), spore.from_dlpack(torch_tensor)). spore.ops has one function per op of the
engine's registry, with its signature and documentation. Errors are spore.Error subclasses (spore.errors).

spore.nn (Cells written in Python, layers, losses, optimizers), spore.train (Model, callbacks) and spore.dataset
follow MindSpore's API; spore.export / spore.load write and run model files; spore.llm generates text.
"""
from . import errors
from ._spore import _set_error_classes

_set_error_classes(errors._by_code())

from ._spore import Tensor, dtype, from_numpy, get_threads, set_threads  # noqa: E402
from ._spore import version as _version  # noqa: E402
from .errors import Error  # noqa: E402
from ._tensor import tensor, from_dlpack, zeros, ones, to_dtype  # noqa: E402
from . import ops  # noqa: E402
from .deploy import LoadedModel, load, export, save_checkpoint, load_checkpoint  # noqa: E402
from . import llm  # noqa: E402
from ._spore import GradientTape  # noqa: E402
from .autodiff import grad, value_and_grad  # noqa: E402
from .jit import jit  # noqa: E402
from ._spore import Parameter, set_seed  # noqa: E402
from . import nn, dataset, train  # noqa: E402
from .train import Model  # noqa: E402
from .context import set_context, get_context, GRAPH_MODE, PYNATIVE_MODE  # noqa: E402
from .serving import Server, serve  # noqa: E402
from .plugins import load_custom_ops  # noqa: E402
from .tools import convert, profile  # noqa: E402

__version__ = _version()

float64 = dtype.float64
float32 = dtype.float32
float16 = dtype.float16
bfloat16 = dtype.bfloat16
int64 = dtype.int64
int32 = dtype.int32
int8 = dtype.int8
uint8 = dtype.uint8
bool_ = dtype.bool_

__all__ = ["Tensor", "dtype", "tensor", "from_numpy", "from_dlpack", "zeros", "ones", "ops", "errors", "Error", "load",
           "LoadedModel", "export", "save_checkpoint", "load_checkpoint", "Model", "nn", "train", "dataset", "Parameter",
           "set_seed", "set_context", "get_context", "GRAPH_MODE", "PYNATIVE_MODE", "Server", "serve", "load_custom_ops", "convert", "profile", "llm", "GradientTape", "grad", "value_and_grad", "jit",
           "set_threads", "get_threads", "float64", "float32", "float16", "bfloat16", "int64", "int32", "int8",
           "uint8", "bool_"]
