"""Layers, losses, optimizers and learning-rate schedules (MindSpore's mindspore.nn).

    class Net(spore.nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc1 = spore.nn.Dense(4, 8, activation="relu")
            self.fc2 = spore.nn.Dense(8, 2)
            self.scale = spore.Parameter(np.ones(2, np.float32))

        def construct(self, x):
            return self.fc2(self.fc1(x)) * self.scale

A Cell subclassed in Python is an engine cell whose construct calls back into Python: assigning a Cell registers it
as a sub-cell and assigning a Parameter adds a parameter (in assignment order, named after the attribute), so
`parameters_and_names()` gives dotted names ("fc1.weight") as in C++. The same cell runs eagerly when called and is
traced into one compiled plan per step by spore.train.Model in graph mode (its construct then sees symbolic tensors).

Defaults follow spore's C++ API, which follows PyTorch: Dense and Conv2d have a bias, and Conv2d pads `padding` on
every side unless pad_mode is "same" or "valid" (MindSpore's Conv2d defaults to pad_mode="same", has_bias=False:
pass them explicitly when porting).
"""
from . import _spore
from ._spore import (Cell, Parameter, Dense, Conv2d, Conv2dTranspose, ReLU, GELU, SiLU, Tanh, Sigmoid, Softmax,  # noqa: F401
                     MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Flatten, Dropout, BatchNorm1d, BatchNorm2d, LayerNorm,
                     RMSNorm, Embedding, LSTM, GRU, MultiHeadAttention, TransformerEncoderLayer, LossBase,
                     SoftmaxCrossEntropyWithLogits, MSELoss, L1Loss, SmoothL1Loss, BCEWithLogitsLoss, NLLLoss,
                     LrSchedule, Optimizer)


class CellList(Cell):
    """Cells registered as "0", "1", ... without a forward pass of their own: the parent decides how to call them."""

    def __init__(self, cells=()):
        super().__init__()
        self._n = 0
        for c in cells:
            self.append(c)

    def append(self, cell):
        if not isinstance(cell, Cell):
            raise TypeError(f"{type(self).__name__}: expected a spore.nn.Cell, got {type(cell).__name__}")
        setattr(self, str(self._n), cell)
        self._n += 1
        return self

    def __len__(self):
        return self._n

    def __iter__(self):
        return (getattr(self, str(i)) for i in range(self._n))

    def __getitem__(self, i):
        if not -self._n <= i < self._n:
            raise IndexError(f"{type(self).__name__} index {i} out of range ({self._n} cells)")
        return getattr(self, str(i % self._n))


class SequentialCell(CellList):
    """Cells applied in order (registered as "0", "1", ...)."""

    def __init__(self, *cells):
        super().__init__(tuple(cells[0]) if len(cells) == 1 and isinstance(cells[0], (list, tuple)) else cells)

    def construct(self, x):
        for cell in self:
            x = cell(x)
        return x


# ---- learning-rate schedules (the lr per 0-based step) --------------------------------------------------------

def constant_lr(lr):
    return _spore._constant_lr(float(lr))


def step_lr(lr, step_size, gamma):
    """lr * gamma ** (step // step_size)."""
    return _spore._step_lr(float(lr), int(step_size), float(gamma))


def exponential_decay_lr(lr, gamma):
    """lr * gamma ** step."""
    return _spore._exponential_lr(float(lr), float(gamma))


def cosine_decay_lr(lr, total_steps, min_lr=0.0):
    """Cosine from lr to min_lr over total_steps."""
    return _spore._cosine_lr(float(lr), int(total_steps), float(min_lr))


def warmup_lr(warmup_steps, after):
    """Linear warm-up from 0 over warmup_steps, then `after` (a schedule or a number)."""
    return _spore._warmup_lr(int(warmup_steps), _as_schedule(after, "warmup_lr"))


class _FunctionSchedule(LrSchedule):
    def __init__(self, fn, what):
        super().__init__()
        self._fn = fn
        self._what = what

    def lr_at(self, step):
        return float(self._fn(step))

    def describe(self):
        return self._what


def _as_schedule(lr, what):
    if isinstance(lr, LrSchedule):
        return lr
    if isinstance(lr, bool):
        raise TypeError(f"{what}: learning_rate must be a number, a list of numbers, a schedule or a function")
    if isinstance(lr, (int, float)):
        return constant_lr(lr)
    if isinstance(lr, (list, tuple)):  # MindSpore's dynamic lr: one value per step, the last one after
        values = [float(v) for v in lr]
        if not values:
            raise ValueError(f"{what}: the learning-rate list is empty")
        return _FunctionSchedule(lambda s: values[min(s, len(values) - 1)], f"list of {len(values)} rates")
    if callable(lr):
        return _FunctionSchedule(lr, getattr(lr, "__name__", "python function"))
    raise TypeError(f"{what}: learning_rate must be a number, a list of numbers, a schedule or a function, got "
                    f"{type(lr).__name__}")


# ---- optimizers (functional updates traced into the training step) -------------------------------------------

def _names(params, what):
    if isinstance(params, Cell):
        params = params.trainable_params()
    names = []
    for i, p in enumerate(params):
        if isinstance(p, dict):
            raise TypeError(f"{what}: parameter groups (dicts) are not supported; pass net.trainable_params()")
        if not isinstance(p, Parameter):
            raise TypeError(f"{what}: params[{i}] is a {type(p).__name__}, not a spore.Parameter "
                            "(pass net.trainable_params())")
        names.append(p.name)
    return names


def _optimizer(kind, what, params, learning_rate, **options):
    sched = _as_schedule(learning_rate, what)
    options["learning_rate"] = sched.lr_at(0)
    opt = _spore._make_optimizer(kind, _names(params, what), options)
    opt.set_schedule(sched)
    opt._schedule = sched  # a schedule written in Python lives as long as the optimizer using it
    return opt


def SGD(params, learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    """Stochastic gradient descent (momentum 0: no state)."""
    return _optimizer("sgd", "SGD", params, learning_rate, momentum=momentum, dampening=dampening,
                      weight_decay=weight_decay, nesterov=nesterov)


def Momentum(params, learning_rate, momentum=0.9, weight_decay=0.0, use_nesterov=False):
    """SGD with momentum (MindSpore's nn.Momentum)."""
    return _optimizer("momentum", "Momentum", params, learning_rate, momentum=momentum, weight_decay=weight_decay,
                      nesterov=use_nesterov)


def Adam(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0):
    """Adam; weight_decay is L2 added to the gradient."""
    return _optimizer("adam", "Adam", params, learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                      weight_decay=weight_decay)


def AdamWeightDecay(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0):
    """AdamW: weight decay decoupled from the gradient (MindSpore's nn.AdamWeightDecay)."""
    return _optimizer("adamw", "AdamWeightDecay", params, learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                      weight_decay=weight_decay)


AdamW = AdamWeightDecay

__all__ = ["Cell", "Parameter", "SequentialCell", "CellList", "Dense", "Conv2d", "Conv2dTranspose", "ReLU", "GELU",
           "SiLU", "Tanh", "Sigmoid", "Softmax", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Flatten", "Dropout",
           "BatchNorm1d", "BatchNorm2d", "LayerNorm", "RMSNorm", "Embedding", "LSTM", "GRU", "MultiHeadAttention",
           "TransformerEncoderLayer", "LossBase", "SoftmaxCrossEntropyWithLogits", "MSELoss", "L1Loss",
           "SmoothL1Loss", "BCEWithLogitsLoss", "NLLLoss", "LrSchedule", "Optimizer", "SGD", "Momentum", "Adam",
           "AdamWeightDecay", "AdamW", "constant_lr", "step_lr", "exponential_decay_lr", "cosine_decay_lr",
           "warmup_lr"]
