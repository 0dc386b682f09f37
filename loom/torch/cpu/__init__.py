"""`torch.cpu`: the cpu as PyTorch's device module describes it (loom's one device)."""
from __future__ import annotations

from loom.torch.cpu import amp  # noqa: F401


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> str:
    return "cpu"


def synchronize(device=None) -> None:
    """No-op: loom's cpu work is complete when a value is read."""


def set_device(device) -> None:
    """No-op: there is one cpu device."""
