"""Checks on values a composite op cannot trust: indices, class targets, probabilities.

A value computed already is checked at once, at the call. A pending value (a
lazy eager tensor, or a value a `loom.function` trace computes or reads from
outside, which change from call to call) is checked by a ``check`` node: it
passes the value through to the op that reads it and raises the op's error
when the value is computed, in every backend (reference, compiled, XLA).
"""
from __future__ import annotations

import numpy as np

from loom import _upper
from loom.ir.ops import PRIMITIVES
from loom.runtime import realize as _realize
from loom.runtime.reference import to_compute
from loom.tensor import Tensor, apply


def check(t: Tensor, op: str, message: str, *, low, high, closed: bool = False, ignore=None,
          error: str = "index", positive_rows: bool = False, rows_message: str = "") -> Tensor:
    """`t` with every element required to lie in [low, high) ([low, high] when `closed`), or equal `ignore`.

    `message` names the op, the valid range and holds ``{value}`` for the first
    bad element; `error` picks LoomIndexError ("index"), LoomValueError
    ("value") or LinAlgError ("linalg", a singular or indefinite matrix).
    With `positive_rows` every last-axis row must also sum above 0
    (`rows_message` then gets the row's sum). Use the returned tensor: the
    check runs where it is read.
    """
    if t.dtype.name in _SINGLE:  # Compared in float32: bounds that float32 holds, so every backend agrees.
        low, high = _single(low, True), _single(high, not closed)
    attrs = {"user_op": op, "low": low, "high": high, "closed": closed, "ignore": ignore, "error": error,
             "positive_rows": positive_rows, "message": message, "rows_message": rows_message}
    buf = t._node.buffer
    if buf is not None:
        PRIMITIVES["check"].impl(to_compute(np.asarray(buf), t.dtype), attrs)
        trace = _realize.active_trace
        if trace is None or t._node.id >= trace.start_id:
            return t  # Checked for good: an eager value, or a constant of the trace, never changes.
    return apply("check", (t,), attrs)  # Pending, or state a trace reads afresh on every call.


_SINGLE = frozenset({"float32", "float16", "bfloat16"})  # Dtypes whose values compute in float32.


def _single(bound, up: bool):
    """A float bound as the float32 value that splits float32 values the same way (rounded up for
    ``x >= low`` and ``x < high``, down for ``x <= high``). A float64 bound such as float64's tiny
    would otherwise read as 0 where the graph's attributes become Python floats and NumPy compares a
    float32 array with them in float32, but as itself where it stays a NumPy float64."""
    if not isinstance(bound, (float, np.floating)) or not np.isfinite(bound):
        return bound
    b = np.float32(bound)
    if up and b < bound:
        b = np.nextafter(b, np.float32(np.inf))
    elif not up and b > bound:
        b = np.nextafter(b, np.float32(-np.inf))
    return float(b)


def check_index(t: Tensor, op: str, size: int, where: str, *, negative: bool = False,
                what: str = "index", out_of: str = "bounds") -> Tensor:
    """`t` with its indices required in [0, size) (or [-size, size) with `negative`), PyTorch's rule per op.

    `where` says what is indexed ("dimension 1 with size 3"), for the message.
    """
    low = -size if negative else 0
    message = (f"loom.{op}: {what} {{value}} is out of {out_of} for {where} "
               f"(expected {low} <= {what} < {size})")
    return check(t, op, message, low=low, high=size)


_upper.register(check=check)
