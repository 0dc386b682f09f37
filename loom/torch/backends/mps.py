"""`torch.backends.mps`: Apple's Metal backend is not available in this build."""


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
