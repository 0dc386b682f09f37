"""The examples in loom.quantization's docstrings run as printed."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["loom.quantization.eager", "loom.quantization.observer", "loom.quantization.fake_quantize",
           "loom.quantization.qconfig", "loom.quantization.quantize", "loom.quantization.modules",
           "loom.quantization.kernels", "loom.quantization.onnx"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
