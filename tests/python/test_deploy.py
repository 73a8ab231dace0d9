"""spore.load: a PyTorch-exported ONNX model (dynamic batch) run from Python matches PyTorch; bad calls raise."""
import os

import numpy as np
import pytest

import spore
from conftest import require_torch

torch = require_torch()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():  # non-trivial BN statistics
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    path = tmp_path_factory.mktemp("onnx") / "net.onnx"
    torch.onnx.export(net, torch.randn(1, 3, 12, 12), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=17)
    return net, path


def test_a_pytorch_export_runs_and_matches(exported):
    net, path = exported
    m = spore.load(path)
    (name, dt, dims), = m.inputs
    assert name == "x" and dt == spore.float32 and dims[1:] == (3, 12, 12) and isinstance(dims[0], str)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 12, 12)).astype(np.float32)
        with torch.no_grad():
            want = net(torch.from_numpy(x)).numpy()
        y = m(x)
        assert y.shape == (batch, 5)
        np.testing.assert_allclose(np.asarray(y), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(m(x=spore.from_numpy(x))), want, rtol=1e-4, atol=1e-5)
    assert m.stats["compiles"] >= 2  # one plan per batch size
    assert "net.onnx" in repr(m)


def test_bad_calls_raise(exported, tmp_path):
    _, path = exported
    m = spore.load(path)
    with pytest.raises(TypeError, match="missing input"):
        m()
    with pytest.raises(TypeError, match="no input named 'z'"):
        m(z=np.zeros((1, 3, 12, 12), np.float32))
    with pytest.raises(TypeError, match="takes 1 inputs"):
        m(np.zeros((1, 3, 12, 12), np.float32), np.zeros(1, np.float32))
    with pytest.raises(spore.Error, match="x"):
        m(np.zeros((1, 4, 12, 12), np.float32))  # 4 channels where the model has 3: names the input
    with pytest.raises(spore.Error):
        m(np.zeros((1, 3, 12, 12), np.float64))
    with pytest.raises(spore.Error, match="nope.onnx"):
        spore.load(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a model")
    with pytest.raises(spore.Error):
        spore.load(bad)


def test_a_torchvision_export_runs_as_exported(tmp_path):
    """A torchvision architecture nobody here wrote (seeded weights, BatchNorm statistics re-estimated), exported by
    PyTorch at opset 17 with a dynamic batch: spore.load runs it with no shape given and matches PyTorch at batch 1
    and 2 (bench/peers/tv_vs_ort.py checks the same exports against ONNX Runtime)."""
    tv = pytest.importorskip("torchvision") if os.environ.get("CI") != "true" else __import__("torchvision")
    torch.manual_seed(0)
    net = tv.models.mobilenet_v3_small(weights=None).train()
    with torch.no_grad():  # real running statistics, so BatchNorm is not an identity
        for _ in range(2):
            net(torch.rand(4, 3, 96, 96))
    net.eval()
    path = tmp_path / "mnv3.onnx"
    torch.onnx.export(net, torch.rand(1, 3, 96, 96), str(path), input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17)
    m = spore.load(path)
    for batch in (1, 2):
        x = np.random.default_rng(batch).random((batch, 3, 96, 96), dtype=np.float32)
        with torch.no_grad():
            want = net(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(np.asarray(m(x)), want, rtol=1e-3, atol=1e-4)
