"""Turning a list of examples into a batch (default_collate) or converting one example (default_convert)."""
from __future__ import annotations

import collections.abc
import copy
import numbers
from typing import Any, Sequence

import numpy as np

from loom import dtypes as dt
from loom.errors import LoomTypeError, LoomValueError, ShapeError, fmt_shape
from loom.tensor import Tensor, as_tensor, from_numpy, tensor

_ERR = ("loom.data.default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
        "found {}")


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _numpy_ok(a) -> bool:
    """NumPy arrays and scalars of string or object dtype cannot become tensors."""
    return a.dtype.kind not in "SaUO"


def _stack_tensors(batch: Sequence[Tensor]) -> Tensor:
    """Stack like loom.stack, but values without history are stacked in NumPy (one buffer, no graph)."""
    first = batch[0]
    for i, t in enumerate(batch):
        if t.shape != first.shape:
            raise ShapeError(f"loom.data.default_collate: stack expects each tensor to be equal size, but got "
                             f"{fmt_shape(first.shape)} at entry 0 and {fmt_shape(t.shape)} at entry {i}")
    if any(t.requires_grad for t in batch) or any(t.dtype is not first.dtype for t in batch):
        from loom.functional.shape import stack
        return stack(list(batch), 0)
    arrays = [t.numpy(force=True) for t in batch]
    out = np.stack(arrays)
    return tensor(out, dtype=first.dtype) if first.dtype is dt.bfloat16 else from_numpy(out)


def default_collate(batch: Sequence[Any]) -> Any:
    """Merge a list of examples into a batch, following the examples' structure.

    Tensors are stacked along a new dim 0; NumPy arrays and NumPy scalars become
    stacked tensors; Python floats become a float64 tensor, ints an int64 tensor,
    bools a bool tensor; strings and bytes stay a list; dicts, namedtuples and
    sequences are collated field by field (tuples become lists, as in PyTorch;
    a column of strings keeps the container it arrives in).

    Examples
    --------
    >>> b = loom.data.default_collate([{"x": np.zeros(2), "y": 1}, {"x": np.ones(2), "y": 0}])
    >>> b["x"].shape, b["y"].tolist()
    (loom.Size([2, 2]), [1, 0])
    >>> loom.data.default_collate([(1.0, "a"), (2.0, "b")])
    [tensor([1., 2.], dtype=loom.float64), ('a', 'b')]
    """
    if len(batch) == 0:
        raise LoomValueError("loom.data.default_collate: received an empty batch")
    elem = batch[0]
    if isinstance(elem, Tensor):
        return _stack_tensors(batch)
    if isinstance(elem, np.ndarray):
        if not _numpy_ok(elem):
            raise LoomTypeError(_ERR.format(f"numpy array of dtype {elem.dtype}"))
        shapes = {np.shape(b) for b in batch}
        if len(shapes) != 1:
            raise ShapeError(f"loom.data.default_collate: stack expects each array to be equal size, got shapes "
                             f"{sorted(shapes)}")
        return from_numpy(np.ascontiguousarray(np.stack(batch)))
    if isinstance(elem, np.generic):
        if not _numpy_ok(elem):
            return batch
        return from_numpy(np.asarray(batch))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, bool):
        return tensor(list(batch), dtype=dt.bool_)
    if isinstance(elem, numbers.Integral):
        return tensor(list(batch), dtype=dt.int64)
    if isinstance(elem, numbers.Real):
        return tensor(list(batch), dtype=dt.float64)
    if isinstance(elem, collections.abc.Mapping):
        fields = {key: default_collate([d[key] for d in batch]) for key in elem}
        if isinstance(elem, collections.abc.MutableMapping):
            clone = copy.copy(elem)
            clone.update(fields)
            return clone
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise ShapeError("loom.data.default_collate: each element in list of batch should be of equal size, "
                             f"got lengths {[len(e) for e in batch]}")
        columns = [default_collate(s) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return columns
        try:
            return type(elem)(columns)
        except TypeError:
            return columns
    raise LoomTypeError(_ERR.format(type(elem).__name__))


def default_convert(data: Any) -> Any:
    """Convert one example's NumPy arrays and scalars to tensors, leaving everything else as it is.

    Used by the DataLoader when automatic batching is off (`batch_size=None`).

    Examples
    --------
    >>> loom.data.default_convert({"x": np.arange(3), "name": "a"})["x"]
    tensor([0, 1, 2])
    """
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray):
        return as_tensor(data) if _numpy_ok(data) else data
    if isinstance(data, np.generic):
        return as_tensor(np.asarray(data)) if _numpy_ok(data) else data
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        fields = {k: default_convert(v) for k, v in data.items()}
        if isinstance(data, collections.abc.MutableMapping):
            clone = copy.copy(data)
            clone.update(fields)
            return clone
        try:
            return type(data)(fields)
        except TypeError:
            return fields
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data
