"""Whether new ops record backward history (`no_grad`, `enable_grad`)."""
from __future__ import annotations

import functools
import threading

class _State(threading.local):
    enabled = True  # Every thread starts with grad enabled; a class default, so reading it never raises.


_state = _State()


def is_grad_enabled() -> bool:
    """Whether ops in this thread record history for backward (False inside `no_grad`).

    Examples
    --------
    >>> with loom.no_grad():
    ...     loom.is_grad_enabled()
    False
    """
    return _state.enabled


def _set(flag: bool) -> None:
    _state.enabled = flag


class _GradMode:
    """Context manager and decorator that sets grad mode for its body."""

    flag = True

    def __enter__(self):
        self._prev = is_grad_enabled()
        _set(self.flag)
        return self

    def __exit__(self, *exc):
        _set(self._prev)
        return False

    def __call__(self, fn):
        flag = self.flag

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = is_grad_enabled()
            _set(flag)
            try:
                return fn(*args, **kwargs)
            finally:
                _set(prev)
        return wrapper


class no_grad(_GradMode):
    """Ops inside do not record history; `with loom.no_grad(): ...` or `@loom.no_grad()`."""

    flag = False


class enable_grad(_GradMode):
    """Re-enable history recording inside a `no_grad` block."""

    flag = True


class set_grad_enabled(_GradMode):
    """Set grad mode to `mode` for the block (or for good, when not used as a context)."""

    def __init__(self, mode: bool) -> None:
        self.flag = bool(mode)
        self._prev = is_grad_enabled()
        _set(self.flag)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _set(self._prev)
        return False

    def __call__(self, fn):
        _set(self._prev)  # As a decorator it only applies inside `fn`.
        return super().__call__(fn)


class inference_mode(no_grad):
    """Alias of no_grad (loom keeps no extra inference-only state)."""

    def __init__(self, mode: bool = True) -> None:
        self.flag = not mode
