"""The compiled eager backend's plan cache is bounded in bytes and evicts least recently used plans."""
import numpy as np
import pytest

import loom
from loom.compiler import eager


@pytest.fixture
def small_cache():
    saved = (dict(eager._CACHE), dict(eager._FOOTPRINT), eager._CACHE_BYTES, dict(eager.stats))
    eager._CACHE.clear()
    eager._FOOTPRINT.clear()
    eager.stats["bytes"] = 0
    yield
    eager._CACHE.clear()
    eager._CACHE.update(saved[0])
    eager._FOOTPRINT.clear()
    eager._FOOTPRINT.update(saved[1])
    eager._CACHE_BYTES = saved[2]
    eager.stats.update(saved[3])


def _step(n: int) -> np.ndarray:
    """A pending graph whose structure (and so plan) depends on `n`."""
    x = loom.ones(n, 64)
    y = ((x * 2.0 + 1.0).exp() * x - 3.0).tanh().sum(1)
    return y.numpy()


def test_cache_stays_under_its_byte_bound(small_cache):
    with loom.backend("compiled"):
        _step(8)
        one = eager.stats["bytes"]
        assert one > 0 and len(eager._CACHE) == 1
        eager.set_cache_bytes(int(one * 2.5))
        before = eager.stats["evictions"]
        for n in range(9, 17):
            np.testing.assert_allclose(_step(n), np.full(n, np.tanh(np.e ** 3 - 3.0) * 64), rtol=1e-5)
            assert eager.stats["bytes"] <= int(one * 2.5) + one  # Under the bound, give or take one plan.
            assert eager.stats["bytes"] == sum(eager._FOOTPRINT[k] for k in eager._CACHE)
        assert eager.stats["evictions"] - before >= 5
        assert len(eager._CACHE) <= 3


def test_a_hit_makes_a_plan_most_recently_used(small_cache):
    with loom.backend("compiled"):
        _step(4)
        first = next(iter(eager._CACHE))
        _step(5)
        _step(4)  # A hit: the plan for 4 moves to the end.
        assert list(eager._CACHE)[-1] == first
        eager.set_cache_bytes(eager._FOOTPRINT[first])  # Room for one: the older plan (5) goes.
        assert list(eager._CACHE) == [first]


def test_cache_recounts_after_an_outside_clear(small_cache):
    with loom.backend("compiled"):
        _step(6)
        eager._CACHE.clear()
        _step(7)
        assert eager.stats["bytes"] == sum(eager._FOOTPRINT[k] for k in eager._CACHE)
        assert len(eager._CACHE) == 1


def test_set_cache_bytes_rejects_bad_values():
    with pytest.raises(loom.LoomError):
        eager.set_cache_bytes(-1)
    with pytest.raises(loom.LoomError):
        eager.set_cache_bytes("1GB")
