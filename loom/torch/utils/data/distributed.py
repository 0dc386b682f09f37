"""`torch.utils.data.distributed`: DistributedSampler, one replica's share of a dataset."""
from __future__ import annotations

import math

import numpy as np

from loom.errors import LoomError, LoomValueError
from loom.data import Sampler


class DistributedSampler(Sampler):
    """The indices of replica `rank` of `num_replicas`, as `torch.utils.data.DistributedSampler`.

    loom.distributed is not available yet, so `num_replicas` and `rank` must be
    given (PyTorch reads them from the process group). Each epoch's order is a
    permutation seeded by `seed + epoch` (call `set_epoch`), padded by wrapping
    around (or cut, with `drop_last`) so every replica gets the same count.

    Examples
    --------
    >>> from loom.torch.utils.data import DistributedSampler
    >>> list(DistributedSampler(range(5), num_replicas=2, rank=1, shuffle=False))
    [1, 3, 0]
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            raise LoomError("loom.torch.utils.data.DistributedSampler: give num_replicas and rank; there is no "
                            "process group to read them from (loom.distributed is not available yet)")
        if not 0 <= rank < num_replicas:
            raise LoomValueError(f"loom.torch.utils.data.DistributedSampler: invalid rank {rank}, rank should be "
                                 f"in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        order = np.random.default_rng(self.seed + self.epoch).permutation(n) if self.shuffle else np.arange(n)
        idx = order.tolist()
        if not self.drop_last and self.total_size > n:
            idx += (idx * math.ceil((self.total_size - n) / max(n, 1)))[:self.total_size - n]
        idx = idx[:self.total_size]
        return iter(idx[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
