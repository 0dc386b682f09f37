"""Gradient clipping, as `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_`."""
from __future__ import annotations

import math
from typing import Iterable

from loom.autograd.grad_mode import no_grad
from loom.errors import LoomError
from loom.functional.shape import stack
from loom.tensor import Tensor, tensor


def _grads(parameters) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _norm(t: Tensor, norm_type: float) -> Tensor:
    """The vector p-norm of all of `t`'s elements."""
    a = t.abs()
    if norm_type == math.inf:
        return a.max() if t.numel() else tensor(0.0, dtype=t.dtype)
    if norm_type == -math.inf:
        return a.min()
    if norm_type == 0:
        return (a != 0).to(t.dtype).sum()
    if norm_type == 1:
        return a.sum()
    if norm_type == 2:
        return (a * a).sum().sqrt()
    return (a ** norm_type).sum() ** (1.0 / norm_type)


def get_total_norm(tensors: Iterable[Tensor] | Tensor, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach=None) -> Tensor:
    """The p-norm of the norms of `tensors` (as if they were concatenated into one vector).

    Examples
    --------
    >>> loom.nn.utils.get_total_norm([loom.tensor([3.0]), loom.tensor([4.0])]).item()
    5.0
    """
    ts = [tensors] if isinstance(tensors, Tensor) else [t for t in tensors if t is not None]
    norm_type = float(norm_type)
    if not ts:
        return tensor(0.0)
    with no_grad():
        total = _norm(stack([_norm(t.detach(), norm_type) for t in ts]), norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise LoomError(f"loom.nn.utils.clip_grad_norm_: the total norm of order {norm_type} for gradients from "
                        "`parameters` is non-finite, so it cannot be clipped. To disable this error and scale "
                        "the gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm: float, total_norm: Tensor, foreach=None) -> None:
    """Scale gradients in place by max_norm / (total_norm + 1e-6) when that is below 1."""
    grads = _grads(parameters)
    if not grads:
        return
    coef = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
    with no_grad():
        for g in grads:
            g.mul_(coef.to(g.dtype))


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> Tensor:
    """Rescale the gradients of `parameters` in place so their total norm is at most `max_norm`.

    Parameters
    ----------
    parameters : iterable of Tensor or Tensor
        Tensors whose `.grad` is clipped (those without a gradient are skipped).
    max_norm : float
    norm_type : float
        The p of the p-norm; `math.inf` for the max norm. Default: 2.
    error_if_nonfinite : bool
        Raise if the total norm is nan or inf.

    Returns
    -------
    Tensor
        The total norm of the gradients before clipping (a 0-d tensor).

    Examples
    --------
    >>> w = loom.nn.Parameter(loom.ones(4))
    >>> (w * 3.0).sum().backward()
    >>> loom.nn.utils.clip_grad_norm_([w], max_norm=1.0).item()
    6.0
    >>> round(w.grad.norm().item(), 4)
    1.0
    """
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    parameters = list(parameters)
    total = get_total_norm(_grads(parameters), norm_type, error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total)
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient of `parameters` into [-clip_value, clip_value], in place.

    Examples
    --------
    >>> w = loom.nn.Parameter(loom.ones(2))
    >>> (w * 5.0).sum().backward()
    >>> loom.nn.utils.clip_grad_value_([w], 0.5)
    >>> w.grad.tolist()
    [0.5, 0.5]
    """
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(-clip_value, clip_value)
