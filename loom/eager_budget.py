"""`loom.memory_budget`: one eager memory budget for both eager paths.

The reference path (the default backend) evicts computed buffers and
recomputes them when read (`loom.runtime.dtr`, DTR); the compiled backend
fits each compiled graph's arena under the budget (`loom.set_memory_budget`,
the remat pass).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from loom.compiler.eager import get_memory_budget, set_memory_budget
from loom.compiler.remat import parse_budget
from loom.runtime import dtr


@contextlib.contextmanager
def memory_budget(budget: int | str, strict: bool = False) -> Iterator[dtr.Pool]:
    """Run the block's eager code under a memory budget; results are bit-identical.

    On the reference eager path, when the computed buffers alive exceed
    `budget` bytes, the buffer with the lowest recompute cost per byte and
    per unit of staleness is evicted and computed again, from its recipe,
    when something reads it (DTR); buffers made outside the block (weights
    loaded before it, user arrays) are not counted. On the compiled backend
    each graph's planned arena is fitted under the budget by
    rematerialisation, as `loom.set_memory_budget` does. A value still
    evicted when the block ends is computed again when it is next read.

    Parameters
    ----------
    budget : int or str
        Bytes, or a string such as ``"256MB"`` or ``"64MiB"``.
    strict : bool
        For the compiled backend: raise when a graph cannot fit.

    Yields
    ------
    loom.runtime.dtr.Pool
        Its ``evictions``, ``recomputes``, ``live_bytes`` and ``peak_bytes``
        say what the budget did.

    Examples
    --------
    >>> import loom
    >>> x = loom.ones(256, 256)             # 256 KiB per float32 value below
    >>> def f():
    ...     a = (x * 2).exp()
    ...     _ = a.sum().item()                # a is computed now and read again below
    ...     return ((a + 1).sin() * 3 + a).sum().item()
    >>> want = f()
    >>> with loom.memory_budget("300KB") as pool:
    ...     got = f()
    >>> got == want, pool.evictions > 0
    (True, True)
    """
    nbytes = parse_budget(budget, "loom.memory_budget")
    previous = get_memory_budget()
    set_memory_budget(nbytes, strict)
    try:
        with dtr.budget(nbytes) as pool:
            yield pool
    finally:
        set_memory_budget(previous)
