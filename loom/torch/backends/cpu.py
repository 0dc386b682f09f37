"""`torch.backends.cpu`: the CPU's vector capability as PyTorch names it."""


def get_cpu_capability() -> str:
    """The SIMD level loom's generated C targets (the compiler's native one)."""
    return "DEFAULT"
