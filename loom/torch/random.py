"""`torch.random`: the default generator's seed and state."""
from __future__ import annotations

import contextlib

from loom.tensor import default_generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state  # noqa: F401


@contextlib.contextmanager
def fork_rng(devices=None, enabled: bool = True, device_type: str = "cuda"):
    """Restore the default generator's state when the block ends."""
    if not enabled:
        yield
        return
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
