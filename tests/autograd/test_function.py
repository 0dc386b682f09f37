"""loom.autograd.Function (PyTorch's interface), once_differentiable, gradcheck/gradgradcheck.

Each custom function is checked against finite differences and against the
same function written with torch.autograd.Function, eagerly and under
loom.function.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import loom
from loom.autograd import Function, gradcheck, gradgradcheck, once_differentiable
from loom.errors import AutogradError, LoomTypeError


class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g


class ScaledMulAdd(Function):
    """(x * y * scale, x + y): two outputs, a non-tensor argument, needs_input_grad."""

    @staticmethod
    def forward(ctx, x, y, scale):
        ctx.save_for_backward(x, y)
        ctx.scale = scale
        return x * y * scale, x + y

    @staticmethod
    def backward(ctx, g_prod, g_sum):
        x, y = ctx.saved_tensors
        gx = g_prod * y * ctx.scale + g_sum if ctx.needs_input_grad[0] else None
        gy = g_prod * x * ctx.scale + g_sum if ctx.needs_input_grad[1] else None
        return gx, gy, None


class SortWithIndices(Function):
    @staticmethod
    def forward(ctx, x):
        values, idx = loom.sort(x)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return values, idx

    @staticmethod
    def backward(ctx, g, g_idx):
        (idx,) = ctx.saved_tensors
        out = loom.zeros_like(g)
        return out.scatter(0, idx, g)


class Clip(Function):
    """Split style (PyTorch 2): forward without ctx, setup_context."""

    @staticmethod
    def forward(x, lo, hi):
        return x.clamp(lo, hi)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, lo, hi = inputs
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        inside = ((x >= ctx.lo) & (x <= ctx.hi)).to(g.dtype)
        return g * inside, None, None


class OnceExp(Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


def _x(values, dtype=loom.float64):
    return loom.tensor(values, dtype=dtype, requires_grad=True)


def test_single_output_gradient_and_finite_differences():
    x = _x([0.5, -1.5, 2.0])
    y = Cube.apply(x)
    assert y.requires_grad and y.grad_fn is not None
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.array([0.5, -1.5, 2.0]) ** 2)
    assert gradcheck(Cube.apply, (_x([0.3, -0.7, 1.1]),))


def test_second_order_through_a_differentiable_backward():
    x = _x([0.5, -1.5])
    (g,) = loom.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    (gg,) = loom.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), 6 * np.array([0.5, -1.5]))
    assert gradgradcheck(Cube.apply, (_x([0.3, -0.7]),))


def test_two_outputs_non_tensor_argument_and_needs_input_grad():
    xv, yv = np.array([1.0, 2.0, -3.0]), np.array([0.5, -1.0, 4.0])
    x, y = _x(xv), loom.tensor(yv, dtype=loom.float64)
    p, s = ScaledMulAdd.apply(x, y, 2.5)
    (p * 3 + s * s).sum().backward()
    assert y.grad is None
    tx = torch.tensor(xv, requires_grad=True)
    (torch.as_tensor(yv) * tx * 2.5 * 3 + (tx + torch.as_tensor(yv)) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    assert gradcheck(lambda a, b: ScaledMulAdd.apply(a, b, 0.7), (_x([0.2, 0.4]), _x([-1.0, 3.0])))


def test_only_one_output_used_gets_zeros_for_the_other():
    x = _x([1.0, 2.0])
    p, _ = ScaledMulAdd.apply(x, _x([3.0, 4.0]), 1.0)
    p.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 4.0])


def test_non_differentiable_output():
    x = _x([3.0, 1.0, 2.0])
    values, idx = SortWithIndices.apply(x)
    assert not idx.requires_grad and values.requires_grad
    (values * loom.tensor([1.0, 10.0, 100.0], dtype=loom.float64)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [100.0, 1.0, 10.0])


def test_setup_context_style():
    x = _x([-2.0, 0.5, 3.0])
    Clip.apply(x, -1.0, 1.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 1.0, 0.0])


def test_once_differentiable_backward_records_nothing():
    x = _x([0.1, 0.2])
    (g,) = loom.autograd.grad(OnceExp.apply(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), np.exp([0.1, 0.2]))
    assert not g.requires_grad


def test_matches_torch_autograd_function_in_a_training_step():
    class TorchCube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g

    rng = np.random.default_rng(0)
    w0, xb = rng.standard_normal((4, 3)).astype(np.float32) * 0.3, rng.standard_normal((5, 4)).astype(np.float32)
    lw = loom.tensor(w0, requires_grad=True)
    tw = torch.tensor(w0, requires_grad=True)
    for _ in range(3):
        for w, lib, fn in ((lw, loom, Cube), (tw, torch, TorchCube)):
            loss = fn.apply(lib.as_tensor(xb) @ w).mean() if lib is torch else fn.apply(loom.tensor(xb) @ w).mean()
            loss.backward()
            with lib.no_grad():
                w -= 0.1 * w.grad
            w.grad = None
    np.testing.assert_allclose(lw.detach().numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["c", "reference"])
def test_under_loom_function_matches_eager(backend):
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((4, 3)).astype(np.float32) * 0.3
    batches = [loom.tensor(rng.standard_normal((5, 4)).astype(np.float32)) for _ in range(4)]

    def run(traced: bool):
        w = loom.tensor(w0, requires_grad=True)
        opt = loom.optim.SGD([w], lr=0.1)

        def step(x):
            opt.zero_grad()
            p, s = ScaledMulAdd.apply(Cube.apply(x @ w), x @ w, 0.5)
            loss = (p + s).mean()
            loss.backward()
            opt.step()
            return loss
        fn = loom.function(step, backend=backend) if traced else step
        losses = [float(fn(x)) for x in batches]
        return losses, w.detach().numpy()
    eager, traced = run(False), run(True)
    np.testing.assert_allclose(traced[0], eager[0], rtol=1e-6)
    np.testing.assert_allclose(traced[1], eager[1], rtol=1e-6)


def test_errors_name_the_function():
    class TooMany(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g, g

    class WrongShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, g):
            return loom.ones(7)

    with pytest.raises(AutogradError, match="TooMany: backward returned 2 gradients but forward took 1"):
        TooMany.apply(_x([1.0])).sum().backward()
    with pytest.raises(AutogradError, match=r"WrongShape: .* shape \[7\] for argument 0, whose shape is \[2\]"):
        WrongShape.apply(_x([1.0, 2.0])).backward()
    x = _x([1.0, 2.0])
    y = x * 1
    out = Cube.apply(y)
    y.add_(1)
    with pytest.raises(AutogradError, match="Cube"):
        out.sum().backward()

    class SavesNumber(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(3)
            return x

    with pytest.raises(LoomTypeError, match="save_for_backward takes tensors"):
        SavesNumber.apply(_x([1.0]))


def test_gradcheck_catches_a_wrong_backward():
    class Wrong(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.sin()   # should be cos

    with pytest.raises(AutogradError, match="Jacobian mismatch for input 0"):
        gradcheck(Wrong.apply, (_x([0.3, 1.2]),))
    assert gradcheck(Wrong.apply, (_x([0.3, 1.2]),), raise_exception=False) is False
    with pytest.raises(AutogradError, match="need float64"):
        gradcheck(Cube.apply, (_x([0.3], dtype=loom.float32),))


def test_no_grad_mode_records_nothing():
    x = _x([1.0, 2.0])
    with loom.no_grad():
        y = Cube.apply(x)
    assert not y.requires_grad


class SavesIntermediate(Function):
    """Saves a tensor made inside forward, which only the record keeps alive."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y * 2.0

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y * 2.0


def test_backward_lets_go_of_saved_tensors_and_the_records():
    import gc
    import weakref

    from loom.autograd import engine
    x = _x([0.5, 1.0])
    outs, saved, records = [], [], []
    for _ in range(3):
        out = SavesIntermediate.apply(x)
        saved.append(weakref.ref(out._ctx.prim.ctx.saved_tensors[0]))
        records.append(weakref.ref(out._ctx.prim))
        out.sum().backward()
        outs.append(out)
    gc.collect()
    assert all(ref() is None for ref in saved)  # Freed by the backward pass, as PyTorch frees them.
    np.testing.assert_allclose(x.grad.numpy(), 3 * 2 * np.exp([0.5, 1.0]))
    with pytest.raises(AutogradError, match="second time"):
        outs[0].sum().backward()
    del outs, out
    gc.collect()
    assert all(ref() is None for ref in records)  # Nothing (the engine's rule table) keeps a call's record.
    assert len(engine._NEEDS) < 100


def test_retain_graph_keeps_saved_tensors_and_other_outputs_keep_theirs():
    x, y = _x([1.0, 2.0]), _x([3.0, 4.0])
    out = SavesIntermediate.apply(x)
    out.sum().backward(retain_graph=True)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * 2 * np.exp([1.0, 2.0]))
    prod, total = ScaledMulAdd.apply(x, y, 2.0)
    prod.sum().backward()  # The first output's record is freed; the second's still needs x and y.
    total.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [1.0 * 2 + 1, 2.0 * 2 + 1])


def test_a_tensor_hook_that_returns_no_tensor_or_another_shape_is_a_clear_error():
    import loom
    x = loom.ones(3, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g.numpy())  # E.g. a lambda around dict.setdefault that keeps a NumPy copy.
    with pytest.raises(loom.LoomTypeError, match=r"<lambda> returned a ndarray; a gradient hook returns None"):
        y.sum().backward()
    x = loom.ones(3, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g[:2])
    with pytest.raises(loom.LoomTypeError, match=r"changed the gradient's shape from \[3\] to \[2\]"):
        y.sum().backward()
    x = loom.ones(3, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g * 10)
    y.sum().backward()
    assert x.grad.tolist() == [20.0, 20.0, 20.0]
