"""`torch.fft`: `loom.fft` under PyTorch's module name, so `import torch.fft` resolves under `python -m loom.torch`."""
from __future__ import annotations

from loom.fft import (  # noqa: F401
    __all__, fft, fft2, fftfreq, fftn, fftshift, hfft, hfft2, hfftn, ifft, ifft2, ifftn, ifftshift, ihfft, ihfft2,
    ihfftn, irfft, irfft2, irfftn, rfft, rfft2, rfftfreq, rfftn,
)
