"""pytest setup for the Python suite: tests marked `gpu` (the marker is registered in
pyproject.toml) are reported as skipped where torch.cuda.is_available() is False."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
