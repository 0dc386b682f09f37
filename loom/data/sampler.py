"""Samplers: which indices a DataLoader fetches, and in which order, as in torch.utils.data.

Random samplers draw one NumPy Generator per pass, seeded with the next key of
their loom `Generator` (default: loom's default generator, which
`loom.manual_seed` resets). Consecutive epochs therefore differ, and reseeding
replays them exactly. A NumPy Generator may be given instead and is used as is.
"""
from __future__ import annotations

import numbers
from typing import Generic, Iterable, Iterator, Sequence, Sized, TypeVar

import numpy as np

from loom.data._random import numpy_rng
from loom.errors import LoomTypeError, LoomValueError

T_co = TypeVar("T_co", covariant=True)

# Random draws with replacement come in chunks of this many: a pass of 10**10 samples holds one chunk at a time.
_CHUNK = 1024


def _check_bool(value, name: str, owner: str) -> None:
    if not isinstance(value, bool):
        raise LoomTypeError(f"loom.data.{owner}: {name} should be a boolean value, but got {name}={value!r}")


def _check_positive_int(value, name: str, owner: str) -> None:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise LoomValueError(f"loom.data.{owner}: {name} should be a positive integer value, but got {name}={value!r}")


class Sampler(Generic[T_co]):
    """Base class: `__iter__` yields indices (or lists of indices, for batch samplers).

    Examples
    --------
    >>> class Evens(loom.data.Sampler):
    ...     def __init__(self, n): self.n = n
    ...     def __iter__(self): return iter(range(0, self.n, 2))
    ...     def __len__(self): return (self.n + 1) // 2
    >>> list(Evens(5))
    [0, 2, 4]
    """

    def __init__(self, data_source: Sized | None = None) -> None:
        pass

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError


class SequentialSampler(Sampler[int]):
    """Indices 0, 1, ..., len(data_source) - 1.

    Examples
    --------
    >>> list(loom.data.SequentialSampler(range(3)))
    [0, 1, 2]
    """

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """Random indices: a fresh permutation per pass, or draws with replacement.

    Parameters
    ----------
    data_source : sized
        The dataset.
    replacement : bool
        Draw with replacement. Default: False.
    num_samples : int, optional
        How many indices per pass. Default: `len(data_source)`. Without
        replacement, more than `len(data_source)` means whole permutations
        followed by part of one, as PyTorch does.
    generator : loom.Generator or numpy.random.Generator, optional
        The randomness; default loom's default generator.

    Examples
    --------
    >>> s = loom.data.RandomSampler(range(5), generator=loom.Generator(0))
    >>> sorted(s)
    [0, 1, 2, 3, 4]
    """

    def __init__(self, data_source: Sized, replacement: bool = False, num_samples: int | None = None,
                 generator=None) -> None:
        _check_bool(replacement, "replacement", "RandomSampler")
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        _check_positive_int(self.num_samples, "num_samples", "RandomSampler")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        # The pass's generator is taken now (as before the first index), the indices drawn lazily.
        return self._draw(numpy_rng(self.generator, "loom.data.RandomSampler"), len(self.data_source),
                          self.num_samples)

    def _draw(self, rng: np.random.Generator, n: int, total: int) -> Iterator[int]:
        """With replacement a chunk at a time, without one permutation at a time: nothing of size `total`."""
        if self.replacement:
            for start in range(0, total, _CHUNK):
                yield from rng.integers(0, n, size=min(_CHUNK, total - start)).tolist()
            return
        for _ in range(total // n):
            yield from rng.permutation(n).tolist()
        if total % n:
            yield from rng.permutation(n)[:total % n].tolist()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given indices in a random order (a fresh permutation per pass).

    Examples
    --------
    >>> sorted(loom.data.SubsetRandomSampler([7, 3, 5], generator=loom.Generator(1)))
    [3, 5, 7]
    """

    def __init__(self, indices: Sequence[int], generator=None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        rng = numpy_rng(self.generator, "loom.data.SubsetRandomSampler")
        for i in rng.permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """Indices 0..len(weights)-1 drawn with probabilities proportional to `weights`.

    Parameters
    ----------
    weights : sequence of float or 1-d Tensor
        Non-negative weights (need not sum to one).
    num_samples : int
        How many indices per pass.
    replacement : bool
        Draw with replacement. Default: True. Without it, `num_samples` may not
        exceed the number of non-zero weights.
    generator : loom.Generator or numpy.random.Generator, optional

    Examples
    --------
    >>> s = loom.data.WeightedRandomSampler([0.0, 1.0, 0.0], 4, generator=loom.Generator(0))
    >>> list(s)
    [1, 1, 1, 1]
    """

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None) -> None:
        _check_positive_int(num_samples, "num_samples", "WeightedRandomSampler")
        _check_bool(replacement, "replacement", "WeightedRandomSampler")
        w = np.asarray(weights.numpy(force=True) if hasattr(weights, "numpy") else weights, dtype=np.float64)
        if w.ndim != 1:
            raise LoomValueError("loom.data.WeightedRandomSampler: weights should be a 1d sequence but given weights "
                                 f"have shape {tuple(w.shape)}")
        if w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise LoomValueError("loom.data.WeightedRandomSampler: weights must be finite, non-negative and have a "
                                 "positive sum")
        if not replacement and num_samples > np.count_nonzero(w):
            raise LoomValueError(f"loom.data.WeightedRandomSampler: cannot draw {num_samples} samples without "
                                 f"replacement from {np.count_nonzero(w)} non-zero weights")
        self.weights = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        return self._draw(numpy_rng(self.generator, "loom.data.WeightedRandomSampler"))

    def _draw(self, rng: np.random.Generator) -> Iterator[int]:
        """With replacement a chunk at a time (inverse CDF, as numpy's choice does); without, at most len(weights)."""
        p = self.weights / self.weights.sum()
        if not self.replacement:
            yield from rng.choice(len(p), size=self.num_samples, replace=False, p=p).tolist()
            return
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        for start in range(0, self.num_samples, _CHUNK):
            u = rng.random(min(_CHUNK, self.num_samples - start))
            yield from cdf.searchsorted(u, side="right").tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list[int]]):
    """Groups another sampler's indices into lists of `batch_size`.

    Examples
    --------
    >>> list(loom.data.BatchSampler(loom.data.SequentialSampler(range(5)), 2, drop_last=False))
    [[0, 1], [2, 3], [4]]
    >>> list(loom.data.BatchSampler(range(5), 2, drop_last=True))
    [[0, 1], [2, 3]]
    """

    def __init__(self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool) -> None:
        _check_positive_int(batch_size, "batch_size", "BatchSampler")
        if not isinstance(drop_last, bool):
            raise LoomValueError(f"loom.data.BatchSampler: drop_last should be a boolean value, but got "
                                 f"drop_last={drop_last!r}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size
