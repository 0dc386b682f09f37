"""C for the row primitives of `loom.ir.rows`: layer_norm and log_softmax + NLL, forward and backward.

Forward: each row's mean and (two-pass, biased) variance of the row less
its first element (shifted data: accurate far from zero, as
`loom.functional.reduce.centre`), then the
normalised, scaled and shifted row, written once. Backward: each row's
statistics are recomputed (cheaper than storing them), dx is written from
the row sums of g = gy * w and g * xhat, and dw, db are accumulated per
thread and summed at the end. Rows are split over OpenMP threads.

``loom_call``-style entry points (objects, int64 meta, threads), run by the
step driver like generated kernels.

layer_norm meta: ``[item_off, data_off, nobj, dtype (0 float32, 1 float64),
eps (double bits), rows, N, weight element stride, bias element stride, x row
stride, gy row stride]`` (strides in elements); objects: output, x, w, b
(forward) or output, x, w, gy (backward). The output is C-contiguous; x and
gy are rows of unit element stride one row stride apart; the weight and bias
are contiguous or a broadcast scalar (element stride 0).

log_softmax + NLL: per row the maximum, the sum of exponentials and the
picked logit (backward: the softmax times the row's gradient, minus it at
the target); a target outside [0, C) makes the kernel return 1, and Python
reruns the step to raise loom's error. Meta ``[item_off, data_off, nobj,
dtype, target width, rows, C]``; objects: output, x, t (and g), contiguous.
"""
from __future__ import annotations

import ctypes
import struct

import numpy as np

from .conv import NativeLibrary

FORMAT = "loom-rows-6"

SOURCE = r"""
#pragma GCC optimize ("fp-contract=fast", "no-trapping-math")
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
static void ln_fwd_##T(char **data, int64_t R, int64_t N, double eps, int64_t rx, int64_t nt) { \
  T *y = (T *)data[0];                                                                                      \
  const T *x = (const T *)data[1], *w = (const T *)data[2], *b = (const T *)data[3];                       \
  const T inv_n = (T)1 / (T)N, e = (T)eps;                                                                  \
  _Pragma("omp parallel for num_threads(nt) schedule(static)")                                               \
  for (int64_t r = 0; r < R; r++) {                                                                         \
    const T *xr = x + r * rx;                                                                               \
    T *yr = y + r * N;                                                                                      \
    const T p = xr[0];                                                                                      \
    T s = 0, v = 0;                                                                                         \
    _Pragma("omp simd reduction(+:s)")                                                                     \
    for (int64_t j = 0; j < N; j++) s += xr[j] - p;                                                         \
    const T mean = s * inv_n;                                                                               \
    _Pragma("omp simd reduction(+:v)")                                                                     \
    for (int64_t j = 0; j < N; j++) { T c = (xr[j] - p) - mean; v += c * c; }                               \
    const T rstd = (T)1 / SQRT(v * inv_n + e);                                                              \
    for (int64_t j = 0; j < N; j++) yr[j] = ((xr[j] - p) - mean) * rstd * w[j] + b[j];                      \
  }                                                                                                         \
}                                                                                                           \
                                                                                                            \
static void ln_bwd_##T(char **data, int64_t R, int64_t N, double eps, int64_t rx, int64_t rg, int64_t nt) {            \
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
      const T *xr = x + r * rx, *gr = gy + r * rg;                                                          \
      T *dx = out + r * N;                                                                                  \
      const T p = xr[0];                                                                                    \
      T s = 0, v = 0, c1 = 0, c2 = 0;                                                                       \
      _Pragma("omp simd reduction(+:s)")                                                                   \
      for (int64_t j = 0; j < N; j++) s += xr[j] - p;                                                       \
      const T mean = s * inv_n;                                                                             \
      _Pragma("omp simd reduction(+:v)")                                                                   \
      for (int64_t j = 0; j < N; j++) { T c = (xr[j] - p) - mean; v += c * c; }                            \
      const T rstd = (T)1 / SQRT(v * inv_n + e);                                                            \
      _Pragma("omp simd reduction(+:c1, c2)")                                                              \
      for (int64_t j = 0; j < N; j++) {                                                                     \
        const T xh = ((xr[j] - p) - mean) * rstd, g = gr[j] * w[j];                                         \
        c1 += g; c2 += g * xh;                                                                              \
        dw[j] += gr[j] * xh; db[j] += gr[j];                                                                \
      }                                                                                                     \
      c1 *= inv_n; c2 *= inv_n;                                                                             \
      for (int64_t j = 0; j < N; j++)                                                                       \
        dx[j] = rstd * (gr[j] * w[j] - c1 - ((xr[j] - p) - mean) * rstd * c2);                             \
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

/* exp for float rows: Cephes' polynomial on a split ln 2 (about 1 ulp), branch-free so loops vectorise. */
static inline float rows_expf(float x) {
  const float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  const float n = __builtin_floorf(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  union { int32_t i; float f; } sc;
  sc.i = ((int32_t)n + 127) << 23;
  return x < -87.3f ? 0.0f : y * sc.f;
}

#define CE_T(p, iw) ((iw) == 8 ? ((const int64_t *)(p))[0] : (int64_t)((const int32_t *)(p))[0])

/* log_softmax + NLL per row (backward: (softmax - onehot) * g); a target outside [0, C) returns 1. */
#define CE(T, EXP, LOG)                                                                                     \
static int32_t ce_##T(char **data, int64_t R, int64_t C, int64_t iw, int backward, int64_t nt) {           \
  const T *x = (const T *)data[1];                                                                          \
  const char *t = data[2];                                                                                  \
  const T *g = backward ? (const T *)data[3] : 0;                                                           \
  int32_t bad = 0;                                                                                          \
  _Pragma("omp parallel for num_threads(nt) schedule(static) reduction(|:bad)")                              \
  for (int64_t r = 0; r < R; r++) {                                                                         \
    const T *xr = x + r * C;                                                                                \
    const int64_t tr = CE_T(t + r * iw, iw);                                                                \
    if (tr < 0 || tr >= C) { bad = 1; continue; }                                                           \
    T m = xr[0], s = 0;                                                                                     \
    _Pragma("omp simd reduction(max:m)")                                                                   \
    for (int64_t j = 1; j < C; j++) m = xr[j] > m ? xr[j] : m;                                              \
    _Pragma("omp simd reduction(+:s)")                                                                     \
    for (int64_t j = 0; j < C; j++) s += EXP(xr[j] - m);                                                    \
    const T lse = m + LOG(s);                                                                               \
    if (!backward) { ((T *)data[0])[r] = lse - xr[tr]; continue; }                                          \
    T *dr = (T *)data[0] + r * C;                                                                           \
    const T gr = g[r];                                                                                      \
    for (int64_t j = 0; j < C; j++) dr[j] = EXP(xr[j] - lse) * gr;                                          \
    dr[tr] -= gr;                                                                                           \
  }                                                                                                         \
  return bad;                                                                                               \
}

CE(float, rows_expf, logf)
CE(double, exp, log)

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
  if (backward) { if (meta[3]) ln_bwd_double(data, R, N, eps, meta[9], meta[10], nthreads);
                  else ln_bwd_float(data, R, N, eps, meta[9], meta[10], nthreads); }
  else { if (meta[3]) ln_fwd_double(data, R, N, eps, meta[9], nthreads);
         else ln_fwd_float(data, R, N, eps, meta[9], nthreads); }
  free(own[0]);
  free(own[1]);
  return 0;
}

/* Meta: [item_off, data_off, nobj, dtype, target width, rows, C]; objects: out, x, t (and g). */
static int32_t ce_entry(const char *objs, const int64_t *meta, int64_t nthreads, int backward) {
  char *data[4];
  if (meta[2] != 3 + backward) return 1;
  rows_read(data, objs, meta);
  if (nthreads < 1) nthreads = 1;
  if (meta[3]) return ce_double(data, meta[5], meta[6], meta[4], backward, nthreads);
  return ce_float(data, meta[5], meta[6], meta[4], backward, nthreads);
}

int32_t loom_cross_entropy_rows(const char *objs, const int64_t *meta, int64_t nthreads) {
  return ce_entry(objs, meta, nthreads, 0);
}

int32_t loom_cross_entropy_rows_grad(const char *objs, const int64_t *meta, int64_t nthreads) {
  return ce_entry(objs, meta, nthreads, 1);
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
_SYMBOL = {"layer_norm": "loom_layer_norm", "layer_norm_grad": "loom_layer_norm_grad",
           "cross_entropy_rows": "loom_cross_entropy_rows", "cross_entropy_rows_grad": "loom_cross_entropy_rows_grad"}
LIBRARY = NativeLibrary("row kernels", FORMAT, SOURCE, (), {s: _ENTRY for s in _SYMBOL.values()}, "LOOM_NATIVE_ROWS")
OPS = frozenset(_SYMBOL)


def _contiguous(loc) -> bool:
    isz, expect = loc.dtype.itemsize, []
    step = isz
    for n in reversed(loc.shape):
        expect.append(step)
        step *= int(n)
    return all(n == 1 or s == e for n, s, e in zip(reversed(loc.shape), loc.strides[::-1], expect))


def _row_stride(loc) -> int | None:
    """The byte stride between rows of `loc` seen as (rows, N) with unit element stride, or None."""
    isz, shape, strides = loc.dtype.itemsize, list(loc.shape), list(loc.strides)
    if shape[-1] > 1 and strides[-1] != isz:
        return None
    lead = [(n, st) for n, st in zip(shape[:-1], strides[:-1]) if n != 1]
    if not lead:
        return shape[-1] * isz
    for (_, outer), (n, inner) in zip(lead[:-1], lead[1:]):
        if outer != inner * n:  # The leading dims must merge into one run of rows.
            return None
    row = lead[-1][1]
    return row if row % isz == 0 and row >= 0 else None


def meta(node, locs) -> np.ndarray | None:
    """The int64 meta block of a row step over `locs` (output first, then x, w and b or gy), or None when
    a layout is not one the kernel reads."""
    if node.op.startswith("cross_entropy"):
        return _ce_meta(locs)
    out, x, w, third = locs
    isz = out.dtype.itemsize
    if out.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or any(v.dtype != out.dtype for v in locs):
        return None
    vecs = [w] + ([third] if node.op == "layer_norm" else [])
    rows_of = [x] + ([third] if node.op == "layer_norm_grad" else [])
    row_strides = [_row_stride(v) for v in rows_of]
    if not _contiguous(out) or None in row_strides or any(v.strides[-1] not in (0, isz) for v in vecs):
        return None
    n = int(x.shape[-1])
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    eps = struct.unpack("<q", struct.pack("<d", float(node.attrs["eps"])))[0]
    strides = [v.strides[-1] // isz for v in vecs] + [1] * (2 - len(vecs))
    rs = [r // isz for r in row_strides] + [n] * (2 - len(row_strides))
    return np.array([0, 0, 4, int(isz == 8), eps, rows, n] + strides + rs, np.int64)


def _ce_meta(locs) -> np.ndarray | None:
    out, x, t = locs[:3]
    floats = [out, x] + list(locs[3:])
    if out.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or any(v.dtype != out.dtype for v in floats):
        return None
    if t.dtype not in (np.dtype(np.int32), np.dtype(np.int64)) or not all(_contiguous(v) for v in locs):
        return None
    return np.array([0, 0, len(locs), int(out.dtype.itemsize == 8), t.dtype.itemsize, int(x.shape[0]),
                     int(x.shape[1])], np.int64)


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
