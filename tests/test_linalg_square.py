"""loom.linalg.inv / det / slogdet / cholesky / solve against torch.linalg: values and gradients."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import loom
from loom.errors import ShapeError


def _spd(rng, *batch, n=4):
    a = rng.standard_normal((*batch, n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


@pytest.mark.parametrize("batch", [(), (3,)])
def test_values_and_gradients_match_torch(batch):
    rng = np.random.default_rng(len(batch))
    a = _spd(rng, *batch)
    b = rng.standard_normal((*batch, 4, 2))
    v = rng.standard_normal((*batch, 4))
    cases = {
        "inv": (lambda lib, A, B: lib.linalg.inv(A)),
        "det": (lambda lib, A, B: lib.linalg.det(A)),
        "slogdet": (lambda lib, A, B: lib.linalg.slogdet(A)[1] * lib.linalg.slogdet(A).sign),
        "cholesky": (lambda lib, A, B: lib.linalg.cholesky(A)),
        "cholesky_upper": (lambda lib, A, B: lib.linalg.cholesky(A, upper=True)),
        "solve": (lambda lib, A, B: lib.linalg.solve(A, B)),
        "solve_right": (lambda lib, A, B: lib.linalg.solve(A, np_t(lib, np.swapaxes(b, -1, -2)), left=False)),
        "solve_vector": (lambda lib, A, B: lib.linalg.solve(A, np_t(lib, v))),
    }

    def np_t(lib, x):
        return lib.tensor(x) if lib is loom else torch.tensor(x)

    for name, f in cases.items():
        la, lb = loom.tensor(a, requires_grad=True), loom.tensor(b, requires_grad=True)
        ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        lo, to = f(loom, la, lb), f(torch, ta, tb)
        np.testing.assert_allclose(lo.detach().numpy(), to.detach().numpy(), rtol=1e-8, atol=1e-10, err_msg=name)
        w = np.random.default_rng(7).standard_normal(tuple(to.shape))
        (lo * loom.tensor(w)).sum().backward()
        (to * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(la.grad.numpy(), ta.grad.numpy(), rtol=1e-7, atol=1e-9, err_msg=name)
        if tb.grad is not None:
            np.testing.assert_allclose(lb.grad.numpy(), tb.grad.numpy(), rtol=1e-7, atol=1e-9, err_msg=name)


def test_loom_torch_linalg_names_and_errors():
    import loom.torch as ltorch
    assert ltorch.linalg.inv is loom.linalg.inv and ltorch.linalg.solve is loom.linalg.solve
    with pytest.raises(ShapeError, match="A must be a \\(batch of\\) square matrix"):
        loom.linalg.solve(loom.ones(2, 3), loom.ones(2))
    with pytest.raises(ShapeError, match="A is 2x2 but B has 3 rows"):
        loom.linalg.solve(loom.eye(2), loom.ones(3, 1))
