"""PyTorch's `torch.nn.functional` names over loom's composite ops."""
from loom.functional.math import (  # noqa: F401
    celu, elu, gelu, hardsigmoid, hardswish, hardtanh, leaky_relu, logsigmoid, mish, relu, relu6, selu,
    sigmoid, silu, softplus, softsign, tanh, tanhshrink,
)
from loom.functional.shape import pad  # noqa: F401

try:
    from loom.functional.nn import *  # noqa: F401,F403
except ModuleNotFoundError as _e:  # The nn module is optional while it is being written.
    if _e.name != "loom.functional.nn":
        raise
try:
    from loom.functional.indexing import one_hot  # noqa: F401
except ImportError:
    pass
