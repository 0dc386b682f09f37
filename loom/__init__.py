"""loom: PyTorch-style deep learning over one lazy tensor DAG.

Examples
--------
>>> import loom
>>> x = loom.arange(6, dtype=loom.float32).reshape(2, 3)
>>> x.sum(1).tolist()
[3.0, 12.0]
"""
from loom._api import *  # noqa: F401,F403  (the core namespace: tensors, dtypes, errors, autograd, ops)
from loom._api import __version__, _dtypes, _result_type, Tensor  # noqa: F401

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
