"""PyTorch's `torch.nn.functional` names over loom's composite ops."""
import importlib as _importlib

from loom.functional.math import (  # noqa: F401
    celu, elu, gelu, hardsigmoid, hardswish, hardtanh, leaky_relu, logsigmoid, mish, relu, relu6, selu,
    sigmoid, silu, softplus, softsign, tanh, tanhshrink,
)
from loom.functional.shape import pad  # noqa: F401

# Public names of these modules are re-exported here (each module lists them in __all__).
for _name in ("nn", "conv", "indexing", "activation", "losses", "pooling", "sampling", "distance", "sparse"):
    try:
        _mod = _importlib.import_module(f"loom.functional.{_name}")
    except ModuleNotFoundError as _e:
        if _e.name != f"loom.functional.{_name}":
            raise
        continue
    for _k in getattr(_mod, "NN_FUNCTIONAL", []):
        globals()[_k] = getattr(_mod, _k)
