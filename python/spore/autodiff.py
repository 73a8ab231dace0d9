"""Gradients from Python, as MindSpore's ops.grad / ops.value_and_grad: reverse mode over spore's ops, each op's
gradient rule being its OpDef's (the same rules training uses)."""
from ._spore import GradientTape, Tensor
from ._tensor import tensor


def _positions(grad_position, n):
    pos = (grad_position,) if isinstance(grad_position, int) else tuple(grad_position)
    for p in pos:
        if not isinstance(p, int) or not -n <= p < n:
            raise ValueError(f"grad_position {p!r}: the function was given {n} arguments")
    return tuple(p % n for p in pos), isinstance(grad_position, int)


def value_and_grad(fn, grad_position=0):
    """A function returning (fn(*args), gradients of fn's output w.r.t. the arguments at grad_position): one tensor
    for an int position, a tuple for a tuple of positions. A non-scalar output is summed (a seed of ones)."""

    def wrapped(*args):
        pos, single = _positions(grad_position, len(args))
        args = [a if isinstance(a, Tensor) or i not in pos else tensor(a) for i, a in enumerate(args)]
        with GradientTape() as tape:
            watched = [tape.watch(a) if i in pos else a for i, a in enumerate(args)]
            out = fn(*watched)
            if not isinstance(out, Tensor):
                raise TypeError(f"value_and_grad: the function returned {type(out).__name__}, not a spore.Tensor")
            grads = tape.gradient(out, [watched[i] for i in pos])
        return out, (grads[0] if single else tuple(grads))

    wrapped.__name__ = f"value_and_grad({getattr(fn, '__name__', 'fn')})"
    return wrapped


def grad(fn, grad_position=0):
    """A function returning only the gradients of value_and_grad(fn, grad_position)."""
    vg = value_and_grad(fn, grad_position)

    def wrapped(*args):
        return vg(*args)[1]

    wrapped.__name__ = f"grad({getattr(fn, '__name__', 'fn')})"
    return wrapped
