"""spore.nn / spore.train / spore.dataset: Cells written in Python train through the engine's train::Model, with
the same loss bits as `spore train` in graph and PyNative mode; export, checkpoints, callbacks, Ctrl-C, bad input."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import spore
from spore import nn


class SimpleNet(nn.Cell):
    """The CLI's simplenet, written in Python: conv 3x3 (64, same) -> relu -> max pool 2 -> flatten -> dense."""

    def __init__(self, c, h, w, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(c, 64, 3, pad_mode="same")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(64 * (h // 2) * (w // 2), classes)

    def construct(self, x):
        return self.fc(self.flatten(self.pool(self.relu(self.conv(x)))))


class StepLosses(spore.train.Callback):
    def __init__(self):
        self.losses = []

    def on_step_end(self, run_context):
        self.losses.append(run_context.loss)


def train_simplenet(digits, mode, seed=7, epochs=1):
    train, test = spore.dataset.load(digits)
    spore.set_seed(seed)
    net = SimpleNet(1, 8, 8)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.05)
    model = spore.Model(net, loss, opt, metrics={"accuracy"}, mode=mode, seed=seed)
    rec = StepLosses()
    model.train(epochs, train.shuffle(seed).batch(16), callbacks=[rec])
    return model, rec.losses, model.eval(test.batch(256))


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_python_simplenet_gives_the_cli_loss_bits(spore_cli, digits, mode):
    model, losses, ev = train_simplenet(digits, mode, epochs=2)
    out = subprocess.run([spore_cli, "train", "--model", "simplenet", "--dataset", digits, "--epochs", "2", "--batch",
                          "16", "--lr", "0.05", "--mode", mode, "--seed", "7", "--json", "--log-every", "1"],
                         check=True, capture_output=True, text=True).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    cli = [d["loss"] for d in lines if "step" in d]
    assert len(cli) == len(losses) == 180
    assert losses == cli  # bit for bit: the same engine step, the same init stream and shuffles
    final = lines[-1]
    assert ev["accuracy"] == final["accuracy"] and ev["loss"] == final["loss"]
    assert model.global_step == 180 and model.epoch == 2


def test_graph_and_pynative_agree_with_batchnorm_dropout_and_a_python_parameter():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3, 6, 6)).astype(np.float32)
    y = rng.integers(0, 4, 64).astype(np.int32)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.drop = nn.Dropout(0.25)
            self.head = nn.SequentialCell(nn.Flatten(), nn.Dense(8 * 36, 4))
            self.temperature = spore.Parameter(np.full((1,), 0.5, np.float32))

        def construct(self, x):
            h = spore.ops.relu(self.bn(self.conv(x)))
            return self.head(self.drop(h)) * self.temperature

    results = []
    for mode in ("graph", "pynative"):
        spore.set_seed(3)
        net = Net()
        names = [n for n, _ in net.parameters_and_names()]
        # a cell's own parameters first, then its sub-cells' in registration order (as in C++)
        assert names == ["temperature", "conv.weight", "conv.bias", "bn.gamma", "bn.beta", "bn.moving_mean",
                         "bn.moving_variance", "head.1.weight", "head.1.bias"]
        opt = nn.Adam(net.trainable_params(), learning_rate=1e-2)
        model = spore.Model(net, nn.SoftmaxCrossEntropyWithLogits(True, "mean"), opt, mode=mode)
        rec = StepLosses()
        model.train(2, spore.dataset.NumpySlicesDataset((x, y), shuffle=True, seed=1).batch(16), callbacks=[rec])
        params = {n: p.numpy().copy() for n, p in net.parameters_and_names()}
        results.append((rec.losses, params))
    (l1, p1), (l2, p2) = results
    assert l1 == l2 and len(l1) == 8
    for n in p1:
        np.testing.assert_array_equal(p1[n], p2[n], err_msg=n)
    assert p1["temperature"][0] != 0.5  # the Python parameter trained
    assert not np.array_equal(p1["bn.moving_mean"], np.zeros(8, np.float32))  # running stats updated


def test_parameters_attributes_and_errors():
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = spore.Parameter(np.ones((2, 3), np.float32), name="w")
            self.fc = nn.Dense(3, 2)
            self.note = "plain attributes stay attributes"

        def construct(self, x):
            return self.fc(x) + spore.ops.reduce_sum(self.w)

    net = Net()
    assert isinstance(net.w, spore.Tensor) and net.w.shape == (2, 3)
    assert net.note.startswith("plain")
    ps = dict(net.parameters_and_names())
    assert list(ps) == ["w", "fc.weight", "fc.bias"]
    ps["w"].set_data(np.full((2, 3), 2.0, np.float32))
    assert net.w.numpy().sum() == 12.0
    net.w = np.zeros((2, 3), np.float32)  # assigning a tensor to a parameter's name sets its data
    assert net.w.numpy().sum() == 0.0
    with pytest.raises(spore.Error, match="set_data"):
        ps["w"].set_data(np.zeros((3, 3), np.float32))
    with pytest.raises(spore.Error, match="cannot be replaced"):
        net.fc = nn.Dense(3, 2)
    with pytest.raises(spore.Error, match="floating"):
        spore.Parameter(np.ones(3, np.int32))
    assert spore.Parameter(np.ones(3, np.int32), requires_grad=False).requires_grad is False
    assert [p.name for p in net.trainable_params()] == ["w", "fc.weight", "fc.bias"]
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        net.missing
    out = net(np.ones((4, 3), np.float32))
    assert out.shape == (4, 2)

    class NoSuper(nn.Cell):
        def __init__(self):
            self.fc = nn.Dense(2, 2)

    with pytest.raises(spore.Error, match="super\\(\\).__init__"):
        NoSuper()


def test_bad_input_raises_python_errors():
    net = SimpleNet(1, 8, 8)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.1)
    with pytest.raises(spore.Error):
        nn.Dense(3, 2)(np.ones((4, 5), np.float32))  # wrong feature count
    with pytest.raises(spore.Error, match="got None"):
        nn.Dense(3, 2)(None)
    with pytest.raises(TypeError):
        nn.Dense("three", 2)
    with pytest.raises(TypeError, match="spore.nn.Cell"):
        spore.Model("net", loss, opt)
    with pytest.raises(TypeError, match="both loss_fn and optimizer"):
        spore.Model(net, loss)
    with pytest.raises(ValueError, match="unknown metric"):
        spore.Model(net, loss, opt, metrics=["bleu"])
    with pytest.raises(TypeError, match="spore.Parameter"):
        nn.Momentum([np.ones(3)], learning_rate=0.1)
    with pytest.raises(spore.Error, match="learning_rate"):
        nn.SGD(net.trainable_params(), learning_rate=-1.0)
    model = spore.Model(net, loss, opt)
    with pytest.raises(spore.Error, match="spore.dataset"):
        model.train(1, np.ones((4, 1, 8, 8), np.float32))
    with pytest.raises(spore.Error, match="epoch 0"):
        model.train(0, spore.dataset.NumpySlicesDataset((np.ones((4, 1, 8, 8), np.float32), np.zeros(4, np.int32))))
    with pytest.raises(spore.Error):  # labels of the wrong length
        model.train_step(np.ones((4, 1, 8, 8), np.float32), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="4 and 3 samples"):
        spore.dataset.NumpySlicesDataset((np.ones((4, 2), np.float32), np.zeros(3, np.int32)))

    class TupleNet(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(64, 10)

        def construct(self, x):
            return self.fc(spore.ops.flatten(x)), x

    bad = TupleNet()
    m2 = spore.Model(bad, loss, nn.SGD(bad.trainable_params(), 0.1))
    with pytest.raises(spore.Error, match="returned tuple, not a spore.Tensor"):
        m2.train_step(np.ones((2, 1, 8, 8), np.float32), np.zeros(2, np.int32))

    class Raises(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(64, 10)

        def construct(self, x):
            raise RuntimeError("from construct")

    r = Raises()
    m3 = spore.Model(r, loss, nn.SGD(r.trainable_params(), 0.1), mode="graph")
    with pytest.raises(RuntimeError, match="from construct"):
        m3.train_step(np.ones((2, 1, 8, 8), np.float32), np.zeros(2, np.int32))


def test_callbacks_schedules_and_stopping(digits):
    train, _ = spore.dataset.load(digits, limit_train=160)
    spore.set_seed(1)
    net = SimpleNet(1, 8, 8)
    seen = []

    class MsStyle(spore.train.Callback):  # MindSpore 2's hook names, no super().__init__()
        def __init__(self):
            self.epochs = 0

        def on_train_epoch_end(self, run_context):
            self.epochs += 1

        def on_train_step_end(self, run_context):
            cb = run_context.original_args()
            seen.append((cb.cur_epoch_num, cb.cur_step_num, run_context.lr))
            if cb.cur_step_num == 15:
                run_context.request_stop()

    opt = nn.Momentum(net.trainable_params(), learning_rate=lambda step: 0.01 * (step + 1))
    model = spore.Model(net, nn.SoftmaxCrossEntropyWithLogits(True, "mean"), opt, mode="graph")
    ms = MsStyle()
    model.train(5, train.batch(16), callbacks=[ms, spore.train.LossMonitor(100)])
    assert model.global_step == 15 and len(seen) == 15
    assert seen[0] == (1, 1, pytest.approx(0.01)) and seen[12] == (2, 13, pytest.approx(0.13))
    assert ms.epochs == 1  # epoch 1 ended; an epoch stopped part-way does not end (nor count as done)
    assert model.epoch == 1


def test_export_runs_in_the_cli_and_loads_back(tmp_path, spore_cli, digits):
    model, _, _ = train_simplenet(digits, "graph")
    x = np.random.default_rng(0).random((5, 1, 8, 8), dtype=np.float32)
    want = model.predict(x).numpy()
    for fmt, ext in (("ONNX", ".onnx"), ("SPORE", ".spore")):
        s = spore.export(model.network, (("batch", 1, 8, 8), spore.float32), file_name=tmp_path / "net",
                         file_format=fmt)
        assert s["path"].endswith(ext) and s["params"] == 64 * 9 + 64 + 1024 * 10 + 10
        got = spore.load(s["path"])(x).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.save(tmp_path / "x.npy", x)
        subprocess.run([spore_cli, "run", s["path"], "--input", f"x={tmp_path / 'x.npy'}", "--output",
                        str(tmp_path / fmt)], check=True, capture_output=True, text=True)
        np.testing.assert_allclose(np.load(tmp_path / fmt / "logits.npy"), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="file_format"):
        spore.export(model.network, x, file_name=tmp_path / "n", file_format="MINDIR")


def test_checkpoints_round_trip(tmp_path, digits):
    model, _, ev = train_simplenet(digits, "pynative")
    model.save_checkpoint(tmp_path / "m.safetensors")
    spore.set_seed(99)
    fresh = SimpleNet(1, 8, 8)
    m2 = spore.Model(fresh, nn.SoftmaxCrossEntropyWithLogits(True, "mean"),
                     nn.Momentum(fresh.trainable_params(), 0.05), metrics=["accuracy"])
    m2.load_checkpoint(tmp_path / "m.safetensors")
    assert m2.global_step == model.global_step
    _, test = spore.dataset.load(digits)
    assert m2.eval(test.batch(256)) == ev
    spore.save_checkpoint(fresh, tmp_path / "w.safetensors")
    other = SimpleNet(1, 8, 8)
    spore.load_checkpoint(tmp_path / "w.safetensors", other)
    np.testing.assert_array_equal(dict(other.parameters_and_names())["fc.weight"].numpy(),
                                  dict(fresh.parameters_and_names())["fc.weight"].numpy())
    with pytest.raises(spore.Error):
        spore.load_checkpoint(tmp_path / "w.safetensors", nn.Dense(3, 2))


def test_datasets_from_numpy_and_generators():
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    y = np.arange(10, dtype=np.int32)
    ds = spore.dataset.NumpySlicesDataset((x, y)).batch(4)
    batches = list(ds)
    assert len(ds) == 3 and [b[0].shape[0] for b in batches] == [4, 4, 2]
    np.testing.assert_array_equal(batches[1][1].numpy(), [4, 5, 6, 7])
    gen = spore.dataset.GeneratorDataset(lambda: ((x[i], y[i]) for i in range(10))).batch(5)
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in gen]), x)
    s1 = [b[1].numpy().tolist() for b in spore.dataset.NumpySlicesDataset((x, y), shuffle=True, seed=5).batch(10)]
    s2 = [b[1].numpy().tolist() for b in spore.dataset.NumpySlicesDataset((x, y), shuffle=True, seed=5).batch(10)]
    assert s1 == s2 and sorted(s1[0]) == list(range(10)) and s1[0] != list(range(10))
    epochs = list(spore.dataset.NumpySlicesDataset((x, y), shuffle=True, seed=5).batch(10).create_tuple_iterator(2))
    assert epochs[0][1].numpy().tolist() != epochs[1][1].numpy().tolist()  # reshuffled each epoch


def test_set_context_mode_chooses_the_models_mode():
    net = SimpleNet(1, 8, 8)
    opt = nn.SGD(net.trainable_params(), 0.1)
    loss = nn.SoftmaxCrossEntropyWithLogits(True, "mean")
    try:
        spore.set_context(mode=spore.GRAPH_MODE, memory_optimize_level="O2", max_device_memory="1GiB")
        assert spore.get_context("mode") == spore.GRAPH_MODE and spore.get_context("memory_optimize_level") == 2
        assert spore.get_context("max_device_memory") == 1 << 30
        spore.set_context(max_device_memory="2.5GB")  # the CLI's units: GB is 10^9, GiB 2^30
        assert spore.get_context("max_device_memory") == 2_500_000_000
        with pytest.raises(ValueError, match="powers of 1000"):
            spore.set_context(max_device_memory="3 parsecs")
        assert spore.Model(net, loss, opt).mode == "graph"
        spore.set_context(mode=spore.PYNATIVE_MODE)
        assert spore.Model(net, loss, opt).mode == "pynative"
    finally:
        spore.set_context(mode=spore.PYNATIVE_MODE, memory_optimize_level=1, max_device_memory=0)
    with pytest.raises(ValueError):
        spore.set_context(mode=5)
    with pytest.raises(ValueError):
        spore.set_context(device_target="Ascend")
    with pytest.raises(ValueError):
        spore.get_context("nope")


def test_ctrl_c_stops_training_between_steps(tmp_path, digits):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, threading, sys
        import spore
        from spore import nn
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from test_nn_train import SimpleNet
        train, test = spore.dataset.load({digits!r})
        net = SimpleNet(1, 8, 8)
        model = spore.Model(net, nn.SoftmaxCrossEntropyWithLogits(True, "mean"),
                            nn.Momentum(net.trainable_params(), 0.05), metrics=["accuracy"], mode="graph")
        model.train(1, train.batch(16))  # compiles the step: from here no Python runs inside train()
        # SIGINT from another thread while the engine runs without the GIL and no Python callback runs: only the
        # signal check between steps can turn it into KeyboardInterrupt (1000 epochs would take minutes)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            model.train(1000, train.batch(16))
            print("finished")
        except KeyboardInterrupt:
            print("interrupted at", model.global_step, model.eval(test.batch(256))["samples"])
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env=os.environ)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    assert words[0] == "interrupted", out.stdout
    assert 90 < int(words[2]) < 1001 * 90 and float(words[3]) == 360.0


def test_jit_of_a_cell_sees_parameter_updates_without_recompiling(digits):
    model, _, _ = train_simplenet(digits, "pynative")
    net = model.network.set_train(False)
    f = spore.jit(net)
    x = np.random.default_rng(2).random((4, 1, 8, 8), dtype=np.float32)
    np.testing.assert_array_equal(f(x).numpy(), net(x).numpy())
    fc_w = dict(net.parameters_and_names())["fc.weight"]
    fc_w.set_data(fc_w.numpy() * 0.5)
    np.testing.assert_array_equal(f(x).numpy(), net(x).numpy())  # the new weights, same plan
    assert f.cache_size == 1
    f(np.random.default_rng(3).random((2, 1, 8, 8), dtype=np.float32))
    assert f.cache_size == 2  # one plan per input signature
    with pytest.raises(ValueError, match="training mode"):
        spore.jit(SimpleNet(1, 8, 8).set_train(True))


def test_mixed_precision_with_loss_scaling_gives_the_cli_bits(spore_cli, digits):
    train, _ = spore.dataset.load(digits)
    spore.set_seed(7)
    net = SimpleNet(1, 8, 8)
    model = spore.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                        nn.Momentum(net.trainable_params(), learning_rate=0.05), mode="graph", seed=7,
                        amp_level="O2", amp_dtype=spore.float16,
                        loss_scale_manager=spore.train.DynamicLossScaleManager())
    rec = StepLosses()
    model.train(1, train.shuffle(7).batch(16), callbacks=[rec])
    out = subprocess.run([spore_cli, "train", "--model", "simplenet", "--dataset", digits, "--epochs", "1", "--batch",
                          "16", "--lr", "0.05", "--mode", "graph", "--seed", "7", "--json", "--log-every", "1",
                          "--amp-level", "O2", "--amp-dtype", "f16", "--loss-scale", "dynamic"],
                         check=True, capture_output=True, text=True).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    assert rec.losses == [d["loss"] for d in lines if "step" in d]
    assert model.overflow_steps == lines[-1]["overflow_steps"] > 0  # 2^24 overflows f16 until the scale fits
    assert model.loss_scale == lines[-1]["loss_scale"] < 2 ** 24
    assert all(p.dtype == spore.float32 for p in net.trainable_params())
    with pytest.raises(TypeError, match="loss_scale_manager"):
        spore.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1), loss_scale_manager=128.0)
    with pytest.raises(spore.Error, match="O7"):
        spore.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1), amp_level="O7")
