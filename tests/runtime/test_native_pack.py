"""Views the native step copies share memory above the planned arena by lifetime (loom.runtime.native._pack)."""
import numpy as np

from loom.runtime.native import _ALIGN, _pack


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
