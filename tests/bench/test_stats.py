"""loom.bench.stats: per-step summaries, throughput, ratios to the best peer and the interleaved run order."""
from __future__ import annotations

from collections import Counter

import pytest

from loom.bench import stats


def test_summarize_median_min_max_per_step():
    s = stats.summarize([0.30, 0.10, 0.20, 0.50, 0.40], steps=10)
    assert s == {"median_ms": pytest.approx(30.0), "min_ms": pytest.approx(10.0), "max_ms": pytest.approx(50.0),
                 "repeats": 5}


def test_summarize_even_count_takes_mean_of_middle_two():
    s = stats.summarize([1.0, 4.0, 2.0, 3.0], steps=1)
    assert s["median_ms"] == pytest.approx(2500.0)
    assert (s["min_ms"], s["max_ms"]) == (pytest.approx(1000.0), pytest.approx(4000.0))


def test_summarize_is_robust_to_one_outlier():
    s = stats.summarize([0.01] * 6 + [10.0], steps=1)
    assert s["median_ms"] == pytest.approx(10.0)
    assert s["max_ms"] == pytest.approx(10000.0)


@pytest.mark.parametrize("blocks, steps", [([], 1), ([0.1], 0)])
def test_summarize_rejects_bad_input(blocks, steps):
    with pytest.raises(ValueError, match="loom.bench.summarize"):
        stats.summarize(blocks, steps)


def test_throughput():
    assert stats.throughput(2.0, 128) == pytest.approx(64000.0)
    assert stats.throughput(1000.0, 2048) == pytest.approx(2048.0)
    with pytest.raises(ValueError):
        stats.throughput(0.0, 1)


def test_best_peer_ignores_loom_and_missing_peers():
    tp = {"loom": 1000.0, "loom-function": 900.0, "torch": 100.0, "torch-compile": 150.0, "jax": None}
    assert stats.best_peer(tp) == "torch-compile"
    assert stats.best_peer({"loom": 5.0}) is None


def test_ratios_to_best_peer():
    tp = {"loom": 50.0, "loom-function": 300.0, "torch": 200.0, "jax": 250.0}
    r = stats.ratios_to_best_peer(tp)
    assert r == {"loom": pytest.approx(0.2), "loom-function": pytest.approx(1.2), "torch": pytest.approx(0.8),
                 "jax": pytest.approx(1.0)}


def test_ratios_without_any_peer_are_none():
    assert stats.ratios_to_best_peer({"loom": 3.0, "loom-function": 4.0}) == {"loom": None, "loom-function": None}


def test_interleave_runs_every_framework_once_per_repeat():
    fws = ["loom", "loom-function", "torch", "jax"]
    order = stats.interleave(fws, 7)
    assert len(order) == 28
    for r in range(7):
        assert sorted(fw for rep, fw in order if rep == r) == sorted(fws)
    # Repeats come one after another: no framework gets two blocks in a row of the same repeat.
    assert [rep for rep, _ in order] == sorted(rep for rep, _ in order)


def test_interleave_rotates_which_framework_goes_first():
    fws = ["a", "b", "c"]
    order = stats.interleave(fws, 6)
    firsts = [order[3 * r][1] for r in range(6)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]
    assert Counter(firsts) == Counter({"a": 2, "b": 2, "c": 2})
    # Each repeat keeps the cyclic order, so every framework follows every neighbour equally.
    assert [fw for _, fw in order[3:6]] == ["b", "c", "a"]


def test_interleave_single_framework_and_bad_repeats():
    assert stats.interleave(["torch"], 3) == [(0, "torch"), (1, "torch"), (2, "torch")]
    assert stats.interleave([], 2) == []
    with pytest.raises(ValueError):
        stats.interleave(["a"], 0)
