"""Autocast: matmul-like ops compute in a lower float type inside `with loom.autocast():` (PyTorch's CPU autocast).

The ops that PyTorch's CPU autocast runs in lower precision (matmul, linear,
convolutions, attention, ...) call `lower` on their tensor arguments first; the
ops it runs in float32 (the losses, prod, 3-d pooling) call `full`; ops built on
lower-precision ones that PyTorch leaves in their inputs' type (mv, dot) are
marked `keep_op`. Outside an autocast region both return their inputs
unchanged. Only float tensors other than float64 are cast, as in PyTorch.
"""
from __future__ import annotations

import functools
import threading

from loom import dtypes as dt
from loom.errors import DTypeError

_state = threading.local()  # Per thread, as PyTorch's autocast state.


def is_enabled() -> bool:
    """Whether an autocast region is active in this thread."""
    return getattr(_state, "enabled", False)


def get_dtype() -> dt.DType:
    """The float type lower-precision ops compute in (bfloat16 unless set)."""
    return getattr(_state, "dtype", dt.bfloat16)


def _cast(tensors, to: dt.DType):
    from loom.tensor import Tensor
    return tuple(t.to(to) if isinstance(t, Tensor) and t.dtype.is_floating_point and t.dtype is not dt.float64
                 else t for t in tensors)


def lower(*tensors):
    """`tensors` cast to the autocast dtype inside an autocast region (others pass through)."""
    if not is_enabled():
        return tensors
    return _cast(tensors, get_dtype())


def full(*tensors):
    """`tensors` cast to float32 inside an autocast region, for ops PyTorch keeps in float32."""
    if not is_enabled():
        return tensors
    return _cast(tensors, dt.float32)


class autocast:
    """Run matmul, linear, convolutions and attention in `dtype` (bfloat16 or float16) inside the region.

    As PyTorch's CPU autocast: outputs of those ops have `dtype`, the losses
    (cross_entropy, nll_loss, mse_loss, ...) compute in float32, and the other
    ops run in their inputs' type. Gradients flow back to the float32 leaves
    in float32. Usable as a context manager or a decorator, and nestable.

    Examples
    --------
    >>> x, w = loom.randn(2, 4), loom.randn(3, 4)
    >>> with loom.autocast.autocast():
    ...     y = loom.nn.functional.linear(x, w)
    >>> y.dtype
    loom.bfloat16
    """

    def __init__(self, dtype=None, enabled: bool = True) -> None:
        self.dtype = dt.as_dtype(dtype) if dtype is not None else dt.bfloat16
        if self.dtype not in (dt.bfloat16, dt.float16):
            raise DTypeError(f"loom.autocast: the autocast dtype must be bfloat16 or float16, got {self.dtype.name}")
        self.enabled = bool(enabled)
        self._saved: list = []

    def __enter__(self):
        self._saved.append((is_enabled(), get_dtype()))
        _state.enabled = self.enabled
        if self.enabled:
            _state.dtype = self.dtype
        return self

    def __exit__(self, *exc) -> bool:
        _state.enabled, _state.dtype = self._saved.pop()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)(self.dtype, self.enabled):
                return fn(*args, **kwargs)
        return wrapper


def keep_op(fn):
    """Mark `fn` as an op autocast leaves in its inputs' type although it is built on lower-precision ops."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not getattr(_state, "enabled", False):
            return fn(*args, **kwargs)
        saved = _state.enabled
        _state.enabled = False
        try:
            return fn(*args, **kwargs)
        finally:
            _state.enabled = saved
    return wrapper
