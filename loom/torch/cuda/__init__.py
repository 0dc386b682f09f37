"""`torch.cuda` for a build without CUDA: queries answer honestly, seeding and syncing are harmless no-ops.

Programs written for both GPU and CPU guard their GPU paths with
`torch.cuda.is_available()`; here it is False, device counts are 0, seeding
calls succeed (there is no CUDA generator to seed) and calls that need a real
device raise loom's DeviceError saying so.
"""
from __future__ import annotations

import contextlib

from loom.errors import DeviceError
from loom.torch.cuda import amp  # noqa: F401

_NO_CUDA = "this build of loom has no CUDA device (torch.cuda.is_available() is False); run on the cpu"


def _no_device(op: str):
    raise DeviceError(f"loom.torch.cuda.{op}: {_NO_CUDA}")


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False


def init() -> None:
    _no_device("init")


def device_count() -> int:
    return 0


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return False


def is_tf32_supported() -> bool:
    return False


def manual_seed(seed: int) -> None:
    """No CUDA generator to seed: a no-op, as in PyTorch without CUDA."""


def manual_seed_all(seed: int) -> None:
    """No CUDA generators to seed: a no-op."""


def seed() -> None:
    """No-op (no CUDA generator)."""


def seed_all() -> None:
    """No-op (no CUDA generators)."""


def synchronize(device=None) -> None:
    """No-op: there is no CUDA work to wait for."""


def empty_cache() -> None:
    """No-op: there is no CUDA caching allocator."""


def ipc_collect() -> None:
    """No-op."""


def memory_allocated(device=None) -> int:
    return 0


def max_memory_allocated(device=None) -> int:
    return 0


def memory_reserved(device=None) -> int:
    return 0


def max_memory_reserved(device=None) -> int:
    return 0


def reset_peak_memory_stats(device=None) -> None:
    """No-op."""


def current_device() -> int:
    _no_device("current_device")


def set_device(device) -> None:
    _no_device("set_device")


def get_device_name(device=None) -> str:
    _no_device("get_device_name")


def get_device_properties(device=None):
    _no_device("get_device_properties")


def get_device_capability(device=None):
    _no_device("get_device_capability")


def mem_get_info(device=None):
    _no_device("mem_get_info")


def get_rng_state(device="cuda"):
    _no_device("get_rng_state")


def set_rng_state(new_state, device="cuda") -> None:
    _no_device("set_rng_state")


def get_rng_state_all() -> list:
    return []


def set_rng_state_all(new_states) -> None:
    """No-op: there are no CUDA generators."""


@contextlib.contextmanager
def device(device):
    """Entering a CUDA device context raises DeviceError (there is none)."""
    _no_device("device")
    yield


def stream(stream=None):
    _no_device("stream")


class Stream:
    def __init__(self, *args, **kwargs) -> None:
        _no_device("Stream")


class Event:
    def __init__(self, *args, **kwargs) -> None:
        _no_device("Event")


class OutOfMemoryError(RuntimeError):
    """Raised by PyTorch when CUDA runs out of memory; here for `except torch.cuda.OutOfMemoryError`."""


# Legacy CUDA tensor types: naming them works, making one raises.
def _cuda_type(name: str):
    def make(*args, **kwargs):
        _no_device(name)
    make.__name__ = name
    return make


FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor, IntTensor, ShortTensor, CharTensor, \
    ByteTensor, BoolTensor = (_cuda_type(n) for n in (
        "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor", "ShortTensor",
        "CharTensor", "ByteTensor", "BoolTensor"))
