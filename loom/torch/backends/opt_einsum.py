"""`torch.backends.opt_einsum`: loom plans einsum contractions itself."""
enabled = True
strategy = "auto"


def is_available() -> bool:
    return False
