"""`torch.cpu.amp`: the deprecated spelling of `torch.amp` for device_type="cpu"."""
from __future__ import annotations

from loom import dtypes as _dt
from loom.torch.amp import GradScaler, autocast as _autocast  # noqa: F401


class autocast(_autocast):
    """`torch.cpu.amp.autocast(...)`, i.e. `torch.autocast("cpu", ...)` (bfloat16 by default)."""

    def __init__(self, enabled: bool = True, dtype=_dt.bfloat16, cache_enabled: bool = True) -> None:
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
