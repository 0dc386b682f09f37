"""`torch.autograd.functional`: jacobian, hessian, vjp, jvp, hvp and vhp of a function of tensors.

Reverse mode over loom's autograd, one backward pass per output element (for
jacobians) as PyTorch's default ``vectorize=False``; `jvp` and `hvp` use the
double-backward trick, as PyTorch's do.
"""
from __future__ import annotations

from loom.autograd import enable_grad, grad
from loom.errors import LoomTypeError
from loom.tensor import Tensor, zeros_like

__all__ = ["jacobian", "hessian", "vjp", "jvp", "hvp", "vhp"]


def _as_tuple(x, what: str, fn: str) -> tuple[bool, tuple]:
    is_tuple = isinstance(x, (tuple, list))
    xs = tuple(x) if is_tuple else (x,)
    for k, t in enumerate(xs):
        if not isinstance(t, Tensor):
            raise LoomTypeError(f"loom.torch.autograd.functional.{fn}: {what} must be a Tensor or a tuple of "
                                f"Tensors, got {type(t).__name__} at position {k}")
    return is_tuple, xs


def _prepared(inputs, create_graph: bool):
    """Inputs that require grad, detached from any graph unless the caller wants to differentiate through."""
    return tuple(x.requires_grad_(True) if create_graph and x.requires_grad else x.detach().requires_grad_(True)
                 for x in inputs)


def _grads(outputs, inputs, grad_outputs, create_graph: bool):
    gs = grad(outputs, inputs, grad_outputs=grad_outputs, retain_graph=True, create_graph=create_graph,
              allow_unused=True)
    return tuple(zeros_like(x) if g is None else g for g, x in zip(gs, inputs))


def _detach(ts, create_graph: bool):
    return tuple(t if create_graph else t.detach() for t in ts)


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """`(func(inputs), v^T J)`: the vector-Jacobian product of `func` at `inputs`.

    Examples
    --------
    >>> import loom.torch as torch
    >>> out, g = torch.autograd.functional.vjp(lambda x: x ** 2, torch.tensor([1.0, 3.0]), torch.ones(2))
    >>> g.tolist()
    [2.0, 6.0]
    """
    in_tuple, xs = _as_tuple(inputs, "inputs", "vjp")
    with enable_grad():
        xs = _prepared(xs, create_graph)
        out = func(*xs)
        out_tuple, outs = _as_tuple(out, "the outputs of func", "vjp")
        if v is None:
            if any(o.numel() != 1 for o in outs):
                raise LoomTypeError("loom.torch.autograd.functional.vjp: v may be omitted only when func returns "
                                    f"single-element tensors, got shapes {[list(o.shape) for o in outs]}")
            vs = tuple(None for _ in outs)
        else:
            _, vs = _as_tuple(v, "v", "vjp")
        g = _grads(outs, xs, list(vs) if v is not None else None, create_graph)
    outs = _detach(outs, create_graph)
    g = _detach(g, create_graph)
    return (outs if out_tuple else outs[0]), (g if in_tuple else g[0])


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """`(func(inputs), J v)`: the Jacobian-vector product of `func` at `inputs` (double-backward trick).

    Examples
    --------
    >>> import loom.torch as torch
    >>> out, t = torch.autograd.functional.jvp(lambda x: x ** 2, torch.tensor([1.0, 3.0]), torch.ones(2))
    >>> t.tolist()
    [2.0, 6.0]
    """
    in_tuple, xs = _as_tuple(inputs, "inputs", "jvp")
    if v is None:
        if any(x.numel() != 1 for x in xs):
            raise LoomTypeError("loom.torch.autograd.functional.jvp: v may be omitted only for single-element "
                                "inputs")
        vs = tuple(zeros_like(x) + 1 for x in xs)
    else:
        _, vs = _as_tuple(v, "v", "jvp")
    with enable_grad():
        xs = _prepared(xs, create_graph)
        out = func(*xs)
        out_tuple, outs = _as_tuple(out, "the outputs of func", "jvp")
        us = tuple(zeros_like(o).requires_grad_(True) for o in outs)
        g = _grads(outs, xs, list(us), True)
        t = _grads(g, us, list(vs), create_graph)
    outs = _detach(outs, create_graph)
    t = _detach(t, create_graph)
    return (outs if out_tuple else outs[0]), (t if out_tuple else t[0])


def jacobian(func, inputs, create_graph: bool = False, strict: bool = False, vectorize: bool = False,
             strategy: str = "reverse-mode"):
    """The Jacobian of `func` at `inputs`: ``J[i][j]`` has shape ``outputs[i].shape + inputs[j].shape``
    (unnested where `func` returns, or `inputs` is, a single tensor).

    Examples
    --------
    >>> import loom.torch as torch
    >>> torch.autograd.functional.jacobian(lambda x: x ** 2, torch.tensor([1.0, 3.0])).tolist()
    [[2.0, 0.0], [0.0, 6.0]]
    """
    in_tuple, xs = _as_tuple(inputs, "inputs", "jacobian")
    with enable_grad():
        xs = _prepared(xs, create_graph)
        out = func(*xs)
        out_tuple, outs = _as_tuple(out, "the outputs of func", "jacobian")
        from loom import stack
        jac = []
        for o in outs:
            flat = o.reshape(-1)
            rows = [_grads([flat[k]], xs, None, create_graph) for k in range(flat.numel())]
            per_input = []
            for j, x in enumerate(xs):
                if rows:
                    block = stack([r[j] for r in rows]).reshape(*o.shape, *x.shape)
                else:
                    from loom import zeros
                    block = zeros(*o.shape, *x.shape, dtype=x.dtype)
                per_input.append(block if create_graph else block.detach())
            jac.append(tuple(per_input) if in_tuple else per_input[0])
    return tuple(jac) if out_tuple else jac[0]


def hessian(func, inputs, create_graph: bool = False, strict: bool = False, vectorize: bool = False,
            outer_jacobian_strategy: str = "reverse-mode"):
    """The Hessian of the scalar function `func` at `inputs`: ``H[i][j]`` has shape
    ``inputs[i].shape + inputs[j].shape`` (a single tensor for a single input).

    Examples
    --------
    >>> import loom.torch as torch
    >>> torch.autograd.functional.hessian(lambda x: (x ** 3).sum(), torch.tensor([1.0, 2.0])).tolist()
    [[6.0, 0.0], [0.0, 12.0]]
    """
    in_tuple, xs = _as_tuple(inputs, "inputs", "hessian")

    def gradient(*args):
        out = func(*args)
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise LoomTypeError("loom.torch.autograd.functional.hessian: func must return a single-element tensor, "
                                f"got {type(out).__name__}"
                                f"{'' if not isinstance(out, Tensor) else ' of shape ' + str(list(out.shape))}")
        g = _grads([out.reshape(())], args, None, True)
        return g if in_tuple else g[0]
    return jacobian(gradient, xs if in_tuple else xs[0], create_graph=create_graph)


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """`(func(inputs), v^T H)` for a scalar `func`."""
    in_tuple, xs = _as_tuple(inputs, "inputs", "vhp")
    _, vs = _as_tuple(v, "v", "vhp") if v is not None else (None, tuple(zeros_like(x) + 1 for x in xs))
    with enable_grad():
        xs = _prepared(xs, create_graph)
        out = func(*xs)
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise LoomTypeError("loom.torch.autograd.functional.vhp: func must return a single-element tensor")
        g = _grads([out.reshape(())], xs, None, True)
        h = _grads(list(g), xs, list(vs), create_graph)
    return (out if create_graph else out.detach()), (_detach(h, create_graph) if in_tuple
                                                     else _detach(h, create_graph)[0])


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """`(func(inputs), H v)` for a scalar `func` (equal to `vhp`: the Hessian is symmetric)."""
    return vhp(func, inputs, v, create_graph, strict)
