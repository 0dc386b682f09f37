"""DistributedSampler: each rank's share of a dataset's indices, as ``torch.utils.data.DistributedSampler``."""
from __future__ import annotations

import math
import numbers
from typing import Iterator, Sized

import numpy as np

from loom.data.sampler import Sampler, _check_bool
from loom.errors import LoomTypeError, LoomValueError


def _int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise LoomTypeError(f"loom.data.DistributedSampler: {name} must be an int, got {value!r}")
    return int(value)


class DistributedSampler(Sampler[int]):
    """The indices of `dataset` that rank `rank` of `num_replicas` reads, disjoint across ranks.

    Semantics are PyTorch's: without ``drop_last`` the index list is padded
    (repeating its start) to a multiple of `num_replicas`, so every rank gets
    ``ceil(len / num_replicas)`` indices; with ``drop_last`` the tail is
    dropped and every rank gets ``floor(len / num_replicas)``. Rank ``r``
    takes every ``num_replicas``-th index starting at ``r``. With `shuffle`, the
    order is a permutation seeded by ``seed + epoch``, the same on every rank
    (NumPy's generator, so not PyTorch's exact order); call `set_epoch` at
    the start of each epoch so that epochs differ.

    Parameters
    ----------
    dataset : Sized
        Anything with ``len``.
    num_replicas, rank : int, optional
        Default: the world size and rank of the default `loom.distributed` process group.
    shuffle : bool
        Permute the indices (default True).
    seed : int
        The same on every rank (default 0).
    drop_last : bool
        Drop the tail instead of padding (default False).

    Examples
    --------
    >>> [list(loom.data.DistributedSampler(range(5), num_replicas=2, rank=r, shuffle=False)) for r in (0, 1)]
    [[0, 2, 4], [1, 3, 0]]
    """

    def __init__(self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            import loom.distributed as dist
            if not dist.is_initialized():
                raise LoomValueError("loom.data.DistributedSampler: num_replicas and rank default to the process "
                                     "group's, but loom.distributed.init_process_group() has not been called; "
                                     "call it or pass num_replicas and rank")
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        num_replicas, rank = _int(num_replicas, "num_replicas"), _int(rank, "rank")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise LoomValueError(f"loom.data.DistributedSampler: invalid rank {rank}, rank should be in the interval "
                                 f"[0, {num_replicas - 1}] (num_replicas={num_replicas})")
        _check_bool(shuffle, "shuffle", "DistributedSampler")
        _check_bool(drop_last, "drop_last", "DistributedSampler")
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, _int(seed, "seed"), drop_last
        self.epoch = 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(n)
        else:
            indices = np.arange(n)
        if not self.drop_last:
            pad = self.total_size - n
            if pad > 0:
                indices = np.concatenate([indices, np.resize(indices, pad)]) if n else indices
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use `epoch` for the next pass's permutation (call it before each epoch; all ranks the same)."""
        self.epoch = _int(epoch, "epoch")
