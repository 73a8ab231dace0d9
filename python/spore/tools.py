"""`spore convert` and `spore profile` from Python: the same engine code (deploy::convert_model and
deploy::profile_model, src/deploy/), returning the report the CLI prints with --json as a dict.

    rep = spore.convert("m.onnx", "m_int8.spore", quantize="int8", calib_data="digits:data/digits.csv.gz",
                        eval_data="digits:data/digits.csv.gz")
    rep["size_ratio"], rep["accuracy_delta_points"], rep["outputs"][0]["cosine"]
    prof = spore.profile("m_int8.spore", inputs={"x": np.zeros((8, 1, 8, 8), np.float32)}, trace="trace.json")
    prof["top"][0]["op"], prof["kernels"], prof["peak_bytes"]

Arguments mirror the CLI options (`spore convert --help`, `spore profile --help`). Python types are checked here
(TypeError); values are checked by the engine, whose errors (spore.Error subclasses, ValueError for bad values) name
the CLI option the argument mirrors (quantize -> --quantize). Use spore.set_threads for the thread count.
"""
import numbers
import os

import numpy as np

from . import _spore
from ._spore import Tensor
from ._tensor import tensor

__all__ = ["convert", "profile"]


def _path(x, what):
    if isinstance(x, (str, os.PathLike)):
        p = os.fspath(x)
        if isinstance(p, str):
            return p
    raise TypeError(f"{what} must be a path (str or os.PathLike), got {type(x).__name__}")


def _str(x, what):
    if not isinstance(x, str):
        raise TypeError(f"{what} must be a str, got {type(x).__name__}")
    return x


def _int(x, what, minimum=None):
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {type(x).__name__}")
    x = int(x)
    if minimum is not None and x < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {x}")
    return x


def _float(x, what):
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{what} must be a number, got {type(x).__name__}")
    return float(x)


def _as_tensor(v, what):
    """A spore tensor, or a NumPy array shared (no copy) where spore can share it, else copied."""
    if isinstance(v, Tensor):
        return v
    if isinstance(v, np.ndarray):
        shareable = v.flags.writeable and all(st >= 0 for st in v.strides)
        return _spore.from_numpy(v) if shareable else tensor(v)
    raise TypeError(f"{what} must be a spore.Tensor or a NumPy array, got {type(v).__name__}")


def _input_shapes(spec):
    """input_shape as --input-shape entries: "x:1,1,28,28" (';' joins several), a list of such strings, or a dict
    {name: dims} whose dims are ints (-1 keeps the model's dim) or symbol names (a dynamic dim)."""
    if spec is None:
        return []
    if isinstance(spec, str):
        return [spec]
    if isinstance(spec, dict):
        out = []
        for name, dims in spec.items():
            if not isinstance(name, str):
                raise TypeError(f"input_shape: input names must be str, got {type(name).__name__}")
            if isinstance(dims, (str, bytes)) or not hasattr(dims, "__iter__"):
                raise TypeError(f"input_shape['{name}'] must be a sequence of dims (ints or symbol names), got "
                                f"{type(dims).__name__}")
            parts = []
            for d in dims:
                if isinstance(d, str):
                    parts.append(d)
                elif isinstance(d, numbers.Integral) and not isinstance(d, bool):
                    parts.append(str(int(d)))
                else:
                    raise TypeError(f"input_shape['{name}']: a dim must be an int or a symbol name, got "
                                    f"{type(d).__name__}")
            out.append(f"{name}:{','.join(parts)}")
        return out
    if isinstance(spec, (list, tuple)) and all(isinstance(s, str) for s in spec):
        return list(spec)
    raise TypeError("input_shape must be a str ('x:1,1,28,28'), a list of such str or a dict {name: dims}, got "
                    f"{type(spec).__name__}")


def convert(model, output, precision_mode="force_fp32", quantize="none", calib_data=None, calib_samples=256,
            calib_method="minmax", eval_data=None, input_shape=None, mix_dtype="f16", act_bits=8, optimize_level=1,
            input_scale=1.0):
    """Converts a model file (.spore, .onnx, text IR) into a deployable `output` (.spore or .onnx) in a precision
    mode and/or quantized, as `spore convert` does, and returns its report (`spore convert --json`'s object: ops per
    dtype before/after, casts, weights quantized, file sizes, the outputs' error against the source model, and the
    accuracy of both with eval_data).

    precision_mode: force_fp32 | allow_fp32_to_fp16 | allow_fp32_to_bf16 | allow_mix_precision (low dtype:
    mix_dtype, f16 | bf16). quantize: none | weight_int8 | int8 (static, needs calib_data; calib_method minmax |
    percentile | entropy, act_bits 8 or 7). calib_data: a dataset spec ("digits:FILE", "mnist:DIR",
    "fashion-mnist:DIR": its training split), a directory of .npy files, or the samples of input 0 as a NumPy array /
    spore tensor ([N, ...]); at most calib_samples are used, multiplied by input_scale. eval_data: a dataset spec
    whose test split measures the accuracy. input_shape: see --input-shape ("x:1,1,8,8", a list, or
    {"x": (1, 1, 8, 8)}). optimize_level: 0, 1 or 2.
    """
    model = _path(model, "model")
    output = _path(output, "output")
    calib_spec, calib_tensor = "", None
    if calib_data is None:
        pass
    elif isinstance(calib_data, (str, os.PathLike)):
        calib_spec = _path(calib_data, "calib_data")
    elif isinstance(calib_data, (Tensor, np.ndarray)):
        calib_tensor = _as_tensor(calib_data, "calib_data")
    else:
        raise TypeError("calib_data must be a dataset spec or directory (str), a NumPy array or a spore.Tensor, got "
                        f"{type(calib_data).__name__}")
    eval_spec = "" if eval_data is None else _str(eval_data, "eval_data")
    return _spore._convert(
        model, output, _str(precision_mode, "precision_mode"), _str(mix_dtype, "mix_dtype"), _str(quantize, "quantize"),
        calib_spec, calib_tensor, _int(calib_samples, "calib_samples", 1), _str(calib_method, "calib_method"),
        _int(act_bits, "act_bits"), eval_spec, _input_shapes(input_shape), _int(optimize_level, "optimize_level"),
        _float(input_scale, "input_scale"))


def profile(model, inputs=None, batch=None, runs=10, warmup=2, trace=None, top=None, input_shape=None, seed=0,
            train=False, lr=0.01, opt_level=1, memory_optimize_level=1, fast_conv=False):
    """Runs a model file (.spore, .onnx, text IR) under the profiler, as `spore profile` does, and returns its report
    (`spore profile --json`'s object: "kernels", "total_ms", "peak_bytes", "top" (ops by total kernel time),
    "nodes", "memory", "hints", ...).

    inputs: {name: NumPy array, spore tensor or .npy path}; inputs not given get seeded random values (seed), a
    symbolic first dim taking `batch` (default 1; giving it needs such an input). runs (--iters) profiled runs follow
    `warmup` unprofiled ones. trace: a path to write the Chrome trace JSON to (None: none). top: keep only the first
    `top` entries of report["top"] (None: every op). train: profile a training step (forward, softmax cross-entropy on
    random labels, backward, SGD with lr) instead; it takes no inputs.
    """
    model = _path(model, "model")
    files, tensors = [], {}
    if inputs is not None:
        if not isinstance(inputs, dict):
            raise TypeError(f"inputs must be a dict {{name: array, tensor or .npy path}}, got {type(inputs).__name__}")
        for name, v in inputs.items():
            if not isinstance(name, str):
                raise TypeError(f"inputs: input names must be str, got {type(name).__name__}")
            if isinstance(v, (str, os.PathLike)):
                files.append(f"{name}={_path(v, f'inputs[{name!r}]')}")
            elif isinstance(v, (Tensor, np.ndarray)):
                tensors[name] = _as_tensor(v, f"inputs[{name!r}]")
            else:
                raise TypeError(f"inputs[{name!r}] must be a NumPy array, a spore.Tensor or a .npy path, got "
                                f"{type(v).__name__}")
    if batch is not None:
        batch = _int(batch, "batch", 1)
    if top is not None:
        top = _int(top, "top", 1)
    if not isinstance(train, bool):
        raise TypeError(f"train must be a bool, got {type(train).__name__}")
    if not isinstance(fast_conv, bool):
        raise TypeError(f"fast_conv must be a bool, got {type(fast_conv).__name__}")
    report = _spore._profile(
        model, files, tensors, _input_shapes(input_shape), batch, _int(runs, "runs", 1), _int(warmup, "warmup", 0),
        _int(seed, "seed", 0), _int(opt_level, "opt_level"), _int(memory_optimize_level, "memory_optimize_level"),
        fast_conv, "" if trace is None else _path(trace, "trace"), 10 if top is None else top, train,
        _float(lr, "lr"))
    if top is not None:
        report["top"] = report["top"][:top]
    return report
