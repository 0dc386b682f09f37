"""Flatten parameters into one vector and back (`parameters_to_vector`, `vector_to_parameters`)."""
from __future__ import annotations

from typing import Iterable

from loom.autograd.grad_mode import no_grad
from loom.errors import ShapeError, fmt_shape
from loom.functional.shape import cat
from loom.tensor import Tensor


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """All parameters flattened and concatenated into one 1-d tensor (differentiable).

    Examples
    --------
    >>> loom.nn.utils.parameters_to_vector(loom.nn.Linear(3, 2).parameters()).shape
    loom.Size([8])
    """
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of the 1-d `vec` into `parameters`, in place."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"loom.nn.utils.vector_to_parameters: expected vec to be a loom.Tensor, got "
                        f"{type(vec).__name__}")
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise ShapeError(f"loom.nn.utils.vector_to_parameters: vec of shape {fmt_shape(vec.shape)} does not hold "
                         f"the {total} values of the parameters")
    offset = 0
    with no_grad():
        for p in params:
            n = p.numel()
            p.copy_(vec[offset:offset + n].reshape(tuple(p.shape)))
            offset += n
