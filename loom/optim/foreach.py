"""Eager optimiser steps computed directly on NumPy arrays, one pass per parameter group (PyTorch's foreach).

An eager step of the graph path builds ~10 nodes per parameter and then
evaluates them one by one; here, when nothing can observe the difference, the
same arithmetic runs on the realised arrays: the same NumPy ufuncs in the same
order on the same dtypes (scalars rounded to the tensor's dtype as the graph's
constants are), so the bits are those of the graph path. Traces, the compiled
backends, a memory budget and parameters that share storage keep the graph path.
"""
from __future__ import annotations

import sys
import weakref
from typing import Iterable

import numpy as np

from loom import _upper
from loom import dtypes as dt
from loom.ir.node import Node
from loom.runtime import dtr
from loom.runtime import realize as _realize
from loom.tensor import Tensor

_FLOATS = (dt.float32, dt.float64)


def available() -> bool:
    """Whether eager values are computed by the reference path right now, or by the tiered backend that starts
    there (no trace, no memory budget)."""
    return _realize.active_trace is None and _realize.get_backend() in ("reference", "tiered") and dtr.ACTIVE is None


def plain(t: Tensor, dtype: dt.DType, shape: tuple) -> bool:
    """A storage root (its views follow it, see `write`) with no history and no NumPy memory, of `dtype` and `shape`."""
    return (t._root is None and t._alias is None and t._ctx is None and t._node.dtype is dtype
            and t._node.shape == shape)


def eligible(params: list[Tensor], state_of) -> bool:
    """Whether every parameter, its gradient and its state tensors are plain float tensors of one dtype each.

    A 0-d parameter (a learnable scale) keeps its group on the graph path: NumPy computes 0-d operands as
    scalars, whose decoupled weight decay was seen to round one ulp away from the graph path's."""
    for p in params:
        d = p._node.dtype
        if d not in _FLOATS:
            return False
        shape = p._node.shape
        if not shape:
            return False
        g = p._grad
        if not plain(p, d, shape) or g._node.dtype is not d or g._node.shape != shape:
            return False
        for v in state_of(p).values():
            if isinstance(v, Tensor) and not plain(v, v._node.dtype, v._node.shape):
                return False
    return True


def realize_all(tensors: Iterable[Tensor]) -> None:
    """Compute every pending value among `tensors` in one pass of the reference path."""
    pending = [t._node for t in tensors if t._node.buffer is None]
    if pending:
        _realize.realize_barrier(pending)


def value(t: Tensor) -> np.ndarray:
    return t._node.buffer


# References to a plain tensor's node nothing else holds: the tensor's `_node` and `owned`'s local and argument;
# to its array: the node's buffer, the local and the argument.
_NODE_REFS, _ARRAY_REFS = 3, 3


def owned(t: Tensor) -> np.ndarray | None:
    """The array of `t` (a `plain` tensor) when nothing but `t` can see it, else None: no other tensor, pending
    node or weak reference holds its node, and no view, NumPy user or DLPack export holds the array. An update
    may then write the new value into it: the same ufuncs in the same order give the same bits, with no
    fresh array (whose first touch costs a cold pass over memory) per state tensor and step."""
    node = t._node
    a = node.buffer
    if (type(a) is np.ndarray and a.base is None and sys.getrefcount(node) == _NODE_REFS
            and sys.getrefcount(a) == _ARRAY_REFS and not weakref.getweakrefcount(node) and a.flags.writeable
            and a.flags.c_contiguous and a.ndim):
        return a
    return None


def subtract_into(x: np.ndarray, u) -> np.ndarray:
    """x - u, written into the fresh temporary `u` when it is an array (the same bits, one allocation less);
    ufuncs return NumPy scalars for 0-d operands, which cannot take the result."""
    return np.subtract(x, u, out=u) if isinstance(u, np.ndarray) else np.asarray(np.subtract(x, u))


def write(t: Tensor, array: np.ndarray) -> None:
    """Make `array` the new value of `t` as an in-place op under no_grad commits it (`Tensor._commit`):
    a new version, seen by the views of `t`. A NumPy scalar (what ufuncs give for 0-d operands) becomes a 0-d array."""
    array = np.asarray(array)
    if t._views:
        _upper.alias.snapshot_group(t, t._vc)
    old = t._node
    t._node = Node("buffer", (), {}, old.shape, old.dtype, old.device, buffer=array)
    t._vc.value += 1
    if t._views:
        _upper.alias.rederive_all(t)


def new(array: np.ndarray) -> Tensor:
    """A leaf tensor holding `array`."""
    array = np.asarray(array)
    return Tensor._wrap(Node("buffer", (), {}, tuple(array.shape), dt.from_numpy(array.dtype), buffer=array))
