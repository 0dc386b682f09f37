"""`tf.RaggedTensor` basics: rows of different lengths as flat values plus row splits (ragged rank 1).

Construction (`tf.ragged.constant`, `from_row_lengths`, `from_row_splits`,
`from_value_rowids`), the row partition (`row_lengths`, `row_splits`,
`nrows`, `value_rowids`), `to_tensor`, `to_list`, row indexing and
`tf.ragged.map_flat_values`. Nested raggedness (ragged rank > 1) is a clear error.
"""
from __future__ import annotations

import numpy as np

import loom
from loom.errors import LoomValueError
from loom.tensor import Tensor
from loom.tf._core import as_dtype, convert_to_tensor


class RaggedTensor:
    """Rows of different lengths, as `tf.RaggedTensor` with ragged rank 1.

    Examples
    --------
    >>> import loom.tf as tf
    >>> r = tf.ragged.constant([[1, 2], [3]])
    >>> r.row_lengths().numpy().tolist(), r.to_tensor().numpy().tolist()
    ([2, 1], [[1, 2], [3, 0]])
    """

    def __init__(self, values: Tensor, row_splits: np.ndarray) -> None:
        self.flat_values = self.values = values
        self._splits = np.asarray(row_splits, np.int64)
        if self._splits.ndim != 1 or self._splits[0] != 0 or np.any(np.diff(self._splits) < 0) \
                or self._splits[-1] != values.shape[0]:
            raise LoomValueError(f"loom.tf.RaggedTensor: row splits {self._splits.tolist()} must start at 0, not "
                                 f"decrease and end at the number of values ({values.shape[0]})")

    @staticmethod
    def from_row_splits(values, row_splits, name=None, validate=True) -> RaggedTensor:
        return RaggedTensor(convert_to_tensor(values), convert_to_tensor(row_splits).numpy())

    @staticmethod
    def from_row_lengths(values, row_lengths, name=None, validate=True) -> RaggedTensor:
        lengths = np.asarray(convert_to_tensor(row_lengths).numpy(), np.int64)
        return RaggedTensor(convert_to_tensor(values), np.concatenate([[0], np.cumsum(lengths)]))

    @staticmethod
    def from_value_rowids(values, value_rowids, nrows=None, name=None, validate=True) -> RaggedTensor:
        ids = np.asarray(convert_to_tensor(value_rowids).numpy(), np.int64)
        n = int(nrows) if nrows is not None else (int(ids.max()) + 1 if ids.size else 0)
        return RaggedTensor.from_row_lengths(values, np.bincount(ids, minlength=n))

    @staticmethod
    def from_tensor(tensor, lengths=None, padding=None, name=None) -> RaggedTensor:
        t = convert_to_tensor(tensor)
        a = t.numpy()
        if lengths is not None:
            n = np.asarray(convert_to_tensor(lengths).numpy(), np.int64)
        elif padding is not None:
            keep = a != np.asarray(padding)
            keep = keep.reshape(keep.shape[0], keep.shape[1], -1).any(-1)
            n = np.array([np.max(np.nonzero(r)[0]) + 1 if r.any() else 0 for r in keep], np.int64)
        else:
            n = np.full(a.shape[0], a.shape[1], np.int64)
        return RaggedTensor.from_row_lengths(np.concatenate([a[i, :k] for i, k in enumerate(n)]), n)

    # ------------------------------------------------------------ partition
    def row_splits_tensor(self) -> Tensor:
        return loom.tensor(self._splits)

    @property
    def row_splits(self) -> Tensor:
        return loom.tensor(self._splits)

    def row_lengths(self, axis=1, name=None) -> Tensor:
        return loom.tensor(np.diff(self._splits))

    def nrows(self, out_type=None, name=None) -> Tensor:
        return loom.tensor(np.array(len(self._splits) - 1, np.int64))

    def value_rowids(self, name=None) -> Tensor:
        return loom.tensor(np.repeat(np.arange(len(self._splits) - 1), np.diff(self._splits)))

    @property
    def shape(self):
        from loom.tf._core import TensorShape
        return TensorShape([len(self._splits) - 1, None] + list(self.values.shape[1:]))

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def ragged_rank(self) -> int:
        return 1

    # ------------------------------------------------------------ conversion
    def to_tensor(self, default_value=None, name=None, shape=None) -> Tensor:
        lengths = np.diff(self._splits)
        n, width = len(lengths), int(lengths.max()) if lengths.size else 0
        if shape is not None:
            dims = [None if s is None or int(s) < 0 else int(s) for s in shape]
            n = dims[0] if dims[0] is not None else n
            width = dims[1] if len(dims) > 1 and dims[1] is not None else width
        vals = self.values.numpy()
        fill = 0 if default_value is None else np.asarray(convert_to_tensor(default_value).numpy())
        out = np.full((n, width) + vals.shape[1:], fill, dtype=vals.dtype)
        for i in range(min(n, len(lengths))):
            row = vals[self._splits[i]:self._splits[i + 1]][:width]
            out[i, :len(row)] = row
        return loom.tensor(out)

    def to_list(self) -> list:
        vals = self.values.numpy()
        return [vals[a:b].tolist() for a, b in zip(self._splits[:-1], self._splits[1:])]

    def numpy(self) -> np.ndarray:
        vals = self.values.numpy()
        rows = [vals[a:b] for a, b in zip(self._splits[:-1], self._splits[1:])]
        out = np.empty(len(rows), dtype=object)
        out[:] = rows
        return out

    def with_flat_values(self, new_values) -> RaggedTensor:
        return RaggedTensor(convert_to_tensor(new_values), self._splits)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            i = int(key) % (len(self._splits) - 1)
            return self.values[int(self._splits[i]):int(self._splits[i + 1])]
        if isinstance(key, slice):
            rows = range(len(self._splits) - 1)[key]
            parts = [self[i] for i in rows]
            lengths = [p.shape[0] for p in parts]
            vals = loom.cat(parts) if parts else self.values[:0]
            return RaggedTensor.from_row_lengths(vals, lengths)
        raise LoomValueError(f"loom.tf.RaggedTensor: indexing with {key!r} is not supported; index a row (r[i]) or "
                             "a range of rows (r[1:3])")

    def __len__(self) -> int:
        return len(self._splits) - 1

    def __repr__(self) -> str:
        return f"<tf.RaggedTensor {self.to_list()}>"

    def _elementwise(self, other, fn) -> RaggedTensor:
        if isinstance(other, RaggedTensor):
            if not np.array_equal(other._splits, self._splits):
                raise LoomValueError("loom.tf.RaggedTensor: elementwise ops need the same row lengths on both sides")
            other = other.values
        return self.with_flat_values(fn(self.values, other))

    def __add__(self, o):
        return self._elementwise(o, lambda a, b: a + b)

    def __mul__(self, o):
        return self._elementwise(o, lambda a, b: a * b)

    def __sub__(self, o):
        return self._elementwise(o, lambda a, b: a - b)

    __radd__, __rmul__ = __add__, __mul__


class ragged:  # noqa: N801  (TensorFlow's namespace spelling)
    """`tf.ragged`: `constant`, `map_flat_values`, `stack`, `boolean_mask`-free basics."""

    RaggedTensor = RaggedTensor

    @staticmethod
    def constant(pylist, dtype=None, ragged_rank=None, inner_shape=None, name=None, row_splits_dtype=None):
        """A ragged tensor from a list of rows of different lengths (one level of raggedness)."""
        rows = [np.asarray(r) for r in pylist]
        if any(r.dtype == object for r in rows) or len({r.shape[1:] for r in rows}) > 1:
            raise LoomValueError("loom.tf.ragged.constant: only one level of raggedness (rows of equal-shaped "
                                 "elements) is supported")
        flat = [v for r in pylist for v in r]
        vals = convert_to_tensor(flat, dtype) if flat else loom.zeros(0, dtype=as_dtype(dtype or "float32"))
        return RaggedTensor.from_row_lengths(vals, [len(r) for r in pylist])

    @staticmethod
    def map_flat_values(op, *args, **kwargs):
        """`op` applied to the flat values of the ragged arguments; the row partition is kept."""
        rt = next(a for a in list(args) + list(kwargs.values()) if isinstance(a, RaggedTensor))
        args = [a.values if isinstance(a, RaggedTensor) else a for a in args]
        kwargs = {k: v.values if isinstance(v, RaggedTensor) else v for k, v in kwargs.items()}
        return rt.with_flat_values(op(*args, **kwargs))

    @staticmethod
    def stack(values, axis=0, name=None):
        """Rows of several ragged tensors (or lists) one after another (axis 0)."""
        if int(axis) != 0:
            raise LoomValueError("loom.tf.ragged.stack: only axis=0 is supported")
        rows = [r for v in values for r in (v.to_list() if isinstance(v, RaggedTensor) else v)]
        return ragged.constant(rows)
