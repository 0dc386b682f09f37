"""`torch.utils.data._utils`: where PyTorch keeps default_collate and default_convert."""
from loom.torch.utils.data._utils import collate  # noqa: F401
