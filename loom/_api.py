"""The core of loom's public namespace: tensors, dtypes, errors, autograd, every composite op, linalg, nn.

`loom/__init__.py` re-exports all of it. The packages built on the core (optim,
data, distributions, io, onnx, quantization, ...) import this module, never the
`loom` package, whose __init__ imports them: that keeps the import graph free of
cycles (docs/architecture.md, "The layers"). Inside them `from loom import _api as loom`
keeps the `loom.exp(...)` spelling users know.
"""
from loom import dtypes as _dtypes
from loom.dtypes import (  # noqa: F401
    DType as dtype, bfloat16, complex32, complex64, complex128, float16, float32, float64, int8, int16, int32, int64,
    uint8, uint16, uint32, uint64,
    get_default_dtype, set_default_dtype, result_type as _result_type,
)
from loom.errors import (  # noqa: F401
    AutogradError, DeviceError, DTypeError, GraphError, LoomError, LoomIndexError, LoomTypeError, LoomValueError,
    LoomZeroDivisionError, MemoryBudgetError, LoomWarning, ShapeError,
)
from loom.device import Device, device  # noqa: F401
from loom.tensor import (  # noqa: F401
    Generator, Size, Tensor, arange, as_tensor, bernoulli, default_generator, empty, empty_like, eye,
    from_dlpack, from_numpy, full, full_like, get_rng_state, initial_seed, is_tensor, linspace, logspace,
    manual_seed, multinomial, normal, numel, ones, ones_like, rand, rand_like, randint, randint_like, randn,
    randn_like, randperm, realize, seed, set_rng_state, synchronize, tensor, zeros, zeros_like,
)
from loom import alias as _alias  # noqa: F401  (fills loom._upper.alias, which every Tensor needs)
from loom.autograd import GradientTape, enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
from loom import autograd, functional, linalg  # noqa: F401
from loom.functional import install_methods as _install_methods

bool = _dtypes.bool_  # noqa: A001  (PyTorch's spelling: loom.bool)
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16
float_ = float32
cfloat = complex64
cdouble = complex128
chalf = complex32

_install_methods(Tensor)

# Every composite op is also a top-level function, as in PyTorch (loom.exp, loom.cat, ...).
for _mod in functional._modules():
    for _name in dir(_mod):
        if not _name.startswith("_") and callable(getattr(_mod, _name)) and \
                getattr(getattr(_mod, _name), "__module__", "") == _mod.__name__ and _name not in globals():
            globals()[_name] = getattr(_mod, _name)
del _mod, _name

from loom import nn  # noqa: E402,F401  (after the ops: nn's modules are built from them)

__version__ = "0.1.0"
