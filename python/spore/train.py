"""Training (MindSpore's mindspore.train): Model(network, loss_fn, optimizer, metrics).train(epoch, dataset,
callbacks) / .eval / .predict, and the callbacks.

    net = MyNet()
    loss = spore.nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = spore.nn.Momentum(net.trainable_params(), learning_rate=0.05)
    model = spore.train.Model(net, loss, opt, metrics={"accuracy"})
    model.train(3, train_ds, callbacks=[spore.train.LossMonitor(50)])
    print(model.eval(test_ds))        # {"accuracy": ..., "loss": ..., "samples": ...}

The model is the engine's train::Model: in PyNative mode each step runs eagerly; in graph mode (the default under
spore.set_context(mode=spore.GRAPH_MODE), or mode="graph") the forward, backward and optimizer update of a step are
traced once into one compiled plan whose inputs include the parameters, so every later step replays it. A Python
construct runs only while tracing then. Both modes give the same bits. Ctrl-C stops training between steps with
KeyboardInterrupt, leaving the model at a step boundary (it can be evaluated, saved or trained on).
"""
from . import _spore
from ._spore import Callback as _CallbackBase, RunContext, LossMonitor, TimeMonitor, ModelCheckpoint, EarlyStopping  # noqa: F401
from ._spore import ProgressBar  # noqa: F401
from ._spore import Tensor
from ._tensor import tensor

_METRIC_ALIASES = {"acc": "accuracy", "accuracy": "accuracy", "loss": "loss", "precision": "precision",
                   "recall": "recall", "f1": "f1"}


class Callback(_CallbackBase):
    """Subclass and define any of on_train_begin, on_epoch_begin, on_step_end, on_epoch_end, on_train_end (or
    MindSpore 2's on_train_epoch_begin, on_train_step_end, on_train_epoch_end); each takes a RunContext. Set
    run_context.stop = True (or call request_stop()) to end training after the current step."""

    def __init__(self):
        if not self.__dict__.get("_spore_ready"):
            self.__dict__["_spore_ready"] = True
            _CallbackBase.__init__(self)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return

        def __init__(self, *args, **kw):  # the engine half first, so a subclass need not call super().__init__()
            Callback.__init__(self)
            init(self, *args, **kw)

        __init__.__doc__ = init.__doc__
        cls.__init__ = __init__


def _metric_names(metrics):
    if metrics is None:
        return []
    if isinstance(metrics, str):
        metrics = [metrics]
    out = []
    for m in metrics:
        if not isinstance(m, str):
            raise TypeError(f"Model: metrics are names ('accuracy', 'loss', 'top5_accuracy', 'precision', 'recall', "
                            f"'f1'), got {type(m).__name__}")
        key = m.lower()
        if key.startswith("top") and key.endswith("_accuracy"):
            out.append(key)
        elif key in _METRIC_ALIASES:
            out.append(_METRIC_ALIASES[key])
        else:
            raise ValueError(f"Model: unknown metric '{m}' (accuracy, loss, top<k>_accuracy, precision, recall, f1)")
    return sorted(set(out), key=out.index)


def _as_tensor(x, what):
    if isinstance(x, Tensor):
        return x
    if x is None:
        raise TypeError(f"{what}: got None, expected a tensor or an array")
    try:
        return tensor(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what}: expected a tensor or an array, got {type(x).__name__}") from e


class FixedLossScaleManager:
    """MindSpore's: the loss is multiplied by loss_scale before backward and the gradients divided by it; with
    drop_overflow_update a step whose gradients overflow (inf or nan) is skipped."""

    def __init__(self, loss_scale=128.0, drop_overflow_update=True):
        self.options = {"kind": "fixed", "scale": float(loss_scale), "drop_overflow_update": bool(drop_overflow_update)}


class DynamicLossScaleManager:
    """MindSpore's: starts at init_loss_scale; an overflow skips the step and divides the scale by scale_factor,
    scale_window good steps in a row multiply it."""

    def __init__(self, init_loss_scale=2 ** 24, scale_factor=2, scale_window=2000):
        self.options = {"kind": "dynamic", "scale": float(init_loss_scale), "factor": float(scale_factor),
                        "window": int(scale_window)}


class Model:
    """network + loss_fn (a loss cell or a function (logits, labels) -> scalar tensor) + optimizer, trained and
    evaluated over spore.dataset datasets. mode: "graph" or "pynative" (default: the context's mode).
    grad_accumulation N averages N micro-batches per optimizer step; clip_norm > 0 clips to that global norm.
    amp_level "O0".."O3" with amp_dtype (spore.bfloat16 / spore.float16) trains in mixed precision with f32 master
    weights; loss_scale_manager (FixedLossScaleManager / DynamicLossScaleManager) scales the loss."""

    def __init__(self, network, loss_fn=None, optimizer=None, metrics=None, mode=None, grad_accumulation=1,
                 clip_norm=0.0, seed=0, amp_level="O0", amp_dtype=None, loss_scale_manager=None):
        from .context import get_context
        from .nn import Cell
        if not isinstance(network, Cell):
            raise TypeError(f"Model: network must be a spore.nn.Cell, got {type(network).__name__}")
        if mode is None:
            mode = get_context("mode_name")
        if mode not in ("graph", "pynative"):
            raise ValueError(f"Model: mode {mode!r} (expected 'graph' or 'pynative')")
        if isinstance(grad_accumulation, bool) or not isinstance(grad_accumulation, int) or grad_accumulation < 1:
            raise ValueError(f"Model: grad_accumulation {grad_accumulation!r} (expected an int >= 1)")
        self.network = network
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.metrics = _metric_names(metrics)
        self._mode = mode
        self._m = None
        if loss_fn is None and optimizer is None:
            return  # an inference-only model: predict() runs the network
        if loss_fn is None or optimizer is None:
            raise TypeError("Model: training needs both loss_fn and optimizer (or give neither for predict only)")
        if loss_scale_manager is not None and not isinstance(loss_scale_manager,
                                                             (FixedLossScaleManager, DynamicLossScaleManager)):
            raise TypeError("Model: loss_scale_manager must be a FixedLossScaleManager or a DynamicLossScaleManager, "
                            f"got {type(loss_scale_manager).__name__}")
        if amp_dtype is None:
            amp_dtype = _spore.dtype.bfloat16
        self._m = _spore._TrainModel(network, loss_fn, optimizer, self.metrics, mode, grad_accumulation,
                                     float(clip_norm), int(seed), str(amp_level), amp_dtype,
                                     loss_scale_manager.options if loss_scale_manager is not None else {})

    def _need(self, what):
        if self._m is None:
            raise RuntimeError(f"Model.{what}: this model has no loss_fn and optimizer (it can only predict)")
        return self._m

    @property
    def mode(self):
        return self._mode

    def train(self, epoch, train_dataset, callbacks=None, valid_dataset=None):
        """Runs `epoch` more epochs. valid_dataset, if given, is evaluated after each epoch (callbacks see
        "eval_<metric>" in run_context.metrics)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise TypeError(f"Model.train: epoch must be an int, got {type(epoch).__name__}")
        self._need("train").train(epoch, train_dataset, callbacks, valid_dataset)

    def train_step(self, x, y):
        """One batch: forward, backward and an optimizer step (every grad_accumulation batches). Returns the loss."""
        return self._need("train_step").train_step(_as_tensor(x, "train_step x"), _as_tensor(y, "train_step y"))

    def eval(self, valid_dataset):
        """The metrics over a dataset, plus "loss" and "samples"."""
        return self._need("eval").eval(valid_dataset)

    def predict(self, x):
        """The network's output for x in inference mode (graph mode: a compiled plan per input signature)."""
        x = _as_tensor(x, "predict")
        if self._m is not None:
            return self._m.predict(x)
        was = self.network.training
        self.network.set_train(False)
        try:
            return self.network(x)
        finally:
            self.network.set_train(was)

    def save_checkpoint(self, path):
        """Parameters, buffers and optimizer state, with the step and epoch (resume with load_checkpoint)."""
        self._need("save_checkpoint").save_checkpoint(str(path))

    def load_checkpoint(self, path):
        self._need("load_checkpoint").load_checkpoint(str(path))

    @property
    def loss_scale(self):
        """The loss scale the next step uses (1 without a loss_scale_manager)."""
        return self._m.loss_scale if self._m is not None else 1.0

    @property
    def overflow_steps(self):
        """Steps skipped because their gradients overflowed."""
        return self._m.overflow_steps if self._m is not None else 0

    @property
    def global_step(self):
        return self._m.global_step if self._m is not None else 0

    @property
    def epoch(self):
        return self._m.epoch if self._m is not None else 0


__all__ = ["Model", "FixedLossScaleManager", "DynamicLossScaleManager", "Callback", "RunContext", "LossMonitor", "TimeMonitor", "ModelCheckpoint", "EarlyStopping",
           "ProgressBar"]
