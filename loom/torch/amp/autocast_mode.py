"""`torch.amp.autocast_mode`, where PyTorch defines autocast."""
from loom.torch.amp import autocast, custom_bwd, custom_fwd, is_autocast_available  # noqa: F401
