"""DLPack capsules for dtypes NumPy cannot describe (bfloat16).

NumPy produces and consumes the capsules; for bfloat16, whose values loom
stores as uint16 bits, only the dtype tag inside the capsule differs. These
helpers rewrite that tag in place (uint16 <-> bfloat16) so the exchange stays
zero-copy. Layouts follow dlpack.h (v0.8 `DLManagedTensor`, v1.x
`DLManagedTensorVersioned`).
"""
from __future__ import annotations

import ctypes

KDL_UINT, KDL_BFLOAT = 1, 4

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype, _get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

# Offset of DLTensor.dtype: data (8) + device (8) + ndim (4). A versioned capsule
# puts version (8), manager_ctx (8), deleter (8) and flags (8) before the DLTensor.
_DTYPE_OFFSET = {b"dltensor": 20, b"dltensor_versioned": 32 + 20}


def dtype_tag(capsule) -> tuple[int, int]:
    """(type code, bits) of the tensor a DLPack capsule describes."""
    addr = _tag_address(capsule)
    return ctypes.c_uint8.from_address(addr).value, ctypes.c_uint8.from_address(addr + 1).value


def retag(capsule, code: int) -> None:
    """Change the type code of an unconsumed capsule (same bit width)."""
    ctypes.c_uint8.from_address(_tag_address(capsule)).value = code


def _tag_address(capsule) -> int:
    name = _get_name(capsule)
    if name not in _DTYPE_OFFSET:
        raise BufferError(f"loom.from_dlpack: not an unconsumed DLPack capsule (name {name!r})")
    return _get_pointer(capsule, name) + _DTYPE_OFFSET[name]


class BFloat16AsUInt16:
    """Present a DLPack producer's bfloat16 tensor to NumPy as its uint16 bits."""

    def __init__(self, producer) -> None:
        self.producer = producer
        self.was_bfloat16 = False

    def __dlpack__(self, *args, **kwargs):
        capsule = self.producer.__dlpack__(*args, **kwargs)
        if dtype_tag(capsule) == (KDL_BFLOAT, 16):
            retag(capsule, KDL_UINT)
            self.was_bfloat16 = True
        return capsule

    def __dlpack_device__(self):
        return self.producer.__dlpack_device__()
