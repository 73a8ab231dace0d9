"""examples/python runs (the README and docs/PYTHON.md point users at them)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")


def run(*args):
    return subprocess.run([sys.executable, *args], check=True, capture_output=True, text=True, env=os.environ).stdout


def test_tensors_and_grad_example_converges():
    out = run(os.path.join(EXAMPLES, "tensors_and_grad.py"))
    assert "loss" in out and "w = [ 1.5 -2.   0.5]" in out


def test_generate_example_streams(tiny_gguf):
    out = run(os.path.join(EXAMPLES, "generate.py"), tiny_gguf, "Once upon a time", "12")
    assert "[12 tokens" in out and "stop: length" in out


def test_train_example_trains_exports_and_loads_back(tmp_path):
    out = run(os.path.join(EXAMPLES, "train.py"), "3", str(tmp_path))
    assert "epoch 3:" in out and "test accuracy" in out and (tmp_path / "simplenet.onnx").exists()


def test_export_convert_example_reports_each_conversion(tmp_path):
    out = run(os.path.join(EXAMPLES, "export_convert.py"), str(tmp_path))
    assert "fp16:" in out and "int8:" in out and "int8 top ops:" in out
    assert (tmp_path / "digits_cnn_int8.spore").exists()
