"""`torch.testing`: `assert_close` with PyTorch's per-dtype default tolerances."""
from __future__ import annotations

import numpy as np

from loom import dtypes as dt
from loom.tensor import Tensor, tensor

# (rtol, atol) by dtype, as PyTorch's defaults; integer and bool dtypes compare exactly.
_TOL = {dt.float16: (1e-3, 1e-5), dt.bfloat16: (1.6e-2, 1e-5), dt.float32: (1.3e-6, 1e-5),
        dt.float64: (1e-7, 1e-7)}


def _as_tensor(v) -> Tensor:
    return v if isinstance(v, Tensor) else tensor(v)


def assert_close(actual, expected, *, allow_subclasses: bool = True, rtol=None, atol=None, equal_nan: bool = False,
                 check_device: bool = True, check_dtype: bool = True, check_layout: bool = True,
                 check_stride: bool = False, msg=None) -> None:
    """Raise AssertionError unless `actual` and `expected` (tensors, numbers or containers) are close.

    Examples
    --------
    >>> import loom.torch as torch
    >>> torch.testing.assert_close(torch.tensor([1.0]), torch.tensor([1.0 + 1e-7]))
    """
    if isinstance(expected, (list, tuple)) and not isinstance(actual, Tensor):
        if len(actual) != len(expected):
            raise AssertionError(msg or f"The length of the sequences mismatch: {len(actual)} != {len(expected)}")
        for a, e in zip(actual, expected):
            assert_close(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=check_dtype, msg=msg)
        return
    if isinstance(expected, dict):
        if set(actual) != set(expected):
            raise AssertionError(msg or f"The keys of the mappings do not match: {sorted(actual)} != "
                                 f"{sorted(expected)}")
        for k in expected:
            assert_close(actual[k], expected[k], rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=check_dtype,
                         msg=msg)
        return
    a, e = _as_tensor(actual), _as_tensor(expected)
    if check_dtype and a.dtype is not e.dtype:
        raise AssertionError(msg or f"The values for attribute 'dtype' do not match: {a.dtype} != {e.dtype}.")
    if tuple(a.shape) != tuple(e.shape):
        raise AssertionError(msg or f"The values for attribute 'shape' do not match: {tuple(a.shape)} != "
                             f"{tuple(e.shape)}.")
    if (rtol is None) != (atol is None):
        raise ValueError("Both 'rtol' and 'atol' must be either specified or omitted")
    if rtol is None:
        rtol, atol = max(_TOL.get(a.dtype, (0.0, 0.0)), _TOL.get(e.dtype, (0.0, 0.0)))
    av, ev = np.asarray(a.detach().numpy(), np.float64), np.asarray(e.detach().numpy(), np.float64)
    close = np.isclose(av, ev, rtol=rtol, atol=atol, equal_nan=equal_nan) | (av == ev)
    if not close.all():
        bad = int((~close).sum())
        diff = np.abs(av - ev)[~close]
        raise AssertionError(msg or f"Tensor-likes are not close!\n\nMismatched elements: {bad} / {av.size}\n"
                             f"Greatest absolute difference: {diff.max()} (up to {atol} allowed)")


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan: bool = True, msg: str = "") -> None:
    """The deprecated spelling of `assert_close` (dtypes may differ)."""
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=False, msg=msg or None)
