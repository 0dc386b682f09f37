"""`torch.amp.grad_scaler`, where PyTorch defines GradScaler."""
from loom.torch.amp import GradScaler  # noqa: F401
