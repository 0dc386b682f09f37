"""`torch.backends.cuda`: matmul and attention flags (settable; no CUDA in this build)."""


class _Matmul:
    """`torch.backends.cuda.matmul`: TF32 and reduced-precision switches, recorded as set."""

    def __init__(self) -> None:
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True
        self.fp32_precision = "none"


matmul = _Matmul()
_flags = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def is_built() -> bool:
    return False


def flash_sdp_enabled() -> bool:
    return _flags["flash"]


def enable_flash_sdp(enabled: bool) -> None:
    _flags["flash"] = bool(enabled)


def mem_efficient_sdp_enabled() -> bool:
    return _flags["mem_efficient"]


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _flags["mem_efficient"] = bool(enabled)


def math_sdp_enabled() -> bool:
    return _flags["math"]


def enable_math_sdp(enabled: bool) -> None:
    _flags["math"] = bool(enabled)


def cudnn_sdp_enabled() -> bool:
    return _flags["cudnn"]


def enable_cudnn_sdp(enabled: bool) -> None:
    _flags["cudnn"] = bool(enabled)


def sdp_kernel(enable_flash: bool = True, enable_math: bool = True, enable_mem_efficient: bool = True,
               enable_cudnn: bool = True):
    """A context that sets the attention-kernel flags for its body (loom has one attention kernel)."""
    import contextlib

    @contextlib.contextmanager
    def region():
        saved = dict(_flags)
        _flags.update(flash=enable_flash, math=enable_math, mem_efficient=enable_mem_efficient,
                      cudnn=enable_cudnn)
        try:
            yield
        finally:
            _flags.update(saved)
    return region()
