"""`torch.serialization`: torch.save/torch.load and the allow-list of globals a `weights_only` load may unpickle."""
from __future__ import annotations

import contextlib

from loom.io import torch_format as _tf
from loom.io.torch_format import add_safe_globals, clear_safe_globals, get_safe_globals  # noqa: F401
from loom.torch import load, save  # noqa: F401

DEFAULT_PROTOCOL = 2


@contextlib.contextmanager
def safe_globals(safe_globals: list):
    """Allow `safe_globals` for `weights_only` loads inside the region only.

    Examples
    --------
    >>> import loom.torch as torch
    >>> with torch.serialization.safe_globals([complex]):
    ...     pass
    """
    before = dict(_tf._SAFE_GLOBALS)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        _tf._SAFE_GLOBALS.clear()
        _tf._SAFE_GLOBALS.update(before)
