"""`torch.backends.openmp`: loom's CPU kernels do not use this library (generated C and the system BLAS)."""
enabled = False


def is_available() -> bool:
    return False
