"""`torch.backends`: the switches programs set for cuDNN, TF32 matmuls, MPS and the CPU libraries.

Each flag is a settable attribute PyTorch scripts flip (`cudnn.benchmark = True`,
`cuda.matmul.allow_tf32 = True`); loom records the value and computes as
before, and the `is_available()` queries answer for a CPU-only build.
"""
from loom.torch.backends import cpu, cuda, cudnn, mkl, mkldnn, mps, openmp, opt_einsum  # noqa: F401
