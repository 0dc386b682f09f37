"""Every torch.nn class and torch.nn.functional function has a loom counterpart of the same name (issue 12).

The few names left out are PyTorch internals or GPU-only kernels; the list is explicit so that a new
PyTorch name, or a lost loom one, fails here.
"""
import inspect

import torch.nn as tnn
import torch.nn.functional as TF

import loom

# fp8 scaled matmuls: CUDA kernels over float8 dtypes loom does not have.
NOT_PROVIDED_F = {"scaled_mm", "scaled_grouped_mm"}


def _torch_functions():
    return sorted(n for n in dir(TF) if not n.startswith("_") and (
        inspect.isfunction(getattr(TF, n)) or type(getattr(TF, n)).__name__ in ("builtin_function_or_method",
                                                                              "_lru_cache_wrapper")))


def test_every_torch_nn_class_exists_in_loom_nn():
    classes = [n for n in dir(tnn) if not n.startswith("_") and inspect.isclass(getattr(tnn, n))]
    assert len(classes) > 150
    missing = [n for n in classes if not hasattr(loom.nn, n)]
    assert missing == []


def test_every_torch_nn_functional_exists_in_loom():
    names = _torch_functions()
    assert len(names) > 130
    missing = [n for n in names if not hasattr(loom.nn.functional, n)]
    assert sorted(missing) == sorted(NOT_PROVIDED_F)

