"""`torch.optim.swa_utils`: loom.optim.swa_utils under PyTorch's name."""
from loom.optim.swa_utils import (  # noqa: F401
    SWALR, AveragedModel, get_ema_avg_fn, get_ema_multi_avg_fn, get_swa_avg_fn, get_swa_multi_avg_fn, update_bn,
)

__all__ = ["AveragedModel", "SWALR", "update_bn", "get_ema_multi_avg_fn", "get_swa_multi_avg_fn", "get_ema_avg_fn",
           "get_swa_avg_fn"]
