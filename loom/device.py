"""Devices. This build runs on the cpu; the name space is ready for cuda."""
from __future__ import annotations

from loom.errors import DeviceError, LoomTypeError


class Device:
    """A device such as ``loom.device("cpu")``."""

    __slots__ = ("type", "index")
    type: str
    index: int | None

    def __init__(self, spec: str | Device = "cpu", index: int | None = None) -> None:
        if isinstance(spec, Device):
            self.type, self.index = spec.type, spec.index
            return
        if not isinstance(spec, str):
            raise LoomTypeError(f"loom.device: expected a string such as 'cpu', got {type(spec).__name__}")
        kind, _, idx = spec.partition(":")
        if kind not in ("cpu", "cuda"):
            raise DeviceError(f"loom.device: unknown device type {kind!r}; expected 'cpu' or 'cuda'")
        self.type = kind
        self.index = int(idx) if idx else index

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = Device(other)
        return isinstance(other, Device) and self.type == other.type and \
            (self.index or 0) == (other.index or 0)

    def __hash__(self) -> int:
        return hash((self.type, self.index or 0))

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None else ")")


def device(spec="cpu", index: int | None = None) -> Device:
    """A device, as `torch.device`: ``loom.device("cpu")``; CUDA devices raise `DeviceError` (cpu only).

    Examples
    --------
    >>> loom.device("cpu")
    device(type='cpu')
    """
    return Device(spec, index)
