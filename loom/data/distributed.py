"""DistributedSampler: each rank's share of a dataset's indices, as ``torch.utils.data.DistributedSampler``."""
from __future__ import annotations

import math
import numbers
from typing import Iterator, Sized

import numpy as np

from loom.data.sampler import Sampler, _check_bool
from loom.errors import LoomTypeError, LoomValueError


def _int(value, name: str, who: str = "DistributedSampler") -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise LoomTypeError(f"loom.data.{who}: {name} must be an int, got {value!r}")
    return int(value)


def _replicas(num_replicas, rank, who: str) -> tuple[int, int]:
    """`num_replicas` and `rank`, each defaulting to the default process group's; checked."""
    if num_replicas is None or rank is None:
        import loom.distributed as dist
        if not dist.is_initialized():
            raise LoomValueError(f"loom.data.{who}: num_replicas and rank default to the process group's, but "
                                 "loom.distributed.init_process_group() has not been called; call it or pass "
                                 "num_replicas and rank")
        num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
        rank = dist.get_rank() if rank is None else rank
    num_replicas, rank = _int(num_replicas, "num_replicas", who), _int(rank, "rank", who)
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise LoomValueError(f"loom.data.{who}: invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}] (num_replicas={num_replicas})")
    return num_replicas, rank


def rank_shards(files, num_replicas: int | None = None, rank: int | None = None) -> list[str]:
    """The record shards one rank reads: every `num_replicas`-th shard from `rank` on, disjoint across ranks.

    `files` is what `loom.data.RecordDataset` and `loom.data.RecordPipeline`
    take (a shard prefix, a glob, a list of paths); the result is passed to
    them on each rank. Every rank gets the same number of shards only when
    their count is a multiple of `num_replicas` (write the set with
    ``RecordWriter(..., num_shards=k * world_size)``); otherwise the first ranks
    get one more, and ranks whose steps must match should cut their epoch to
    the shortest rank's (or shard by example with `DistributedSampler` over a
    `RecordDataset`).

    Parameters
    ----------
    files : str, path or sequence of paths
    num_replicas, rank : int, optional
        Default: the world size and rank of the default `loom.distributed` process group.

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "d")
    >>> with loom.data.RecordWriter(p, num_shards=4) as w:
    ...     for i in range(8):
    ...         w.write({"i": i})
    >>> [os.path.basename(f) for f in loom.data.rank_shards(p, num_replicas=2, rank=1)]
    ['d-00001-of-00004.lrec', 'd-00003-of-00004.lrec']
    """
    from loom.data.records import resolve_files
    num_replicas, rank = _replicas(num_replicas, rank, "rank_shards")
    found = resolve_files(files)
    if len(found) < num_replicas:
        raise LoomValueError(f"loom.data.rank_shards: {len(found)} shard(s) cannot give each of {num_replicas} "
                             f"ranks one; write the records in at least {num_replicas} shards (a multiple of "
                             "the world size gives every rank as many), or shard by example with "
                             "DistributedSampler over a RecordDataset")
    return found[rank::num_replicas]


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
        num_replicas, rank = _replicas(num_replicas, rank, "DistributedSampler")
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
