"""Views the native step copies share memory above the planned arena by lifetime (loom.runtime.native._pack)."""
import numpy as np

from loom.runtime.native import _ALIGN, _pack
from tests.compiler.test_memory_budget import small_gpt  # noqa: F401


def _check(spans, start, offs):
    ends = [o + -(-max(s, 1) // _ALIGN) * _ALIGN for o, (_, _, s) in zip(offs, spans)]
    assert all(o >= start and o % _ALIGN == start % _ALIGN for o in offs)
    for i, (f1, l1, _) in enumerate(spans):
        for j, (f2, l2, _) in enumerate(spans[:i]):
            if f1 <= l2 and f2 <= l1:  # Live together: their bytes must not overlap.
                assert ends[i] <= offs[j] or ends[j] <= offs[i], (spans, offs)
    return max(ends, default=start) - start


def test_regions_never_live_together_share_bytes():
    spans = [(0, 2, 4096), (3, 5, 4096), (6, 9, 4096), (1, 4, 64)]
    offs = _pack(spans, 128)
    extent = _check(spans, 128, offs)
    assert offs[0] == offs[1] == offs[2] == 128 and extent == 4096 + 64


def test_random_lifetimes_never_overlap_in_memory():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        first = rng.integers(0, 50, n)
        spans = [(int(f), int(f + rng.integers(0, 10)), int(rng.integers(1, 5000))) for f in first]
        extent = _check(spans, 64, _pack(spans, 64))
        peak = max(sum(-(-s // _ALIGN) * _ALIGN for f, lst, s in spans if f <= t <= lst) for t in range(60))
        assert peak <= extent <= sum(-(-s // _ALIGN) * _ALIGN for _, _, s in spans)


def test_copies_go_into_the_planned_arenas_gaps():
    # A planned value holds [0, 4096) over steps 0-3 and [4096, 8192) over steps 5-9: a copy living over
    # steps 5-6 fits at 0, one over steps 2-6 goes above both.
    fixed = [(0, 4096, 0, 3), (4096, 8192, 5, 9)]
    offs = _pack([(5, 6, 4096), (2, 6, 64)], 0, fixed)
    assert offs == [0, 8192]


def test_the_gpt_steps_copied_views_fit_in_the_planned_arena(small_gpt):  # noqa: F811
    """Under a budget, no view the native step copies needs memory above the planned arena."""
    import warnings

    import loom
    from tests.compiler.test_memory_budget import _arena, _outputs, _run

    build, data = small_gpt
    *_, base_fn = _run(build, data, 2)
    budget = _outputs(base_fn) + _arena(base_fn) // 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", loom.LoomWarning)
        *_, fn = _run(build, data, 2, budget)
    (entry,) = fn._cache.values()
    exe = entry.exe
    assert exe._native is not None and exe._native.arena_bytes <= -(-exe.plan.arena_bytes // _ALIGN) * _ALIGN
