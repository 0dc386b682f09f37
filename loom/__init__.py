"""loom: PyTorch-style deep learning over one lazy tensor DAG.

Examples
--------
>>> import loom
>>> x = loom.arange(6, dtype=loom.float32).reshape(2, 3)
>>> x.sum(1).tolist()
[3.0, 12.0]
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
from loom.autograd import GradientTape, enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
from loom import autograd, functional  # noqa: F401
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

from loom import data, io, nn, optim, utils  # noqa: E402,F401
from loom import distributions, fft, linalg, ops, profiler  # noqa: E402,F401
from loom import train  # noqa: E402,F401
from loom.convert import from_torch  # noqa: E402,F401
from loom import compiler  # noqa: E402,F401
from loom import onnx  # noqa: E402,F401  (imports no onnx package until used)
from loom import quantization  # noqa: E402,F401  (int8; builds its C library on first use)
from loom.io import load, save  # noqa: E402,F401


def promote_types(a, b):
    """The dtype PyTorch's promotion gives two dtypes."""
    return _dtypes.promote_pair(_dtypes.as_dtype(a), _dtypes.as_dtype(b))


def result_type(a, b):
    """The dtype an op on `a` and `b` (tensors or Python numbers) gives, by PyTorch's promotion rules.

    Examples
    --------
    >>> loom.result_type(loom.tensor([1, 2]), 1.5)
    loom.float32
    """
    return _result_type(a, b)


def can_cast(from_, to) -> bool:
    """Whether PyTorch's casting rules allow an in-place op to write a `from_` value into a `to` tensor.

    Examples
    --------
    >>> loom.can_cast(loom.int32, loom.float32), loom.can_cast(loom.float32, loom.int32)
    (True, False)
    """
    f, t = _dtypes.as_dtype(from_), _dtypes.as_dtype(to)
    return f.category <= t.category


def is_floating_point(t) -> bool:
    """Whether tensor `t` has a floating point dtype (float16, bfloat16, float32, float64)."""
    return t.dtype.is_floating_point


from loom.tensor import set_printoptions  # noqa: E402,F401


jit = None  # Replaced by loom.function when the compiler lands; kept out of the public API until then.
del jit

__version__ = "0.1.0"

from loom.function import Function, cond, dynamic_scalar, function, stage, tracing, while_loop  # noqa: E402,F401
from loom import jit  # noqa: E402,F401  (callable: loom.jit(fn) is loom.function(fn); loom.jit.save dumps for C)
from loom.runtime.realize import backend, get_backend, set_backend  # noqa: E402,F401
from loom.compiler.eager import get_memory_budget, set_memory_budget  # noqa: E402,F401
from loom.eager_budget import memory_budget  # noqa: E402,F401
from loom.runtime.threads import get_num_threads, set_num_threads  # noqa: E402,F401
get_num_threads()  # Decide the default now, so NumPy's BLAS uses loom's count from the first matmul.

from loom._docstrings import attach as _attach_docstrings, attach_tensor as _attach_tensor_docstrings  # noqa: E402

_attach_docstrings(globals())
_attach_tensor_docstrings(Tensor)
