"""`torch.mps`: Apple's Metal device is not available in this build; seeding and syncing are no-ops."""
from loom.errors import DeviceError


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def manual_seed(seed: int) -> None:
    """No-op: there is no MPS generator."""


def seed() -> None:
    """No-op."""


def synchronize() -> None:
    """No-op."""


def empty_cache() -> None:
    """No-op."""


def current_allocated_memory() -> int:
    return 0


def driver_allocated_memory() -> int:
    return 0


def get_rng_state(device="mps"):
    raise DeviceError("loom.torch.mps.get_rng_state: this build of loom has no MPS device; run on the cpu")
