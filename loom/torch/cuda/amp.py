"""`torch.cuda.amp`: the deprecated spellings of `torch.amp` for device_type="cuda"."""
from __future__ import annotations

from loom.torch.amp import GradScaler as _GradScaler, autocast as _autocast


class autocast(_autocast):
    """`torch.cuda.amp.autocast(...)`, i.e. `torch.autocast("cuda", ...)`: without CUDA it warns and does nothing."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True) -> None:
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    """`torch.cuda.amp.GradScaler(...)`, i.e. `torch.amp.GradScaler("cuda", ...)`."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)
