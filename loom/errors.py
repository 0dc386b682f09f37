"""Errors loom raises at the user: each names the op and what it expected."""


class LoomError(RuntimeError):
    """Base of every loom error (a RuntimeError, as PyTorch raises)."""


class LoomTypeError(LoomError, TypeError):
    """An argument of a kind the op does not take (a list for a tensor, a float for a dim)."""


class LoomValueError(LoomError, ValueError):
    """An argument value the op does not take (an unknown mode name, a negative count)."""


class ShapeError(LoomValueError):
    """Shapes that do not fit the op."""


class DTypeError(LoomTypeError):
    """A dtype the op does not accept."""


class LinAlgError(LoomValueError):
    """A matrix the linear-algebra op cannot take: singular, not positive-definite (PyTorch's LinAlgError)."""


class LoomIndexError(LoomError, IndexError):
    """An index or dim out of range."""


class LoomZeroDivisionError(LoomError, ZeroDivisionError):
    """Integer division or remainder by zero."""


class DeviceError(LoomError):
    """A device that does not exist or is not available in this build."""


class GraphError(LoomError):
    """An IR edit or query that would break the graph."""


class AutogradError(LoomError):
    """A gradient that cannot be computed as asked."""


class MemoryBudgetError(LoomError):
    """A memory budget the compiler cannot meet (raised when the caller asked for strict=True)."""


class LoomWarning(UserWarning):
    """Something loom did differently from what was asked, and kept running (e.g. a missed memory budget)."""


def fmt_shape(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"
