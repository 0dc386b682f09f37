"""int8 kernels: u8 x s8 -> s32 GEMM with fused requantisation, and NHWC im2col, in C with a NumPy fallback.

The C library (`loom.quantization._csrc`) is built once per machine through
loom's kernel cache (`loom.codegen.conv.NativeLibrary`: the same compiler,
``-march=native`` flags, cache directory and trust checks as every generated
kernel), so the instruction set is the build machine's: the source picks AVX2
and VNNI (``vpdpbusd``) by the compiler's predefined macros, never by a
hard-coded flag, and always keeps a portable scalar path. `features` says
which paths were compiled in; ``path=`` forces one (tests compare them), and
``LOOM_Q8_PATH=scalar|avx2|vnni`` caps the default. Every path is exact
(int32 accumulation), so all give identical results; see the source's header
for how the 16-bit saturation of AVX2's ``vpmaddubsw`` is avoided.

Threads: an OpenMP loop sized by `loom.get_num_threads` (one thread below
``LOOM_BLAS_PAR_MIN`` multiply-adds, the rule loom's float matmuls follow);
loom starts no other pool.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

import numpy as np

from loom.errors import DTypeError, LoomValueError, ShapeError
from loom.runtime import threads

from ._csrc import SOURCE

PATHS = {"scalar": 0, "avx2": 1, "vnni": 2}
KINDS = {"int32": 0, "uint8": 1, "int8": 2, "float32": 3}
IM2COL_PAR_MIN = 1 << 24  # Bytes from which im2col uses loom's threads.
_P = ctypes.c_void_p
_I32, _I64 = ctypes.c_int32, ctypes.c_int64

_LIB = None
_FEATURES: dict = {}


def _library():
    global _LIB
    if _LIB is None:
        from loom.codegen.conv import NativeLibrary
        _LIB = NativeLibrary("int8 kernels", "loom-q8-5", SOURCE, (), {
            "loom_q8_features": [_P],
            "loom_q8_gemm": [_I32, _I32, _I32, _I64, _I64, _I64, _P, _I64, _P, _P, _P, _I32, _I32, _I32, _I32, _I32,
                             _P, _I64],
            "loom_q8_im2col": [_I32, _P, _P, ctypes.c_uint8, _P, _I64],
        }, "LOOM_Q8_NATIVE")
    return _LIB


def library(wait: bool = True):
    """The loaded entry points (waiting for the one-off build), or None when the C library is unavailable."""
    lib = _library()
    if wait:
        lib.available(timeout=300)
    return lib.library()


def features() -> dict[str, bool]:
    """Which int8 paths the C library was compiled with on this machine: scalar, avx2, vnni.

    Examples
    --------
    >>> f = features()
    >>> f["scalar"] in (True, False)
    True
    """
    fns = library()
    if fns is None:
        return {"scalar": False, "avx2": False, "vnni": False}
    if _FEATURES.get("fns") is not fns:  # Asked once per loaded library: a GEMM call should not pay for it.
        out = np.zeros(1, np.int32)
        fns["loom_q8_features"](out.ctypes.data)
        bits = int(out[0])
        _FEATURES.update(fns=fns, value={"scalar": True, "avx2": bool(bits & 2), "vnni": bool(bits & 4)})
    return dict(_FEATURES["value"])


def default_path() -> str:
    """The best compiled path, capped by ``LOOM_Q8_PATH``; "numpy" when the C library is unavailable."""
    f = features()
    if not f["scalar"]:
        return "numpy"
    cap = os.environ.get("LOOM_Q8_PATH", "vnni")
    if cap not in PATHS:
        raise LoomValueError(f"LOOM_Q8_PATH={cap!r}: expected one of {sorted(PATHS)}")
    best = "vnni" if f["vnni"] else "avx2" if f["avx2"] else "scalar"
    return best if PATHS[best] <= PATHS[cap] else cap


@dataclass
class PackedWeight:
    """An int8 weight (n, k) in the GEMM's layout, with what the GEMM needs beside it.

    `data` holds blocks of 8 output columns, each (ceil(k/4), 8, 4): four consecutive k of one column
    per 32-bit lane, zero-padded in n and k, then one all-zero block.
    """

    rows: np.ndarray        # (n, k) int8, as given.
    data: np.ndarray        # (n_blocks + 1, ceil(k / 4), 8, 4) int8.
    narrow: bool            # Every weight in [-64, 63]: AVX2's vpmaddubsw cannot saturate.
    colsum: np.ndarray      # (n,) int32: sum over k of each row, for the input zero point.

    @property
    def n(self) -> int:
        return self.rows.shape[0]

    @property
    def k(self) -> int:
        return self.rows.shape[1]


def pack_weight(w: np.ndarray) -> PackedWeight:
    """Pack a (n, k) int8 weight matrix for `gemm`."""
    w = np.asarray(w)
    if w.dtype != np.int8 or w.ndim != 2:
        raise DTypeError(f"loom.quantization.pack_weight: expected a 2-d int8 array, got {w.dtype} {w.shape}")
    n, k = w.shape
    nb, kq = (n + 7) // 8, (k + 3) // 4
    padded = np.zeros(((nb + 1) * 8, kq * 4), np.int8)
    padded[:n, :k] = w
    data = np.ascontiguousarray(padded.reshape(nb + 1, 8, kq, 4).transpose(0, 2, 1, 3))
    narrow = bool(w.size == 0 or (w.min() >= -64 and w.max() <= 63))
    return PackedWeight(np.ascontiguousarray(w), data, narrow, w.astype(np.int32).sum(1).astype(np.int32))


def par_min() -> int:
    """Multiply-adds from which a GEMM uses loom's threads: loom's rule for matmuls (``LOOM_BLAS_PAR_MIN``).

    Below it one thread is faster (a team's start and barrier cost more than they save), and on a
    loaded machine a team waits for its slowest member.
    """
    return threads.blas_par_min()


def _epilogue(acc: np.ndarray, mult, out_dtype: str, zp: int, lo: int, hi: int, relu: bool) -> np.ndarray:
    """What the C epilogue does to an int32 result, in NumPy (float32 arithmetic, round half to even)."""
    if out_dtype == "int32":
        return acc
    f = acc.astype(np.float32) * np.asarray(mult, np.float32)
    if out_dtype == "float32":
        return np.maximum(f, np.float32(0)) if relu else f
    q = np.clip(np.rint(f) + np.float32(zp), lo, hi)
    return q.astype(np.uint8 if out_dtype == "uint8" else np.int8)


def gemm(a: np.ndarray, w: PackedWeight, bias: np.ndarray | None = None, mult: np.ndarray | None = None,
         out_dtype: str = "int32", zero_point: int = 0, relu: bool = False, path: str | None = None,
         out: np.ndarray | None = None) -> np.ndarray:
    """``a @ w.T + bias`` in int32 from uint8 `a` (m, k) and packed int8 `w`, then requantised.

    Parameters
    ----------
    a : ndarray of uint8, shape (m, k) (or wider: columns past k are ignored)
    w : PackedWeight
    bias : int32 (n,), optional
        Added to the int32 sums.
    mult : float32 (n,), optional
        Per-output-column multiplier of the epilogue (required unless `out_dtype` is "int32").
    out_dtype : {"int32", "uint8", "int8", "float32"}
        int32: the sums; uint8/int8: ``clamp(rint(sum * mult) + zero_point)`` (ReLU clamps at the zero point);
        float32: ``sum * mult`` (then ReLU).
    path : {"scalar", "avx2", "vnni", "numpy"}, optional
        Default `default_path`; a path not compiled in falls back to the next lower one.

    Examples
    --------
    >>> a = np.array([[1, 2, 3]], np.uint8)
    >>> gemm(a, pack_weight(np.array([[1, -1, 2], [0, 0, 1]], np.int8))).tolist()
    [[5, 3]]
    """
    if out_dtype not in KINDS:
        raise LoomValueError(f"loom.quantization.gemm: out_dtype {out_dtype!r}: expected one of {sorted(KINDS)}")
    if a.dtype != np.uint8 or a.ndim != 2:
        raise DTypeError(f"loom.quantization.gemm: expected a 2-d uint8 input, got {a.dtype} {a.shape}")
    if a.shape[1] < w.k:
        raise ShapeError(f"loom.quantization.gemm: input {a.shape} has fewer than the weight's {w.k} columns")
    if out_dtype != "int32" and mult is None:
        raise LoomValueError(f"loom.quantization.gemm: out_dtype {out_dtype!r} needs mult")
    m, n = a.shape[0], w.n
    if out is not None and (out.shape != (m, n) or out.dtype != np.dtype(out_dtype) or out.strides[1] != out.itemsize):
        raise ShapeError(f"loom.quantization.gemm: out must be a ({m}, {n}) {out_dtype} array with contiguous rows, "
                         f"got {out.dtype} {out.shape}")
    lo, hi = (0, 255) if out_dtype == "uint8" else (-128, 127)
    if relu and out_dtype in ("uint8", "int8"):
        lo = max(lo, zero_point)
    path = path or default_path()
    fns = None if path == "numpy" else library()
    if fns is None:
        acc = a[:, :w.k].astype(np.float64) @ w.rows.T.astype(np.float64)  # Exact below 2**53.
        acc = acc.astype(np.int32)
        if bias is not None:
            acc += bias
        res = _epilogue(acc, mult, out_dtype, zero_point, lo, hi, relu)
        if out is not None:
            out[...] = res
            return out
        return res
    if path not in PATHS:
        raise LoomValueError(f"loom.quantization.gemm: path {path!r}: expected one of {sorted(PATHS)} or 'numpy'")
    dst = out if out is not None else np.empty((m, n), np.dtype(out_dtype))
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    bias = None if bias is None else np.ascontiguousarray(bias, np.int32)
    mult = None if mult is None else np.ascontiguousarray(mult, np.float32)
    nt = threads.get_num_threads() if m * n * w.k >= par_min() else 1
    fns["loom_q8_gemm"](PATHS[path], nt, int(w.narrow), m, n, w.k, a.ctypes.data, a.shape[1],
                        w.data.ctypes.data, None if bias is None else bias.ctypes.data,
                        None if mult is None else mult.ctypes.data, KINDS[out_dtype], zero_point, lo, hi, int(relu),
                        dst.ctypes.data, dst.strides[0] // dst.itemsize)
    return dst


def conv_out_hw(h: int, w: int, kernel, stride, padding, dilation) -> tuple[int, int]:
    return ((h + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1,
            (w + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1)


def im2col(x: np.ndarray, kernel, stride, padding, dilation, pad_value: int, path: str | None = None) -> np.ndarray:
    """Rows (n, oh, ow) by columns (i, j, c) of an NHWC uint8 batch.

    Taps outside the image read `pad_value` (the input's zero point, which stands for a real 0).
    """
    if x.dtype != np.uint8 or x.ndim != 4:
        raise DTypeError(f"loom.quantization.im2col: expected a 4-d NHWC uint8 array, got {x.dtype} {x.shape}")
    n, h, w, c = x.shape
    ho, wo = conv_out_hw(h, w, kernel, stride, padding, dilation)
    k = kernel[0] * kernel[1] * c
    kp = k
    out = np.empty((n * ho * wo, kp), np.uint8)
    fns = None if path == "numpy" else library()
    if fns is None:
        xp = np.pad(x, ((0, 0), (padding[0],) * 2, (padding[1],) * 2, (0, 0)), constant_values=pad_value)
        cols = [xp[:, i * dilation[0]:i * dilation[0] + stride[0] * (ho - 1) + 1:stride[0],
                   j * dilation[1]:j * dilation[1] + stride[1] * (wo - 1) + 1:stride[1], :]
                for i in range(kernel[0]) for j in range(kernel[1])]
        out[:, :k] = np.stack(cols, 3).reshape(n * ho * wo, k)
        return out
    x = np.ascontiguousarray(x)
    p = np.array([n, h, w, c, kernel[0], kernel[1], stride[0], stride[1], padding[0], padding[1], dilation[0],
                  dilation[1], ho, wo], np.int64)
    nt = threads.get_num_threads() if out.size >= IM2COL_PAR_MIN else 1
    fns["loom_q8_im2col"](nt, p.ctypes.data, x.ctypes.data, pad_value, out.ctypes.data, kp)
    return out
