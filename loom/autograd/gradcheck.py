"""Finite-difference checks of gradients (PyTorch's ``gradcheck`` and ``gradgradcheck``).

Examples
--------
>>> import loom
>>> x = loom.tensor([0.5, -1.0, 2.0], dtype=loom.float64, requires_grad=True)
>>> loom.autograd.gradcheck(lambda t: (t.sin() * t).sum(), (x,))
True
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from loom.errors import AutogradError, fmt_shape


def _outputs(fn: Callable, inputs: Sequence) -> list:
    from loom.tensor import Tensor
    out = fn(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o for o in outs if isinstance(o, Tensor) and o.dtype.is_floating_point]


def _jacobians(fn: Callable, inputs: Sequence, eps: float):
    """Numerical and analytical Jacobians, one (outputs x input elements) pair per differentiable input."""
    from loom.autograd.engine import grad
    from loom.tensor import tensor
    diff = [k for k, t in enumerate(inputs) if getattr(t, "requires_grad", False)]
    outs = _outputs(fn, inputs)
    sizes = [o.numel() for o in outs]
    total = int(sum(sizes))
    numeric = []
    for k in diff:
        x = inputs[k]
        base = x.detach().numpy().astype(np.float64)
        J = np.zeros((total, base.size))
        for j in range(base.size):
            cols = []
            for sign in (1.0, -1.0):
                pert = base.copy().reshape(-1)
                pert[j] += sign * eps
                args = list(inputs)
                args[k] = tensor(pert.reshape(base.shape), dtype=x.dtype, requires_grad=True)
                vals = [o.detach().numpy().astype(np.float64).reshape(-1) for o in _outputs(fn, args)]
                cols.append(np.concatenate(vals) if vals else np.zeros(0))
            J[:, j] = (cols[0] - cols[1]) / (2 * eps)
        numeric.append(J)
    analytic = [np.zeros((total, inputs[k].numel())) for k in diff]
    row = 0
    for o in outs:
        flat = o.numel()
        for i in range(flat):
            seed = np.zeros(flat)
            seed[i] = 1.0
            gs = grad([o], [inputs[k] for k in diff],
                      grad_outputs=[tensor(seed.reshape(tuple(o.shape)), dtype=o.dtype)],
                      retain_graph=True, allow_unused=True)
            for a, g in zip(analytic, gs):
                if g is not None:
                    a[row + i] = g.detach().numpy().astype(np.float64).reshape(-1)
        row += flat
    return diff, numeric, analytic


def gradcheck(fn: Callable, inputs: Sequence, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True) -> bool:
    """Compare the gradients of `fn` at `inputs` with central finite differences.

    Every input that requires grad is perturbed element by element; each
    output element is differentiated by one backward pass. Use float64
    inputs: float32 finite differences are too coarse for the default
    tolerances. Returns True, or raises `loom.AutogradError` naming the input
    and the largest difference (returns False with ``raise_exception=False``).
    """
    for k, t in enumerate(inputs):
        if getattr(t, "requires_grad", False) and t.dtype.name != "float64":
            raise AutogradError(f"loom.autograd.gradcheck: input {k} is {t.dtype.name}{fmt_shape(t.shape)}; "
                                "finite differences need float64 inputs")
    diff, numeric, analytic = _jacobians(fn, inputs, eps)
    for k, n, a in zip(diff, numeric, analytic):
        bad = np.abs(n - a) > atol + rtol * np.abs(n)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            msg = (f"loom.autograd.gradcheck: Jacobian mismatch for input {k} at output element {i}, input element "
                   f"{j}: numerical {n[i, j]:.6g}, analytical {a[i, j]:.6g} (max |difference| "
                   f"{np.abs(n - a).max():.3g}; atol {atol}, rtol {rtol})")
            if raise_exception:
                raise AutogradError(msg)
            return False
    return True


def gradgradcheck(fn: Callable, inputs: Sequence, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
                  raise_exception: bool = True, seed: int = 0) -> bool:
    """`gradcheck` of the gradient of `fn` (second order), with fixed random output gradients."""
    from loom.autograd.engine import grad
    from loom.tensor import tensor
    outs = _outputs(fn, inputs)
    rng = np.random.default_rng(seed)
    gos = [tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype) for o in outs]
    diff = [k for k, t in enumerate(inputs) if getattr(t, "requires_grad", False)]

    def first_order(*args):
        os = _outputs(fn, args)
        gs = grad(os, [args[k] for k in diff], grad_outputs=gos, create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)
    return gradcheck(first_order, inputs, eps, atol, rtol, raise_exception)
