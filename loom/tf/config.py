"""`tf.config`: device queries (loom runs on the CPU here) and eager-function switches."""
from __future__ import annotations

from loom.tf.function import functions_run_eagerly, run_functions_eagerly  # noqa: F401


class PhysicalDevice:
    """A device TensorFlow would list: its name and type."""

    def __init__(self, name: str, device_type: str) -> None:
        self.name, self.device_type = name, device_type

    def __repr__(self) -> str:
        return f"PhysicalDevice(name='{self.name}', device_type='{self.device_type}')"


def list_physical_devices(device_type: str | None = None) -> list:
    """The devices loom computes on: one CPU (no GPU is reported)."""
    cpu = PhysicalDevice("/physical_device:CPU:0", "CPU")
    return [cpu] if device_type in (None, "CPU") else []


list_logical_devices = list_physical_devices


def set_visible_devices(devices, device_type: str | None = None) -> None:
    """Accepted for compatibility; loom uses the CPU."""


class experimental:  # noqa: N801  (TensorFlow's namespace spelling)
    """`tf.config.experimental`: memory-growth switches (accepted, no effect on the CPU)."""

    @staticmethod
    def set_memory_growth(device, enable: bool) -> None:
        """Accepted for compatibility."""

    list_physical_devices = staticmethod(list_physical_devices)


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.config", "tf.config")
