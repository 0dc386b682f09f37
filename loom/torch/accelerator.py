"""`torch.accelerator`: the current accelerator, which in this build is none (loom runs on the cpu)."""
from loom.errors import DeviceError


def is_available() -> bool:
    return False


def current_accelerator(check_available: bool = False):
    """None: no accelerator is present."""
    return None


def device_count() -> int:
    return 0


def current_device_index() -> int:
    raise DeviceError("loom.torch.accelerator.current_device_index: no accelerator is available; loom runs "
                      "on the cpu")


current_device_idx = current_device_index


def set_device_index(device) -> None:
    raise DeviceError("loom.torch.accelerator.set_device_index: no accelerator is available; loom runs on the cpu")


set_device_idx = set_device_index


def synchronize(device=None) -> None:
    """No-op: there is no accelerator work to wait for."""
