"""`torch.utils.hooks`: the handle that removes a registered hook."""
from loom.nn.module import RemovableHandle  # noqa: F401
