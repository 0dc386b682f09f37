"""C for the row primitives of `loom.ir.rows`: layer_norm forward and backward, one pass per row.

Forward: each row's mean and (two-pass, biased) variance, then the
normalised, scaled and shifted row, written once. Backward: each row's
statistics are recomputed (cheaper than storing them), dx is written from
the row sums of g = gy * w and g * xhat, and dw, db are accumulated per
thread and summed at the end. Rows are split over OpenMP threads.

``loom_call``-style entry points (objects, int64 meta, threads), run by the
step driver like generated kernels. Meta: ``[item_off, data_off, nobj, dtype
(0 float32, 1 float64), eps (double bits), rows, N, weight element stride,
bias (or dy) element stride]``; objects: output, x, w, b (forward) or output,
x, w, gy (backward), all C-contiguous but the weight and bias, which may be a
broadcast scalar (element stride 0).
"""
from __future__ import annotations

import ctypes
import struct

import numpy as np

from .conv import NativeLibrary

FORMAT = "loom-rows-2"

SOURCE = r"""
#pragma GCC optimize ("fp-contract=fast")
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>

static void rows_read(char **data, const char *objs, const int64_t *meta) {
  for (int64_t o = 0; o < meta[2]; o++) {
    const char *obj = *(const char *const *)(objs + meta[0] + 8 * o);
    data[o] = *(char *const *)(obj + meta[1]);
  }
}

#define ROWS(T, SQRT)                                                                                       \
static void ln_fwd_##T(char **data, int64_t R, int64_t N, double eps, int64_t nt) {             \
  T *y = (T *)data[0];                                                                                      \
  const T *x = (const T *)data[1], *w = (const T *)data[2], *b = (const T *)data[3];                       \
  const T inv_n = (T)1 / (T)N, e = (T)eps;                                                                  \
  _Pragma("omp parallel for num_threads(nt) schedule(static)")                                               \
  for (int64_t r = 0; r < R; r++) {                                                                         \
    const T *xr = x + r * N;                                                                                \
    T *yr = y + r * N;                                                                                      \
    T s = 0, v = 0;                                                                                         \
    _Pragma("omp simd reduction(+:s)")                                                                     \
    for (int64_t j = 0; j < N; j++) s += xr[j];                                                             \
    const T mean = s * inv_n;                                                                               \
    _Pragma("omp simd reduction(+:v)")                                                                     \
    for (int64_t j = 0; j < N; j++) { T c = xr[j] - mean; v += c * c; }                                     \
    const T rstd = (T)1 / SQRT(v * inv_n + e);                                                              \
    for (int64_t j = 0; j < N; j++) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];                  \
  }                                                                                                         \
}                                                                                                           \
                                                                                                            \
static void ln_bwd_##T(char **data, int64_t R, int64_t N, double eps, int64_t nt) {                       \
  T *out = (T *)data[0];                                                                                    \
  const T *x = (const T *)data[1], *w = (const T *)data[2], *gy = (const T *)data[3];                      \
  const T inv_n = (T)1 / (T)N, e = (T)eps;                                                                  \
  if (nt > R) nt = R > 0 ? R : 1;                                                                           \
  T *part = calloc((size_t)(2 * N * nt), sizeof(T));                                                       \
  _Pragma("omp parallel num_threads(nt)")                                                                    \
  {                                                                                                         \
    const int64_t t = omp_get_thread_num(), nth = omp_get_num_threads();                                    \
    T *dw = part + 2 * N * t, *db = dw + N;                                                                 \
    const int64_t lo = R * t / nth, hi = R * (t + 1) / nth;                                                 \
    for (int64_t r = lo; r < hi; r++) {                                                                     \
      const T *xr = x + r * N, *gr = gy + r * N;                                                            \
      T *dx = out + r * N;                                                                                  \
      T s = 0, v = 0, c1 = 0, c2 = 0;                                                                       \
      _Pragma("omp simd reduction(+:s)")                                                                   \
      for (int64_t j = 0; j < N; j++) s += xr[j];                                                           \
      const T mean = s * inv_n;                                                                             \
      _Pragma("omp simd reduction(+:v)")                                                                   \
      for (int64_t j = 0; j < N; j++) { T c = xr[j] - mean; v += c * c; }                                   \
      const T rstd = (T)1 / SQRT(v * inv_n + e);                                                            \
      _Pragma("omp simd reduction(+:c1, c2)")                                                              \
      for (int64_t j = 0; j < N; j++) {                                                                     \
        const T xh = (xr[j] - mean) * rstd, g = gr[j] * w[j];                                          \
        c1 += g; c2 += g * xh;                                                                              \
        dw[j] += gr[j] * xh; db[j] += gr[j];                                                                \
      }                                                                                                     \
      c1 *= inv_n; c2 *= inv_n;                                                                             \
      for (int64_t j = 0; j < N; j++)                                                                       \
        dx[j] = rstd * (gr[j] * w[j] - c1 - (xr[j] - mean) * rstd * c2);                               \
    }                                                                                                       \
  }                                                                                                         \
  T *dw = out + R * N, *db = dw + N;                                                                        \
  memcpy(dw, part, sizeof(T) * 2 * N);                                                                      \
  for (int64_t t = 1; t < nt; t++)                                                                          \
    for (int64_t j = 0; j < 2 * N; j++) dw[j] += part[2 * N * t + j];                                       \
  free(part);                                                                                               \
}

ROWS(float, sqrtf)
ROWS(double, sqrt)

/* A broadcast scalar weight or bias (element stride 0) as a contiguous vector, so row loops vectorise. */
static char *rows_dense(char *p, int64_t stride, int64_t n, int64_t isz, char **owned) {
  if (stride) return p;
  char *d = malloc((size_t)(n * isz));
  for (int64_t j = 0; j < n; j++) memcpy(d + j * isz, p, (size_t)isz);
  *owned = d;
  return d;
}

static int32_t rows_entry(const char *objs, const int64_t *meta, int64_t nthreads, int backward) {
  char *data[4], *own[2] = {0, 0};
  double eps;
  if (meta[2] != 4) return 1;
  rows_read(data, objs, meta);
  memcpy(&eps, &meta[4], 8);
  if (nthreads < 1) nthreads = 1;
  const int64_t R = meta[5], N = meta[6], isz = meta[3] ? 8 : 4;
  data[2] = rows_dense(data[2], meta[7], N, isz, &own[0]);
  if (!backward) data[3] = rows_dense(data[3], meta[8], N, isz, &own[1]);
  if (backward) { if (meta[3]) ln_bwd_double(data, R, N, eps, nthreads); else ln_bwd_float(data, R, N, eps, nthreads); }
  else { if (meta[3]) ln_fwd_double(data, R, N, eps, nthreads); else ln_fwd_float(data, R, N, eps, nthreads); }
  free(own[0]);
  free(own[1]);
  return 0;
}

int32_t loom_layer_norm(const char *objs, const int64_t *meta, int64_t nthreads) {
  return rows_entry(objs, meta, nthreads, 0);
}

int32_t loom_layer_norm_grad(const char *objs, const int64_t *meta, int64_t nthreads) {
  return rows_entry(objs, meta, nthreads, 1);
}
"""

_P = ctypes.c_void_p
_ENTRY = [_P, _P, ctypes.c_int64]
LIBRARY = NativeLibrary("row kernels", FORMAT, SOURCE, (),
                        {"loom_layer_norm": _ENTRY, "loom_layer_norm_grad": _ENTRY}, "LOOM_NATIVE_ROWS")
_SYMBOL = {"layer_norm": "loom_layer_norm", "layer_norm_grad": "loom_layer_norm_grad"}
OPS = frozenset(_SYMBOL)


def _contiguous(loc) -> bool:
    isz, expect = loc.dtype.itemsize, []
    step = isz
    for n in reversed(loc.shape):
        expect.append(step)
        step *= int(n)
    return all(n == 1 or s == e for n, s, e in zip(reversed(loc.shape), loc.strides[::-1], expect))


def meta(node, locs) -> np.ndarray | None:
    """The int64 meta block of a row step over `locs` (output first, then x, w and b or gy), or None when
    a layout is not one the kernel reads."""
    out, x, w, third = locs
    isz = out.dtype.itemsize
    if out.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or any(v.dtype != out.dtype for v in locs):
        return None
    vecs = [w] + ([third] if node.op == "layer_norm" else [])
    if not all(_contiguous(v) for v in (out, x)) or any(v.strides[-1] not in (0, isz) for v in vecs):
        return None
    if node.op == "layer_norm_grad" and not _contiguous(third):
        return None
    n = int(x.shape[-1])
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    eps = struct.unpack("<q", struct.pack("<d", float(node.attrs["eps"])))[0]
    strides = [v.strides[-1] // isz for v in vecs] + [1] * (2 - len(vecs))
    return np.array([0, 0, 4, int(isz == 8), eps, rows, n] + strides, np.int64)


def step(node, locs) -> tuple[int, np.ndarray] | None:
    """(entry point address, meta) of a row node's native step, or None (not built, or a layout the kernel
    does not read)."""
    symbol = _SYMBOL.get(node.op)
    if symbol is None:
        return None
    fns = LIBRARY.library()
    if fns is None:
        return None
    m = meta(node, locs)
    if m is None:
        return None
    return int(ctypes.cast(fns[symbol], ctypes.c_void_p).value or 0), m
