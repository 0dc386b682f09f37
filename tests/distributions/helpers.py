"""Build the same distribution in loom and in PyTorch from NumPy parameters, and compare them."""
import numpy as np
import torch

import loom
import loom.distributions  # noqa: F401


def pair(name, params, nograd=(), module_attr=None, **kw):
    """(loom distribution, torch distribution, loom leaves, torch leaves) of class `name`, float64."""
    lp, tp, lleaves, tleaves = {}, {}, {}, {}
    for k, v in params.items():
        if isinstance(v, np.ndarray):
            grad = k not in nograd and v.dtype.kind == "f"
            lp[k] = loom.tensor(v, requires_grad=grad)
            tp[k] = torch.tensor(v, requires_grad=grad)
            if grad:
                lleaves[k], tleaves[k] = lp[k], tp[k]
        else:
            lp[k] = tp[k] = v
    lcls = getattr(loom.distributions, name) if module_attr is None else module_attr[0]
    tcls = getattr(torch.distributions, name) if module_attr is None else module_attr[1]
    return lcls(**lp, **kw), tcls(**tp, **kw), lleaves, tleaves


def close(a, b, rtol=1e-6, atol=1e-8, msg=""):
    a = a.detach().numpy() if isinstance(a, loom.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a.shape == b.shape, f"{msg}: shape {a.shape} != {b.shape}"
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=msg, equal_nan=True)


def compare_grads(lout, tout, lleaves, tleaves, rtol=1e-6, atol=1e-8, msg=""):
    """Gradients of the sum of the finite outputs, with respect to every parameter, agree."""
    tmask = torch.isfinite(tout)
    if not tmask.any() or not any(True for _ in tleaves):
        return
    lmask = loom.tensor(tmask.numpy())
    weights = np.linspace(0.5, 1.5, tout.numel()).reshape(tuple(tout.shape))  # A generic cotangent.
    lsum = loom.where(lmask, lout * loom.tensor(weights), loom.zeros_like(lout)).sum()
    tsum = torch.where(tmask, tout * torch.tensor(weights), torch.zeros_like(tout)).sum()
    for n in tleaves:
        try:
            (b,) = torch.autograd.grad(tsum, [tleaves[n]], allow_unused=True, retain_graph=True)
        except NotImplementedError:  # torch has no derivative here (e.g. igamma in its first argument).
            continue
        if b is None:
            continue
        (a,) = loom.autograd.grad(lsum, [lleaves[n]], allow_unused=True, retain_graph=True)
        assert a is not None, f"{msg}: no loom gradient for {n}"
        close(a, b, rtol, atol, f"{msg} d/d{n}")
