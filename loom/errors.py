"""Errors loom raises at the user: each names the op and what it expected."""


class LoomError(RuntimeError):
    """Base of every loom error (a RuntimeError, as PyTorch raises)."""


class ShapeError(LoomError, ValueError):
    """Shapes that do not fit the op."""


class DTypeError(LoomError, TypeError):
    """A dtype the op does not accept."""


class LoomIndexError(LoomError, IndexError):
    """An index or dim out of range."""


class LoomZeroDivisionError(LoomError, ZeroDivisionError):
    """Integer division or remainder by zero."""


class GraphError(LoomError):
    """An IR edit or query that would break the graph."""


class AutogradError(LoomError):
    """A gradient that cannot be computed as asked."""


def fmt_shape(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"
