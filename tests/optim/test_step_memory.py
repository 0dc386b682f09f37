"""Eager training keeps no per-step garbage: object counts and traced memory stay flat over steps."""
import collections
import gc
import tracemalloc


import loom
import loom.nn as nn
import loom.nn.functional as F


def _trainer(opt_name: str = "Adam"):
    loom.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.BatchNorm1d(16), nn.GELU(), nn.Dropout(0.1), nn.LayerNorm(16),
                          nn.Linear(16, 4))
    opt = getattr(loom.optim, opt_name)(model.parameters(), lr=0.01)
    x, y = loom.randn(8, 12), loom.randint(0, 4, (8,))

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return model, step


def _counts() -> collections.Counter:
    gc.collect()
    return collections.Counter(type(o).__name__ for o in gc.get_objects())


def test_object_counts_stay_flat_over_eager_steps():
    for opt_name in ("Adam", "SGD"):
        _, step = _trainer(opt_name)
        for _ in range(10):
            step()
        before = _counts()
        for _ in range(40):  # One-time caches (ABC's, NumPy's small allocations) fill up: bounded, not garbage.
            step()
        mid = _counts()
        tracemalloc.start()
        try:
            for _ in range(20):  # Blocks allocated before tracing and freed since are not counted: settle first.
                step()
            base = tracemalloc.get_traced_memory()[0]
            for _ in range(40):
                step()
            after = _counts()
            grown_bytes = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        grown = {k: after[k] - mid[k] for k in after if after[k] - mid[k] > 2}
        assert not grown, f"{opt_name}: objects grew over 40 eager steps: {grown}"
        assert after["Node"] <= before["Node"] + 2, (opt_name, before["Node"], after["Node"])
        # A per-step leak of a few nodes (a pending chain) is kilobytes a step.
        assert grown_bytes < 16 * 1024, (opt_name, grown_bytes)


def test_optimizer_step_computes_running_statistics():
    # Written in place under no grad and read by nothing in the step: computed at the step barrier, not left
    # as a chain growing by a few nodes a step until the lazy depth limit.
    model, step = _trainer()
    bn = model[1]
    step()
    for t in (bn.running_mean, bn.running_var, bn.num_batches_tracked):
        assert t._node.buffer is not None
    for _ in range(3):
        step()
    assert bn.running_mean._node.depth == 0 and int(bn.num_batches_tracked) == 4


def test_running_statistics_bits_unchanged_by_the_barrier(monkeypatch):
    # Computed at each step barrier or lazily at the end, the statistics and weights have the same bits.
    def train():
        model, step = _trainer("SGD")
        for _ in range(3):
            step()
        return [t.detach().numpy().copy() for t in list(model.parameters()) + list(model.buffers())]
    eager = train()
    import loom.optim.optimizer as optimizer
    monkeypatch.setattr(optimizer, "take_written", lambda: [])
    lazy = train()
    assert len(eager) == len(lazy)
    for a, b in zip(eager, lazy):
        assert a.tobytes() == b.tobytes()
