"""Flatten and Unflatten: reshape layers for use inside Sequential."""
from __future__ import annotations

from loom.nn.module import Module
from loom.tensor import Tensor


class Flatten(Module):
    """Flatten dims `start_dim`..`end_dim` into one (the batch dim is kept by default).

    Examples
    --------
    >>> loom.nn.Flatten()(loom.zeros(32, 1, 5, 5)).shape
    loom.Size([32, 25])
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Expand dim `dim` into the shape `unflattened_size`.

    Examples
    --------
    >>> loom.nn.Unflatten(1, (2, 5))(loom.zeros(2, 10)).shape
    loom.Size([2, 2, 5])
    """

    def __init__(self, dim: int, unflattened_size) -> None:
        super().__init__()
        if not isinstance(dim, int):
            raise TypeError(f"loom.nn.Unflatten: invalid type {type(dim).__name__} for dim; an int is expected")
        if not isinstance(unflattened_size, (tuple, list)) or \
                not all(isinstance(s, int) for s in unflattened_size):
            raise TypeError(f"loom.nn.Unflatten: unflattened_size must be a tuple of ints, got "
                            f"{unflattened_size!r}")
        self.dim = dim
        self.unflattened_size = unflattened_size

    def forward(self, input: Tensor) -> Tensor:
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
