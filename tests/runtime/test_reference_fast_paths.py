"""The reference backend's fast paths give the same bits as the plain NumPy formulas.

Covers: writing an op's result over a dead input's memory (`reference._compute`),
`where`, constants as strided views, the binary fast path and the
row-major weight gradient of ``x @ W.T``.
"""
import numpy as np
import pytest

import loom
from loom.runtime import reference


@pytest.fixture(autouse=True)
def _reference_backend():
    with loom.backend("reference"):
        yield


def test_dead_intermediates_are_overwritten_with_identical_results():
    x = loom.randn(64, 128)
    xn = x.numpy().copy()
    y = ((x * 2.0 + 1.0).exp() - x).tanh()
    before = reference.in_place_count
    out = y.numpy()
    assert reference.in_place_count - before == 4  # add, exp, sub, tanh: each input dead; mul reads x.
    ref = np.tanh(np.exp(xn * np.float32(2) + np.float32(1)) - xn)
    assert np.array_equal(out, ref)
    assert np.array_equal(x.numpy(), xn)  # A tensor the user holds is never written over.


def test_values_still_held_are_not_overwritten():
    x = loom.randn(64, 128)
    a = x * 3.0
    b = a.exp()          # `a` is held by the user: its memory must survive.
    c = a + b
    c.numpy()
    xn = x.numpy()
    np.testing.assert_array_equal(a.numpy(), xn * np.float32(3))
    np.testing.assert_array_equal(b.numpy(), np.exp(xn * np.float32(3)))
    np.testing.assert_array_equal(c.numpy(), xn * np.float32(3) + np.exp(xn * np.float32(3)))


def test_shared_input_is_not_overwritten_while_another_op_needs_it():
    x = loom.randn(4096)
    t = x * 2.0
    u = t.exp() + t.sin()  # `t` feeds two pending ops: the first must not clobber it.
    xn = x.numpy() * np.float32(2)
    np.testing.assert_array_equal(u.numpy(), np.exp(xn) + np.sin(xn))


def test_from_numpy_memory_is_never_reused():
    arr = np.arange(8192, dtype=np.float32)
    t = loom.from_numpy(arr)
    (t + 1.0).numpy()
    del t
    np.testing.assert_array_equal(arr, np.arange(8192, dtype=np.float32))


def test_views_of_numpy_memory_are_copied_only_when_held():
    a = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    w = loom.ones(64, 8)
    x = loom.from_numpy(a)
    before = reference.window_copies
    got = (x.permute(1, 0) @ w).numpy()  # The transposed input is read once, then freed: no copy.
    assert reference.window_copies == before
    np.testing.assert_allclose(got, a.T @ np.ones((64, 8), np.float32), rtol=1e-6)
    held = x.flip(0)[2:].flip(1)  # Views of views of `a`, the last one held.
    held.realize()
    assert reference.window_copies > before
    want = a[::-1][2:, ::-1].copy()
    a[:] = 0.0  # A NumPy write after the value was computed does not reach it.
    np.testing.assert_array_equal(held.numpy(), want)


def test_backward_matches_with_reuse():
    import torch
    xn = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
    x = loom.tensor(xn, requires_grad=True)
    ((x * 1.5).tanh() * x + 2.0).exp().sum().backward()
    xt = torch.tensor(xn, requires_grad=True)
    ((xt * 1.5).tanh() * xt + 2.0).exp().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [loom.float32, loom.float64, loom.int32, loom.int16, loom.bool])
def test_where_matches_numpy(dtype):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 96)) * 10
    b = rng.standard_normal((64, 96)) * 10
    a[0, :4] = [np.nan, np.inf, -0.0, -np.inf]
    c = rng.random((64, 96)) > 0.5
    if dtype.is_floating_point:
        an, bn = a.astype(dtype.np), b.astype(dtype.np)
    else:
        an, bn = np.nan_to_num(a).astype(dtype.np), np.nan_to_num(b).astype(dtype.np)
    out = loom.where(loom.tensor(c), loom.tensor(an).t().t(), loom.tensor(bn)).numpy()
    assert out.tobytes() == np.where(c, an, bn).tobytes()
    # A broadcast constant branch and a transposed input.
    out = loom.where(loom.tensor(c.T), loom.tensor(an).t(), loom.zeros((), dtype=dtype)).numpy()
    assert out.tobytes() == np.where(c.T, an.T, np.zeros((), dtype.np)).tobytes()
    # A broadcast mask (as attention's causal mask) takes np.where itself.
    row = loom.tensor(c[:1]).expand(64, 96)
    out = loom.where(row, loom.tensor(an), loom.tensor(bn)).numpy()
    assert out.tobytes() == np.where(c[:1], an, bn).tobytes()


def test_constants_are_read_only_views():
    t = loom.full((3, 4), 2.5)
    arr = t.numpy()
    assert arr.shape == (3, 4) and (arr == 2.5).all()
    assert loom.full((2,), 300, dtype=loom.uint8).tolist() == [44, 44]  # Wraps, as PyTorch.
    assert loom.full((2,), 1.5, dtype=loom.bfloat16).float().tolist() == [1.5, 1.5]


def test_binary_fast_path_keeps_promotion_and_errors():
    x = loom.ones(3)
    assert (x + 1).dtype == loom.float32 and (2 * x).dtype == loom.float32
    assert (x + True).dtype == loom.float32
    assert (x.double() + x).dtype == loom.float64       # Mixed dtypes take the promoting path.
    assert (loom.ones(3, dtype=loom.int32) / 2).dtype == loom.float32
    assert (1.0 - x).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(loom.LoomError):
        x + loom.ones(4)


def test_linear_weight_gradient_is_row_major():
    lin = loom.nn.Linear(32, 16)
    x = loom.randn(8, 32)
    lin(x).sum().backward()
    g = lin.weight.grad.numpy()
    assert g.flags.c_contiguous
    np.testing.assert_allclose(g, np.ones((8, 16), np.float32).T @ x.numpy(), rtol=1e-5, atol=1e-5)


def test_division_power_and_unary_reuse_give_numpy_bits():
    x = loom.rand(64, 128, dtype=loom.float64) + 0.5
    xn = x.numpy().copy()
    y = (((x * 2.0) / 3.0) ** 1.5).reciprocal().abs().sqrt().log1p()
    before = reference.in_place_count
    out = y.numpy()
    assert reference.in_place_count - before == 6
    assert out.dtype == np.float64
    ref = np.log1p(np.sqrt(np.abs(np.reciprocal(np.power(np.true_divide(xn * 2.0, 3.0), 1.5)))))
    assert np.array_equal(out, ref)
