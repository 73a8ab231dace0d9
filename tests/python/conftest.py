"""Shared fixtures of the Python tests."""
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


@pytest.fixture
def tiny_gguf():
    """The test GGUF from ../shared/data: SKIPPED where the data is absent (a user's clone), a failure under CI."""
    data = os.environ.get("SPORE_SHARED_DATA", "")
    path = os.path.join(data, "gguf-models", "llama-2-tiny-random.gguf")
    if not os.path.exists(path):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing (CI must not skip)")
        pytest.skip("../shared/data is not here")
    return path


@pytest.fixture
def spore_cli():
    """The spore binary: SPORE_CLI (ctest sets it) or the build folder's."""
    cli = os.environ.get("SPORE_CLI") or os.path.join(ROOT, "build", "spore")
    if not os.path.exists(cli):
        pytest.fail(f"{cli}: no spore binary (set SPORE_CLI; ctest does)")
    return cli


@pytest.fixture
def digits():
    """The bundled scikit-learn digits (data/digits.csv.gz), as a `spore train --dataset` spec."""
    return "digits:" + os.path.join(ROOT, "data", "digits.csv.gz")


def require_torch():
    """PyTorch (Debian's python3-torch, which install-deps installs): a module-level skip where it is missing, but a
    failure under CI, which must not pass by skipping."""
    try:
        import torch
        return torch
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("PyTorch (python3-torch) is not installed", allow_module_level=True)
