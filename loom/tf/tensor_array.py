"""`tf.TensorArray`: a list of same-dtype tensors written by index and stacked at the end.

It is a Python list of loom tensors, so it works eagerly and in Python loops
(including loops `tf.function` unrolls); a loop that `tf.function` turns into
`loom.while_loop` (`for i in tf.range(n)` while tracing) can only carry tensors
and says so.
"""
from __future__ import annotations

import loom
from loom.errors import LoomError, LoomValueError
from loom.tensor import Tensor
from loom.tf._core import as_dtype, convert_to_tensor


def _index(i) -> int:
    return int(i.numpy()) if isinstance(i, Tensor) else int(i)


class TensorArray:
    """Tensors of one dtype addressed by position: `write`, `read`, `stack`, `unstack`, `gather`, `concat`.

    Examples
    --------
    >>> import loom.tf as tf
    >>> ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    >>> for i in range(3):
    ...     ta = ta.write(i, tf.constant(float(i)) ** 2)
    >>> ta.stack().numpy().tolist()
    [0.0, 1.0, 4.0]
    """

    def __init__(self, dtype, size=None, dynamic_size=None, clear_after_read=None, tensor_array_name=None,
                 handle=None, flow=None, infer_shape=True, element_shape=None, colocate_with_first_write_call=True,
                 name=None) -> None:
        self._dtype = as_dtype(dtype)
        try:
            n = 0 if size is None else _index(size)
        except LoomError:
            if not loom.tracing():
                raise
            raise LoomError("loom.tf.TensorArray: inside tf.function the size must be known while tracing (a "
                            "Python int, not a tensor argument): loom's TensorArray is a Python list, and a loop "
                            "over tf.range that tf.function turns into a graph loop can carry only tensors. Loop "
                            "with Python range() and tf.stack a list, or build the array outside tf.function") from None
        self._items: list = [None] * n
        self._dynamic = bool(dynamic_size)
        self._element_shape = None if element_shape is None else tuple(element_shape)

    @property
    def dtype(self):
        return self._dtype

    @property
    def dynamic_size(self) -> bool:
        return self._dynamic

    @property
    def element_shape(self):
        from loom.tf._core import TensorShape
        return TensorShape(self._element_shape) if self._element_shape is not None else None

    def size(self, name=None) -> Tensor:
        """The number of elements, as an int32 tensor."""
        return convert_to_tensor(len(self._items), loom.int32)

    def _check_shape(self, v: Tensor, where: str) -> None:
        shape = tuple(v.shape)
        if self._element_shape is None:
            self._element_shape = shape
        elif None not in self._element_shape and shape != self._element_shape:
            raise LoomValueError(f"loom.tf.TensorArray.{where}: element of shape {list(shape)} does not match the "
                                 f"array's element shape {list(self._element_shape)}")

    def write(self, index, value, name=None) -> TensorArray:
        """Set element `index` to `value`; returns the array (use the returned one, as in TensorFlow)."""
        i = _index(index)
        v = value if isinstance(value, Tensor) else convert_to_tensor(value, self._dtype)
        if v.dtype is not self._dtype:
            raise LoomValueError(f"loom.tf.TensorArray.write: the array holds {self._dtype.name}, got a "
                                 f"{v.dtype.name} value")
        if i < 0 or (i >= len(self._items) and not self._dynamic):
            raise LoomValueError(f"loom.tf.TensorArray.write: index {i} is out of range for an array of size "
                                 f"{len(self._items)} (create it with dynamic_size=True to grow it)")
        self._check_shape(v, "write")
        if i >= len(self._items):
            self._items.extend([None] * (i + 1 - len(self._items)))
        self._items[i] = v
        return self

    def read(self, index, name=None) -> Tensor:
        """Element `index` (zeros if it was never written but the element shape is known)."""
        i = _index(index)
        if not 0 <= i < len(self._items):
            raise LoomValueError(f"loom.tf.TensorArray.read: index {i} is out of range for an array of size "
                                 f"{len(self._items)}")
        return self._item(i)

    def _item(self, i: int) -> Tensor:
        v = self._items[i]
        if v is None:
            if self._element_shape is None or None in self._element_shape:
                raise LoomValueError(f"loom.tf.TensorArray: element {i} was never written and the element shape "
                                     "is unknown")
            return loom.zeros(*self._element_shape, dtype=self._dtype)
        return v

    def stack(self, name=None) -> Tensor:
        """All elements stacked along a new first axis."""
        if not self._items:
            shape = self._element_shape if self._element_shape is not None and None not in self._element_shape else ()
            return loom.zeros(0, *shape, dtype=self._dtype)
        return loom.stack([self._item(i) for i in range(len(self._items))], dim=0)

    def gather(self, indices, name=None) -> Tensor:
        """The elements at `indices`, stacked."""
        idx = indices.numpy().tolist() if isinstance(indices, Tensor) else list(indices)
        return loom.stack([self.read(i) for i in idx], dim=0)

    def concat(self, name=None) -> Tensor:
        """All elements concatenated along their first axis."""
        return loom.cat([self._item(i) for i in range(len(self._items))], dim=0)

    def unstack(self, value, name=None) -> TensorArray:
        """Fill the array with the slices of `value` along its first axis."""
        t = convert_to_tensor(value, self._dtype)
        self._items = [t[i] for i in range(t.shape[0])]
        if t.ndim:
            self._element_shape = tuple(t.shape[1:])
        return self

    def scatter(self, indices, value, name=None) -> TensorArray:
        """Write the slices of `value` at `indices`."""
        t = convert_to_tensor(value, self._dtype)
        idx = indices.numpy().tolist() if isinstance(indices, Tensor) else list(indices)
        for k, i in enumerate(idx):
            self.write(i, t[k])
        return self

    def close(self, name=None) -> None:
        """Drop the elements."""
        self._items = []

    def identity(self) -> TensorArray:
        return self

    def mark_used(self) -> None:
        """Nothing to mark: unused arrays are not reported."""

    def __repr__(self) -> str:
        return f"<TensorArray dtype={self._dtype.name} size={len(self._items)}>"
