"""`torch.nn.modules.utils`: the helpers layers use to turn an int argument into a tuple (`_pair(3) == (3, 3)`)."""
from __future__ import annotations

import collections.abc
import itertools


def _ntuple(n: int, name: str = "parse"):
    def parse(x):
        if isinstance(x, collections.abc.Iterable) and not isinstance(x, str):
            return tuple(x)
        return tuple(itertools.repeat(x, n))
    parse.__name__ = name
    return parse


_single = _ntuple(1, "_single")
_pair = _ntuple(2, "_pair")
_triple = _ntuple(3, "_triple")
_quadruple = _ntuple(4, "_quadruple")


def _reverse_repeat_tuple(t, n: int) -> tuple:
    """Reverse `t` and repeat each element `n` times (conv padding to F.pad's order)."""
    return tuple(x for x in reversed(t) for _ in range(n))
