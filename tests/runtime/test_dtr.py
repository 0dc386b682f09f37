"""Eager memory budget (loom.memory_budget, loom.runtime.dtr): evict and recompute, bit-identically."""
import numpy as np
import pytest

import loom
from loom.runtime import dtr


def _mlp_losses(steps, budget=None, forward_first=True):
    loom.manual_seed(0)
    nn = loom.nn
    model = nn.Sequential(nn.Linear(32, 256), nn.GELU(approximate="tanh"), nn.Linear(256, 256),
                          nn.GELU(approximate="tanh"), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 10))
    opt = loom.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    data = [(loom.tensor(rng.standard_normal((128, 32)).astype(np.float32)), loom.tensor(rng.integers(0, 10, 128)))
            for _ in range(2)]
    losses = []
    pool = None

    def run():
        for k in range(steps):
            x, y = data[k % 2]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            if forward_first:
                losses.append(loss.item())  # The forward is computed now; its activations wait for backward.
            loss.backward()
            opt.step()
            if not forward_first:
                losses.append(loss.item())
        return [p.detach().numpy().copy() for p in model.parameters()]
    with loom.backend("reference"):
        if budget is None:
            params = run()
        else:
            with loom.memory_budget(budget) as pool:
                params = run()
    return losses, params, pool


@pytest.mark.parametrize("forward_first", [True, False])
def test_mlp_training_under_an_eager_budget_is_bit_identical(forward_first):
    base_losses, base_params, _ = _mlp_losses(3, forward_first=forward_first)
    losses, params, pool = _mlp_losses(3, "400KB", forward_first)
    assert pool.evictions > 0 and pool.recomputes > 0
    assert [np.float32(v).tobytes() for v in losses] == [np.float32(v).tobytes() for v in base_losses]
    for a, b in zip(params, base_params):
        assert a.tobytes() == b.tobytes()
    assert dtr.ACTIVE is None  # The block ended: the pool stopped.


def test_budget_bounds_the_live_computed_bytes_and_ranks_by_cost_size_staleness():
    pool = dtr.Pool(3 * 4096)
    x = loom.ones(1024)
    with loom.backend("reference"):
        dtr.ACTIVE = pool
        try:
            a = (x * 2.0).exp()       # Old, cheap, read again only at the end.
            b = (a + 1.0).sin()
            c = (b * 3.0).cos()
            d = (c + 2.0).tanh()
            out = (d + a).sum()
            got = out.item()
        finally:
            pool.close()
    assert pool.evictions > 0
    # Every value computed: 6 of 4 KiB at most, more than the 3-value budget; never above budget + the newest.
    assert pool.peak_bytes <= 3 * 4096 + 4096
    with loom.backend("reference"):
        a = (x * 2.0).exp()
        want = ((((a + 1.0).sin() * 3.0).cos() + 2.0).tanh() + a).sum().item()
    assert np.float32(got).tobytes() == np.float32(want).tobytes()


def test_memory_budget_parses_and_restores():
    with pytest.raises(loom.LoomValueError, match="loom.memory_budget"):
        with loom.memory_budget("many bytes"):
            pass
    before = loom.get_memory_budget()
    with loom.memory_budget("1MiB") as pool:
        assert pool.budget == 2**20 and loom.get_memory_budget() == 2**20 and dtr.ACTIVE is pool
    assert loom.get_memory_budget() == before and dtr.ACTIVE is None


def test_small_gpt_training_under_an_eager_budget_is_bit_identical(monkeypatch):
    from loom.bench.workloads import api
    from loom.bench.workloads import gpt as gpt_workload

    for name, value in (("LAYERS", 2), ("HEADS", 2), ("D_MODEL", 32), ("CONTEXT", 16)):
        monkeypatch.setattr(gpt_workload, name, value)
    a = api("loom")
    batches = [tuple(loom.tensor(x) for x in b)
               for b in gpt_workload.batches(np.random.default_rng(1), n=2, batch=4)]

    def train(budget):
        loom.manual_seed(0)
        model = gpt_workload.model(a)
        opt = gpt_workload.optimizer(a, model.parameters())
        losses, pool = [], None

        def run():
            for k in range(3):
                opt.zero_grad()
                loss = gpt_workload.loss(a, model, *batches[k % 2])
                losses.append(loss.item())
                loss.backward()
                opt.step()
            return [p.detach().numpy().copy() for p in model.parameters()]
        with loom.backend("reference"):
            if budget is None:
                params = run()
            else:
                with loom.memory_budget(budget) as pool:
                    params = run()
        return losses, params, pool

    base_losses, base_params, _ = train(None)
    losses, params, pool = train("100KB")
    assert pool.evictions > 0 and pool.recomputes > 0
    assert [np.float32(v).tobytes() for v in losses] == [np.float32(v).tobytes() for v in base_losses]
    assert all(x.tobytes() == y.tobytes() for x, y in zip(params, base_params))
