"""One function per op of spore's registry, generated at import from the op definitions (the one place each op is
defined): positional tensor inputs as the op names them, attributes as keyword arguments with the schema's
defaults, the op's documentation as the docstring. help(spore.ops.conv2d) shows its signature and attributes.

Each call runs the op eagerly on the CPU backend (the GIL is released while it runs) and returns a Tensor, or a
tuple of Tensors for ops with several outputs. Wrong types, shapes or attribute values raise spore.Error
subclasses naming the op and what was wrong.
"""
import inspect
import keyword
import sys

from . import _spore
from ._spore import Tensor
from ._tensor import _operand

_KIND_HINT = {"int": "int", "float": "float", "bool": "bool", "string": "str", "dtype": "spore.dtype",
              "int list": "list[int]", "float list": "list[float]"}
# Ops that exist for graphs and passes (placeholders, fused forms, gradients), not for calling.
_INTERNAL = {"input", "constant"}


def _make(d):
    name = d["name"]
    attr_set = {a[0] for a in d["attrs"]}
    inputs = []
    for i, n in enumerate(d["inputs"]):
        if not n.isidentifier() or keyword.iskeyword(n):
            n = f"x{i}"
        while n in attr_set or n in inputs:  # an input named like an attribute (conv2d_fused's residual)
            n = n + "_input"
        inputs.append(n)
    lo, hi = d["min_inputs"], d["max_inputs"]
    variadic = hi < 0
    params = []
    if variadic:
        params.append(inspect.Parameter("inputs", inspect.Parameter.VAR_POSITIONAL))
    else:
        names = inputs + [f"x{i}" for i in range(len(inputs), hi)]
        for i, n in enumerate(names[:hi]):
            default = inspect.Parameter.empty if i < lo else None
            params.append(inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                                            annotation="Tensor"))
    attr_names = []
    for (a, kind, default, has_default, choices) in d["attrs"]:
        attr_names.append(a)
        params.append(inspect.Parameter(a, inspect.Parameter.KEYWORD_ONLY,
                                        default=default if has_default else inspect.Parameter.empty,
                                        annotation=_KIND_HINT.get(kind, kind)))
    sig = inspect.Signature(params)
    n_pos = 0 if variadic else hi
    attr_keys = frozenset(attr_names)
    required = frozenset(a[0] for a in d["attrs"] if not a[3])  # attributes without a default

    def fn(*args, **kwargs):
        # (Positional calls of ops without required attributes never get here first: the C callable made below runs
        # them and hands over only keyword calls and arguments it declines.)
        # Fast path: tensors as positional inputs (as many as the op takes), only attributes as keywords and every
        # required attribute given. This is exactly what sig.bind accepts and the general path below produces (the
        # inputs in order, the given attributes), without building a BoundArguments, which was most of a small op's
        # Python cost. Anything else takes the general path (and its error messages).
        if (variadic or lo <= len(args) <= hi) and (
                (not kwargs and not required) or (attr_keys.issuperset(kwargs) and required.issubset(kwargs))):
            for t in args:
                if not isinstance(t, Tensor):
                    break
            else:
                out = _spore._op_call(name, list(args), kwargs)
                return out[0] if len(out) == 1 else tuple(out)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"spore.ops.{name}{sig}: {e}") from None
        if variadic:
            tensors = list(bound.arguments.get("inputs", ()))
        else:
            tensors = [bound.arguments.get(p.name) for p in params[:n_pos]]
            while tensors and tensors[-1] is None:
                tensors.pop()
        like = next((t for t in tensors if isinstance(t, Tensor)), None)
        for i, t in enumerate(tensors):
            if like is not None and isinstance(t, (int, float)) and not isinstance(t, bool):
                tensors[i] = t = _operand(t, like)  # a Python number takes the tensors' dtype, as with operators
            if not isinstance(t, Tensor):
                what = params[i].name if not variadic else f"inputs[{i}]"
                raise TypeError(f"spore.ops.{name}: argument '{what}' must be a spore.Tensor, got "
                                f"{type(t).__name__}")
        attrs = {a: bound.arguments[a] for a in attr_names if a in bound.arguments}
        out = _spore._op_call(name, tensors, attrs)
        return out[0] if len(out) == 1 else tuple(out)

    lines = [d["doc"] or f"The {name} op.", ""]
    if d["attrs"]:
        lines.append("Attributes:")
        for (a, kind, default, has_default, choices) in d["attrs"]:
            extra = f" (one of {', '.join(choices)})" if choices else ""
            dflt = f", default {default!r}" if has_default else ", required"
            lines.append(f"    {a}: {_KIND_HINT.get(kind, kind)}{dflt}{extra}")
    # Ops without required attributes become C callables: a positional call of tensors (and Python numbers) runs the
    # op with no Python frame; keywords and anything C++ declines go to fn.
    out = fn if required else _spore._op_function(name, fn)
    for f in {fn, out}:
        f.__name__ = name
        f.__qualname__ = name
        f.__doc__ = "\n".join(lines)
        f.__signature__ = sig
        f.__module__ = __name__
    if out is not fn:
        out.__wrapped__ = fn
    return out


names = []
_module = sys.modules[__name__]
for _d in _spore._op_defs():
    if _d["name"] in _INTERNAL or not _d["name"].isidentifier() or keyword.iskeyword(_d["name"]):
        continue
    setattr(_module, _d["name"], _make(_d))
    names.append(_d["name"])
__all__ = list(names)
