"""`torch.linalg`: `loom.linalg` under PyTorch's module name, plus the general eigensolver `eig` (eager only)."""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from loom import dtypes as _dt
from loom.errors import AutogradError, DTypeError, LinAlgError, LoomError, ShapeError  # noqa: F401
from loom.tensor import Tensor, from_numpy
from loom.torch._forward import install as _install

_install(globals(), "loom.linalg")

EigResult = namedtuple("EigResult", ["eigenvalues", "eigenvectors"])
EigResult.__module__ = "torch.return_types"
EigResult.__name__ = EigResult.__qualname__ = "linalg_eig"


def _eig_input(op: str, A) -> np.ndarray:
    from loom.autograd.grad_mode import is_grad_enabled
    from loom.function import tracing
    if not isinstance(A, Tensor):
        raise DTypeError(f"loom.torch.linalg.{op}: expected a Tensor, got {type(A).__name__}")
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"loom.torch.linalg.{op}: expected a (batch of) square matrix, got shape {list(A.shape)}")
    if A.dtype not in (_dt.float32, _dt.float64, _dt.complex64, _dt.complex128):
        raise DTypeError(f"loom.torch.linalg.{op}: expected a float or complex tensor, got {A.dtype.name}")
    if tracing():
        raise LoomError(f"loom.torch.linalg.{op}: the general eigensolver runs eagerly only; loom.function cannot "
                        "trace it")
    if A.requires_grad and is_grad_enabled():
        raise AutogradError(f"loom.torch.linalg.{op}: loom has no gradient for the general eigendecomposition; call "
                            "it on A.detach() or under torch.no_grad() (for symmetric A, linalg.eigh has one)")
    return A.detach().numpy()


def _complex(a: np.ndarray, like) -> Tensor:
    d = _dt.complex128 if like in (_dt.float64, _dt.complex128) else _dt.complex64
    return from_numpy(np.ascontiguousarray(a.astype(d.np)))


def eig(A) -> EigResult:
    """Eigenvalues and (unit-norm, column) eigenvectors of a general square matrix, as ``torch.linalg.eig``.

    Always complex, as PyTorch's; computed by LAPACK's geev through NumPy, eagerly and without a gradient.

    Examples
    --------
    >>> import loom.torch as torch
    >>> torch.linalg.eig(torch.tensor([[0.0, -1.0], [1.0, 0.0]])).eigenvalues
    tensor([0.+1.j, 0.-1.j])
    """
    a = _eig_input("eig", A)
    w, v = np.linalg.eig(a)
    return EigResult(_complex(w, A.dtype), _complex(v, A.dtype))


def eigvals(A) -> Tensor:
    """The eigenvalues of a general square matrix (complex), as ``torch.linalg.eigvals``."""
    return _complex(np.linalg.eigvals(_eig_input("eigvals", A)), A.dtype)
