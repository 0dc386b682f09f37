"""The blocked attention kernels of `loom.codegen.attention`, called directly on strided NumPy views.

Shapes cover the kernel's edges: several key and query blocks, causal and not, L != S, head dims that are
not a multiple of the vector width, q, k, v read in place from one packed (B, T, 3, H, E) buffer as a GPT's
projection leaves them. Each is held to the NumPy formula of `loom.ir.attention` and must give the same bits
on 1 and 3 threads and on a repeat call.
"""
import numpy as np
import pytest

from loom.codegen import attention
from loom.ir.attention import reference_attention, reference_grad


class _Node:
    def __init__(self, op, causal, scale):
        self.op, self.attrs = op, {"causal": causal, "scale": scale}


def _library():
    """The loaded kernels, built in the calling thread if need be."""
    fns = attention.LIBRARY.library()
    if fns is None:
        attention.LIBRARY.done.wait(300)
        fns = attention.LIBRARY.library()
    assert fns is not None, f"the attention kernels did not build: {attention.LIBRARY.state['error']}"
    return fns


def _call(op, arrays, causal, scale, threads):
    """Run the native step of `op` on `arrays` (output first) with `threads` OpenMP threads."""
    fns = _library()
    node = _Node(op, causal, scale)
    meta = attention.meta(node, arrays)
    assert meta is not None, "the kernel must read these layouts"
    cells = np.array([a.ctypes.data for a in arrays], np.uintp)
    refs = cells.ctypes.data + cells.itemsize * np.arange(len(arrays), dtype=np.uintp)
    fns[attention._SYMBOL[op]](refs.ctypes.data, meta.ctypes.data, threads)  # Outputs start as NaN.


def _qkv(rng, B, H, L, S, E, dtype, packed):
    if packed:  # One (B, T, 3, H, E) buffer; q, k, v are strided views of it, as in a GPT block.
        buf = rng.standard_normal((B, L, 3, H, E)).astype(dtype)
        return tuple(buf[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    q = rng.standard_normal((B, H, L, E)).astype(dtype)
    k = rng.standard_normal((B, H, S, E)).astype(dtype)
    v = rng.standard_normal((B, H, S, E)).astype(dtype)
    return q, k, v


CASES = [  # B, H, L, S, E, causal, packed
    (2, 4, 64, 64, 32, True, True),
    (1, 3, 70, 70, 20, True, True),
    (2, 2, 37, 150, 5, False, False),
    (1, 2, 130, 130, 40, True, False),
    (3, 1, 9, 200, 48, False, False),
    (1, 1, 100, 100, 17, True, True),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("B,H,L,S,E,causal,packed", CASES)
def test_attention_kernels_match_the_formula_and_thread_counts(dtype, B, H, L, S, E, causal, packed):
    rng = np.random.default_rng(L * 7 + S + E)
    q, k, v = _qkv(rng, B, H, L, S, E, dtype, packed)
    scale = 1 / np.sqrt(E)
    attrs = {"causal": causal, "scale": scale}
    tol = 2e-5 if dtype == np.float32 else 1e-11
    want = reference_attention(q, k, v, attrs)
    outs = []
    for threads in (1, 3, 1):
        y = np.full((B, H, L, E + 1), np.nan, dtype)
        _call("attention", [y, q, k, v], causal, scale, threads)
        outs.append(y)
    np.testing.assert_allclose(outs[0], want, rtol=tol, atol=tol)
    assert all(np.array_equal(outs[0], o) for o in outs[1:]), "thread counts or repeats changed the bits"
    y = outs[0]
    gy = rng.standard_normal(y.shape).astype(dtype)
    gy[..., E] *= 0.5  # The log-sum-exp's cotangent is honoured too.
    want_g = reference_grad(q, k, v, y, gy, attrs)
    grads = []
    for threads in (1, 3, 1):
        g = np.full((B, H, L + 2 * S, E), np.nan, dtype)
        _call("attention_grad", [g, q, k, v, y, gy], causal, scale, threads)
        grads.append(g)
    np.testing.assert_allclose(grads[0], want_g, rtol=10 * tol, atol=10 * tol)
    assert all(np.array_equal(grads[0], g) for g in grads[1:]), "thread counts or repeats changed the bits"
