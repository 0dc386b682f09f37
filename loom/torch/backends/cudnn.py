"""`torch.backends.cudnn`: settable flags; cuDNN is not available in this build."""
enabled = True
benchmark = False
benchmark_limit = 10
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    return False


def version():
    """None: no cuDNN library."""
    return None


def is_acceptable(tensor) -> bool:
    return False
