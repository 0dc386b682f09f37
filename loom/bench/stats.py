"""The benchmark's arithmetic: per-step summaries, throughput, ratios to the best peer, run order.

Kept free of I/O and of any framework so that it can be tested on its own.

Examples
--------
>>> s = summarize([0.10, 0.12, 0.11], steps=10)
>>> s["median_ms"], s["min_ms"], s["max_ms"]
(11.0, 10.0, 12.0)
>>> throughput(s["median_ms"], 128)
11636.363636363636
>>> interleave(["a", "b", "c"], 2)
[(0, 'a'), (0, 'b'), (0, 'c'), (1, 'b'), (1, 'c'), (1, 'a')]
"""
from __future__ import annotations

import statistics
from typing import Iterable, Sequence

from loom.bench.workloads import PEERS


def summarize(block_seconds: Sequence[float], steps: int) -> dict[str, float]:
    """Median, min and max milliseconds per step over timed blocks of `steps` steps each.

    Parameters
    ----------
    block_seconds : sequence of float
        Wall time of each timed block (one per repeat).
    steps : int
        Steps in each block.

    Returns
    -------
    dict with ``median_ms``, ``min_ms``, ``max_ms`` (per step) and ``repeats``.

    Examples
    --------
    >>> summarize([0.2, 0.4], steps=2)["median_ms"]
    150.0
    """
    if steps < 1:
        raise ValueError(f"loom.bench.summarize: steps must be >= 1, got {steps}")
    if not block_seconds:
        raise ValueError("loom.bench.summarize: no timed blocks")
    per_step = [1e3 * s / steps for s in block_seconds]
    return {"median_ms": statistics.median(per_step), "min_ms": min(per_step), "max_ms": max(per_step),
            "repeats": len(per_step)}


def throughput(ms_per_step: float, samples_per_step: int) -> float:
    """Samples (or tokens, nodes) per second at `ms_per_step` milliseconds per step."""
    if ms_per_step <= 0:
        raise ValueError(f"loom.bench.throughput: ms_per_step must be positive, got {ms_per_step}")
    return samples_per_step * 1e3 / ms_per_step


def best_peer(throughputs: dict[str, float], peers: Iterable[str] = PEERS) -> str | None:
    """The peer framework with the highest throughput among those measured (None if none was).

    Examples
    --------
    >>> best_peer({"loom": 9.0, "torch": 5.0, "jax": 7.0})
    'jax'
    """
    measured = [(throughputs[p], p) for p in peers if throughputs.get(p) is not None]
    if not measured:
        return None
    return max(measured)[1]


def ratios_to_best_peer(throughputs: dict[str, float], peers: Iterable[str] = PEERS) -> dict[str, float | None]:
    """Each framework's throughput divided by the best peer's (>1 means faster than every peer).

    Examples
    --------
    >>> ratios_to_best_peer({"loom": 50.0, "torch": 100.0, "jax": 80.0})
    {'loom': 0.5, 'torch': 1.0, 'jax': 0.8}
    >>> ratios_to_best_peer({"loom": 50.0})
    {'loom': None}
    """
    best = best_peer(throughputs, peers)
    if best is None:
        return {k: None for k in throughputs}
    return {k: (v / throughputs[best] if v is not None else None) for k, v in throughputs.items()}


def interleave(frameworks: Sequence[str], repeats: int) -> list[tuple[int, str]]:
    """The order of timed blocks: every framework once per repeat, the starting one rotating.

    Machine noise (another process, a frequency change) then hits every
    framework alike, and no framework always runs right after the same
    neighbour or always first.

    Examples
    --------
    >>> interleave(["x", "y"], 3)
    [(0, 'x'), (0, 'y'), (1, 'y'), (1, 'x'), (2, 'x'), (2, 'y')]
    """
    if repeats < 1:
        raise ValueError(f"loom.bench.interleave: repeats must be >= 1, got {repeats}")
    n = len(frameworks)
    order = []
    for r in range(repeats):
        for i in range(n):
            order.append((r, frameworks[(r + i) % n]))
    return order
