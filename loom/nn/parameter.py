"""`Parameter` and `Buffer`: tensors a Module registers when they are assigned to it."""
from __future__ import annotations

from loom.tensor import Tensor, empty


class Parameter(Tensor):
    """A tensor that is a module parameter: assigning it to a Module attribute registers it.

    Parameters
    ----------
    data : Tensor, optional
        The initial value (its history is dropped; the value is shared, not copied).
        Default: an empty float tensor.
    requires_grad : bool
        Whether the parameter requires gradient. Default: True.

    Examples
    --------
    >>> p = loom.nn.Parameter(loom.zeros(2))
    >>> p.requires_grad, isinstance(p, loom.Tensor)
    (True, True)
    """

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True) -> Parameter:
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"loom.nn.Parameter: expected a loom.Tensor as data, got {type(data).__name__}")
        p = Tensor.__new__(cls)
        p._init(data._node)
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True) -> None:
        pass  # Everything happens in __new__.

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __reduce_ex__(self, proto):
        return (_rebuild_parameter, (self.detach(), self.requires_grad))


def _rebuild_parameter(data: Tensor, requires_grad: bool) -> Parameter:
    return Parameter(data, requires_grad)


class Buffer(Tensor):
    """A tensor marked as a buffer: assigning it to a Module attribute registers it (as `torch.nn.Buffer`).

    Parameters
    ----------
    data : Tensor
        The buffer's value.
    persistent : bool
        Whether the buffer is part of the module's state_dict. Default: True.

    Examples
    --------
    >>> m = loom.nn.Module()
    >>> m.steps = loom.nn.Buffer(loom.zeros(()))
    >>> list(m.state_dict())
    ['steps']
    """

    def __new__(cls, data: Tensor | None = None, *, persistent: bool = True) -> Buffer:
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"loom.nn.Buffer: expected a loom.Tensor as data, got {type(data).__name__}")
        b = Tensor.__new__(cls)
        b._init(data._node)
        b.persistent = persistent
        return b

    def __init__(self, data: Tensor | None = None, *, persistent: bool = True) -> None:
        pass
