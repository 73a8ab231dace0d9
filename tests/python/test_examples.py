"""examples/python runs (the README and docs/PYTHON.md point users at them)."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")


def run(*args):
    return subprocess.run([sys.executable, *args], check=True, capture_output=True, text=True, env=os.environ).stdout


def test_tensors_and_grad_example_converges():
    out = run(os.path.join(EXAMPLES, "tensors_and_grad.py"))
    assert "loss" in out and "w = [ 1.5 -2.   0.5]" in out


def test_generate_example_streams():
    data = os.environ.get("SPORE_SHARED_DATA", "")
    model = os.path.join(data, "gguf-models", "llama-2-tiny-random.gguf")
    if not os.path.exists(model):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{model} is missing (CI must not skip)")
        pytest.skip("../shared/data is not here")
    out = run(os.path.join(EXAMPLES, "generate.py"), model, "Once upon a time", "12")
    assert "[12 tokens" in out and "stop: length" in out
