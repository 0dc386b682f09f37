"""The attention and layer_norm references' in-place NumPy paths give the bits of the plain formula (the path
jax.numpy takes)."""
import numpy as np
import pytest

from loom.ir.attention import reference_attention, reference_grad
from loom.ir.rows import reference_ln, reference_ln_grad


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
    before = [a.copy() for a in (q, k, v)]
    y, y_plain = reference_attention(q, k, v, attrs), reference_attention(q, k, v, attrs, xp=_PlainNumPy())
    assert y.shape == y_plain.shape and y.dtype == y_plain.dtype and y.tobytes() == y_plain.tobytes()
    gy = rng.standard_normal(y.shape).astype(dtype)
    g, g_plain = reference_grad(q, k, v, y, gy, attrs), reference_grad(q, k, v, y, gy, attrs, xp=_PlainNumPy())
    assert g.shape == g_plain.shape and g.dtype == g_plain.dtype and g.tobytes() == g_plain.tobytes()
    assert all(np.array_equal(a, c) for a, c in zip((q, k, v), before))  # Inputs are never written.
    if q.size and causal:
        assert np.isfinite(y).all()  # Every causal row keeps key 0, so no row is all -inf.


@pytest.mark.parametrize("shape", [(32, 16, 24), (5, 7), (3, 1), (0, 4), (6,), (2, 3, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_in_place_layer_norm_matches_the_plain_formula(shape, dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3 + 100).astype(dtype)  # Far from zero: the shifted centring matters.
    w, b = (rng.standard_normal(shape[-1:]).astype(dtype) for _ in range(2))
    gy = rng.standard_normal(shape).astype(dtype)
    before = [a.copy() for a in (x, w, b, gy)]
    for xs in (x, x[..., ::-1]):  # Contiguous and strided inputs.
        with np.errstate(all="ignore"):  # An empty batch has empty means, as in the plain formula.
            y, y_plain = reference_ln(xs, w, b, {"eps": 1e-5}), reference_ln(xs, w, b, {"eps": 1e-5}, xp=_PlainNumPy())
            g = reference_ln_grad(xs, w, gy, {"eps": 1e-5})
            g_plain = reference_ln_grad(xs, w, gy, {"eps": 1e-5}, xp=_PlainNumPy())
        assert y.shape == y_plain.shape == xs.shape and y.tobytes() == y_plain.tobytes()
        assert g.shape == g_plain.shape and g.dtype == g_plain.dtype and g.tobytes() == g_plain.tobytes()
    assert all(np.array_equal(a, c) for a, c in zip((x, w, b, gy), before))  # Inputs are never written.
