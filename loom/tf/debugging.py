"""`tf.debugging` (and `tf.errors`): value and shape assertions that raise TensorFlow-named loom errors.

Examples
--------
>>> import loom.tf as tf
>>> tf.debugging.assert_equal(tf.constant([1, 2]), tf.constant([1, 2]))
>>> try:
...     tf.debugging.assert_less(tf.constant(3.0), 2.0, message="too big")
... except tf.errors.InvalidArgumentError as e:
...     print("raised")
raised
"""
from __future__ import annotations

import numpy as np

from loom.errors import LoomError, LoomValueError
from loom.tf._core import convert_to_tensor as _t


class OpError(LoomError):
    """Base of TensorFlow's runtime errors (`tf.errors.OpError`)."""


class InvalidArgumentError(OpError, LoomValueError):
    """An op received an invalid argument (a failed assertion)."""


class errors:  # noqa: N801  (TensorFlow's namespace spelling)
    """`tf.errors`."""

    OpError = OpError
    InvalidArgumentError = InvalidArgumentError


def _values(x):
    return np.asarray(_t(x).numpy())


def _check(ok, what: str, message, x, y=None) -> None:
    if not bool(np.all(ok)):
        shown = f"x = {_values(x)!r}" + ("" if y is None else f", y = {_values(y)!r}")
        raise InvalidArgumentError(f"loom.tf.debugging.{what} failed: {message + ': ' if message else ''}{shown}")


def assert_equal(x, y, message=None, summarize=None, name=None) -> None:
    """Raise `InvalidArgumentError` unless x == y everywhere (broadcasting)."""
    _check(_values(x) == _values(y), "assert_equal", message, x, y)


def assert_none_equal(x, y, message=None, summarize=None, name=None) -> None:
    """Raise unless x != y everywhere."""
    _check(_values(x) != _values(y), "assert_none_equal", message, x, y)


def assert_less(x, y, message=None, summarize=None, name=None) -> None:
    """Raise unless x < y everywhere."""
    _check(_values(x) < _values(y), "assert_less", message, x, y)


def assert_less_equal(x, y, message=None, summarize=None, name=None) -> None:
    """Raise unless x <= y everywhere."""
    _check(_values(x) <= _values(y), "assert_less_equal", message, x, y)


def assert_greater(x, y, message=None, summarize=None, name=None) -> None:
    """Raise unless x > y everywhere."""
    _check(_values(x) > _values(y), "assert_greater", message, x, y)


def assert_greater_equal(x, y, message=None, summarize=None, name=None) -> None:
    """Raise unless x >= y everywhere."""
    _check(_values(x) >= _values(y), "assert_greater_equal", message, x, y)


def assert_near(x, y, rtol=None, atol=None, message=None, summarize=None, name=None) -> None:
    """Raise unless |x - y| <= atol + rtol * |y| everywhere (float32 defaults: 10 * eps)."""
    a, b = _values(x), _values(y)
    eps = float(np.finfo(a.dtype).eps) if a.dtype.kind == "f" else 0.0
    rtol = 10 * eps if rtol is None else rtol
    atol = 10 * eps if atol is None else atol
    _check(np.abs(a - b) <= atol + rtol * np.abs(b), "assert_near", message, x, y)


def assert_positive(x, message=None, summarize=None, name=None) -> None:
    """Raise unless x > 0 everywhere."""
    _check(_values(x) > 0, "assert_positive", message, x)


def assert_non_negative(x, message=None, summarize=None, name=None) -> None:
    """Raise unless x >= 0 everywhere."""
    _check(_values(x) >= 0, "assert_non_negative", message, x)


def assert_negative(x, message=None, summarize=None, name=None) -> None:
    """Raise unless x < 0 everywhere."""
    _check(_values(x) < 0, "assert_negative", message, x)


def assert_all_finite(t, message, name=None):
    """`t` itself, after checking that it holds no NaN or infinity."""
    _check(np.isfinite(_values(t)), "assert_all_finite", message, t)
    return _t(t)


check_numerics = assert_all_finite


def assert_rank(x, rank, message=None, name=None) -> None:
    """Raise unless `x` has `rank` dimensions."""
    r = _t(x).ndim
    if r != int(rank):
        raise InvalidArgumentError(f"loom.tf.debugging.assert_rank failed: {message + ': ' if message else ''}"
                                   f"expected rank {int(rank)}, got rank {r} (shape {list(_t(x).shape)})")


def assert_shapes(shapes, data=None, summarize=None, message=None, name=None) -> None:
    """Raise unless each (tensor, dims) pair has the dims (ints, or names that must agree across tensors)."""
    named: dict = {}
    for x, dims in shapes:
        shape = list(_t(x).shape)
        if len(shape) != len(dims):
            raise InvalidArgumentError(f"loom.tf.debugging.assert_shapes failed: {message + ': ' if message else ''}"
                                       f"shape {shape} has rank {len(shape)}, expected dims {list(dims)}")
        for s, d in zip(shape, dims):
            if isinstance(d, str):
                if d in named and named[d] != s:
                    raise InvalidArgumentError(f"loom.tf.debugging.assert_shapes failed: dimension {d!r} is "
                                               f"{named[d]} in one tensor and {s} in another")
                named[d] = s
            elif d is not None and int(d) != s:
                raise InvalidArgumentError(f"loom.tf.debugging.assert_shapes failed: shape {shape} does not match "
                                           f"{list(dims)}")


def assert_type(tensor, tf_type, message=None, name=None) -> None:
    """Raise unless `tensor` has dtype `tf_type`."""
    from loom.tf._core import as_dtype
    if _t(tensor).dtype is not as_dtype(tf_type):
        raise InvalidArgumentError(f"loom.tf.debugging.assert_type failed: expected {as_dtype(tf_type).name}, got "
                                   f"{_t(tensor).dtype.name}")
