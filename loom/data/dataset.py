"""Datasets: the map-style and iterable protocols and their combinators, as in torch.utils.data."""
from __future__ import annotations

import bisect
import itertools
import math
import numbers
import warnings
from typing import Any, Generic, Iterable, Iterator, Sequence, TypeVar

import numpy as np

from loom.data._random import numpy_rng
from loom.errors import LoomIndexError, LoomTypeError, LoomValueError

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: `__getitem__(index)` returns one example, `__len__` counts them.

    Subclasses implement `__getitem__` (and usually `__len__`). They may also
    implement `__getitems__(indices)` to fetch a whole batch in one call; the
    DataLoader uses it when present. `a + b` concatenates two datasets.

    Examples
    --------
    >>> class Squares(loom.data.Dataset):
    ...     def __len__(self):
    ...         return 4
    ...     def __getitem__(self, i):
    ...         return i * i
    >>> [x for x in Squares() + Squares()][:5]
    [0, 1, 4, 9, 0]
    """

    def __getitem__(self, index) -> T_co:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: Dataset[T_co]) -> ConcatDataset[T_co]:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """A dataset that is a stream: `__iter__` yields examples.

    With `num_workers > 0` every worker iterates its own copy; use
    `loom.data.get_worker_info()` inside `__iter__` to give each worker its share.

    Examples
    --------
    >>> class Count(loom.data.IterableDataset):
    ...     def __iter__(self):
    ...         info = loom.data.get_worker_info()
    ...         start, step = (0, 1) if info is None else (info.id, info.num_workers)
    ...         return iter(range(start, 6, step))
    >>> [int(b) for b in loom.data.DataLoader(Count(), batch_size=None)]
    [0, 1, 2, 3, 4, 5]
    """

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other: Dataset[T_co]) -> ChainDataset[T_co]:
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Examples are the rows of tensors sharing their first dimension.

    Parameters
    ----------
    *tensors : Tensor
        Tensors (or NumPy arrays) with the same size of dimension 0.

    Examples
    --------
    >>> ds = loom.data.TensorDataset(loom.arange(6).reshape(3, 2), loom.tensor([0, 1, 0]))
    >>> x, y = ds[1]
    >>> x.tolist(), y.item(), len(ds)
    ([2, 3], 1, 3)
    """

    def __init__(self, *tensors) -> None:
        if not tensors:
            raise LoomValueError("loom.data.TensorDataset: expected at least one tensor")
        sizes = [t.shape[0] if len(t.shape) else None for t in tensors]
        if any(s is None for s in sizes) or len(set(sizes)) != 1:
            raise LoomValueError("loom.data.TensorDataset: size mismatch between tensors: dimension 0 sizes are "
                                 f"{[tuple(t.shape)[:1] for t in tensors]}; every tensor needs the "
                                 f"same first dimension")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __getitems__(self, indices: list[int]) -> list[tuple]:
        """A batch of examples with one NumPy gather per tensor (the DataLoader's fast path).

        Tensors that require grad (or are bfloat16) take the per-example path, so
        gradients still flow; the values are the same either way.
        """
        from loom import dtypes as dt
        from loom.tensor import Tensor, from_numpy
        if any(isinstance(t, Tensor) and (t.requires_grad or t.dtype is dt.bfloat16) for t in self.tensors):
            return [self[i] for i in indices]
        idx = np.asarray(indices, dtype=np.int64)
        cols = []
        for t in self.tensors:
            if isinstance(t, Tensor):
                batch = t.numpy()[idx]
                cols.append([from_numpy(batch[k, ...]) for k in range(len(idx))])  # [k, ...]: 0-d arrays too.
            else:
                cols.append(list(np.asarray(t)[idx]))
        return list(zip(*cols))

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class StackDataset(Dataset):
    """Examples are tuples (positional datasets) or dicts (keyword datasets) of equal-length datasets.

    Examples
    --------
    >>> ds = loom.data.StackDataset(image=[1, 2], label=[0, 1])
    >>> ds[1]
    {'image': 2, 'label': 1}
    """

    def __init__(self, *args: Dataset, **kwargs: Dataset) -> None:
        if args and kwargs:
            raise LoomValueError("loom.data.StackDataset: supported either tuple-like (positional) or dict-like "
                                 "(keyword) input, not both")
        parts = list(args) or list(kwargs.values())
        if not parts:
            raise LoomValueError("loom.data.StackDataset: at least one dataset should be passed")
        self._length = len(parts[0])
        if any(len(p) != self._length for p in parts):
            raise LoomValueError(f"loom.data.StackDataset: size mismatch between datasets: {[len(p) for p in parts]}")
        self.datasets: tuple | dict = tuple(args) if args else dict(kwargs)

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self) -> int:
        return self._length


class ConcatDataset(Dataset[T_co]):
    """Several map-style datasets one after another.

    Examples
    --------
    >>> ds = loom.data.ConcatDataset([[1, 2], [3]])
    >>> len(ds), ds[2], ds[-1], ds.cumulative_sizes
    (3, 3, 3, [2, 3])
    """

    @staticmethod
    def cumsum(sequence: Iterable) -> list[int]:
        return list(itertools.accumulate(len(d) for d in sequence))

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise LoomValueError("loom.data.ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise LoomTypeError("loom.data.ConcatDataset: does not support IterableDataset "
                                    f"(got {type(d).__name__}); use ChainDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise LoomValueError(f"loom.data.ConcatDataset: absolute value of index {idx} should not exceed "
                                     f"dataset length {len(self)}")
            idx = len(self) + idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        if which == len(self.datasets):
            raise LoomIndexError(f"loom.data.ConcatDataset: index {idx} is out of range for length {len(self)}")
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """Several iterable datasets one after another.

    Examples
    --------
    >>> class R(loom.data.IterableDataset):
    ...     def __init__(self, n): self.n = n
    ...     def __iter__(self): return iter(range(self.n))
    >>> list(loom.data.ChainDataset([R(2), R(3)]))
    [0, 1, 0, 1, 2]
    """

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise LoomTypeError(f"loom.data.ChainDataset: only supports IterableDataset, got {type(d).__name__}")
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


class Subset(Dataset[T_co]):
    """The examples of `dataset` at `indices`, in that order.

    Examples
    --------
    >>> s = loom.data.Subset([10, 11, 12, 13], [3, 0])
    >>> len(s), s[0], s[1]
    (2, 13, 10)
    """

    def __init__(self, dataset: Dataset[T_co], indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list[int]) -> list:
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset: Dataset, lengths: Sequence[int | float], generator=None) -> list[Subset]:
    """Split `dataset` into non-overlapping random subsets.

    Parameters
    ----------
    dataset : Dataset
        A sized dataset.
    lengths : sequence of int or float
        Subset lengths summing to `len(dataset)`, or fractions summing to 1:
        each gets `floor(frac * len)` and the remainder is dealt round-robin
        from the first split on, as PyTorch does.
    generator : loom.Generator or numpy.random.Generator, optional
        The source of the permutation; default `loom`'s default generator, so
        `loom.manual_seed` makes the split reproducible.

    Examples
    --------
    >>> a, b = loom.data.random_split(range(10), [0.7, 0.3], generator=loom.Generator(0))
    >>> len(a), len(b), sorted(list(a) + list(b)) == list(range(10))
    (7, 3, True)
    """
    lengths = list(lengths)
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise LoomValueError(f"loom.data.random_split: fraction at index {i} is not between 0 and 1")
            sizes.append(int(math.floor(n * frac)))
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        for i, size in enumerate(sizes):
            if size == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an empty dataset.",
                              stacklevel=2)
        lengths = sizes
    if any(not isinstance(v, numbers.Integral) or v < 0 for v in lengths):
        raise LoomValueError(f"loom.data.random_split: lengths must be non-negative ints or fractions summing to 1, "
                             f"got {lengths}")
    if sum(lengths) != n:
        raise LoomValueError(f"loom.data.random_split: sum of input lengths ({sum(lengths)}) does not equal the length "
                             f"of the input dataset ({n})")
    perm = numpy_rng(generator, "loom.data.random_split").permutation(n).tolist()
    return [Subset(dataset, perm[end - size:end]) for end, size in zip(itertools.accumulate(lengths), lengths)]


def _is_sized(obj: Any) -> bool:
    try:
        len(obj)
    except TypeError:
        return False
    return True
