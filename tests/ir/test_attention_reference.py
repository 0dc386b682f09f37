"""The attention references' in-place NumPy path gives the bits of the plain formula (the path jax.numpy takes)."""
import numpy as np
import pytest

from loom.ir.attention import reference_attention, reference_grad


class _PlainNumPy:
    """NumPy under another name: the references take their generic (array-API) path with it."""

    def __getattr__(self, name):
        return getattr(np, name)


CASES = [((32, 4, 16, 8), 16, True), ((2, 3, 5, 4), 7, False), ((2, 5, 4), 3, True), ((3, 6, 8), 6, True),
         ((4, 7, 3), 2, False), ((4, 0, 3), 2, False)]


@pytest.mark.parametrize("qshape,kv,causal", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_in_place_attention_matches_the_plain_formula(qshape, kv, causal, dtype):
    rng = np.random.default_rng(0)
    q = rng.standard_normal(qshape).astype(dtype)
    k = rng.standard_normal(qshape[:-2] + (kv, qshape[-1])).astype(dtype)
    v = rng.standard_normal(k.shape).astype(dtype)
    attrs = {"causal": causal, "scale": 0.37}
    y, y_plain = reference_attention(q, k, v, attrs), reference_attention(q, k, v, attrs, xp=_PlainNumPy())
    assert y.shape == y_plain.shape and y.dtype == y_plain.dtype and y.tobytes() == y_plain.tobytes()
    gy = rng.standard_normal(y.shape).astype(dtype)
    g, g_plain = reference_grad(q, k, v, y, gy, attrs), reference_grad(q, k, v, y, gy, attrs, xp=_PlainNumPy())
    assert g.shape == g_plain.shape and g.dtype == g_plain.dtype and g.tobytes() == g_plain.tobytes()
    if q.size and causal:
        assert np.isfinite(y).all()  # Every causal row keeps key 0, so no row is all -inf.
