"""C for the ``attention`` primitives: blocked forward with an online softmax, blocked backward.

The forward kernel takes query blocks of ``BQ`` rows against key blocks of
``BK`` keys: it packs the key block transposed, computes the block's scores,
and folds them into a running maximum, sum and output accumulator per row (an
online softmax), so neither the L x S scores nor a mask ever exist in memory;
it writes the output and each row's log-sum-exp (the packed output of
`loom.ir.attention`). A causal mask is index arithmetic: key blocks past a
query block's last row are never visited, and the diagonal block stops each
row at its own index. The backward kernel walks the key blocks of one batch
entry, recomputes each block of probabilities exp(s - lse) from the saved
log-sum-exp, and accumulates dq in place and dk, dv per key block.

Both are ``loom_call``-style entry points (objects, int64 meta, threads), so
the step driver runs them from its plan table like generated kernels
(`loom.runtime.native` asks the toolchain for a record through
`library_step`). Work is split over OpenMP threads: forward by (batch entry,
query block), backward by batch entry. Scratch is per thread, O(block x E).

Meta: ``[item_off, data_off, nobj, dtype (0 float32, 1 float64), causal, scale (double bits), L, S, E,
nbd, (size, byte stride per object) per batch dim, row byte stride per object]``; objects are the
output, then q, k, v (and y, gy for the backward).
"""
from __future__ import annotations

import ctypes
import struct

import numpy as np

from .conv import NativeLibrary

FORMAT = "loom-attention-1"

SOURCE = r"""
#pragma GCC optimize ("fp-contract=fast")
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>

#define BQ 32
#define BK 64

typedef struct {
  int64_t nobj, causal, L, S, E, nbd, nb;
  double scale;
  const int64_t *bd;   /* per batch dim: size, then one byte stride per object */
  const int64_t *rs;   /* row byte stride per object */
  char *data[8];
} attn_args;

static int attn_args_read(attn_args *a, const char *objs, const int64_t *meta) {
  const int64_t item_off = meta[0], data_off = meta[1];
  a->nobj = meta[2];
  if (a->nobj > 8) return 1;
  for (int64_t o = 0; o < a->nobj; o++) {
    const char *obj = *(const char *const *)(objs + item_off + 8 * o);
    a->data[o] = *(char *const *)(obj + data_off);
  }
  a->causal = meta[4];
  memcpy(&a->scale, &meta[5], 8);
  a->L = meta[6]; a->S = meta[7]; a->E = meta[8]; a->nbd = meta[9];
  a->bd = meta + 10;
  a->rs = a->bd + a->nbd * (1 + a->nobj);
  a->nb = 1;
  for (int64_t j = 0; j < a->nbd; j++) a->nb *= a->bd[j * (1 + a->nobj)];
  return 0;
}

/* Byte offset of batch entry b in object o. */
static int64_t attn_off(const attn_args *a, int64_t b, int64_t o) {
  int64_t off = 0;
  for (int64_t j = a->nbd - 1; j >= 0; j--) {
    const int64_t *d = a->bd + j * (1 + a->nobj);
    off += (b % d[0]) * d[1 + o];
    b /= d[0];
  }
  return off;
}

#define ATTN(T, EXP, LOG)                                                                                     \
static void attn_fwd_##T(const attn_args *a, int64_t nthreads) {                                            \
  const int64_t L = a->L, S = a->S, E = a->E, nqb = (L + BQ - 1) / BQ;                                      \
  const T scale = (T)a->scale;                                                                              \
  _Pragma("omp parallel num_threads(nthreads)")                                                              \
  {                                                                                                         \
    T *kt = malloc(sizeof(T) * (E * BK + BQ * BK + BQ * E + 2 * BQ));                                      \
    T *s = kt + E * BK, *acc = s + BQ * BK, *m = acc + BQ * E, *l = m + BQ;                                 \
    _Pragma("omp for schedule(dynamic)")                                                                    \
    for (int64_t task = 0; task < a->nb * nqb; task++) {                                                    \
      const int64_t b = task / nqb, i0 = (task % nqb) * BQ, ni = L - i0 < BQ ? L - i0 : BQ;                \
      char *out = a->data[0] + attn_off(a, b, 0);                                                           \
      const char *q = a->data[1] + attn_off(a, b, 1), *k = a->data[2] + attn_off(a, b, 2),                 \
                 *v = a->data[3] + attn_off(a, b, 3);                                                       \
      const int64_t ro = a->rs[0], rq = a->rs[1], rk = a->rs[2], rv = a->rs[3];                            \
      for (int64_t ii = 0; ii < ni; ii++) { m[ii] = -INFINITY; l[ii] = 0; }                                 \
      memset(acc, 0, sizeof(T) * ni * E);                                                                   \
      const int64_t jend = a->causal ? (i0 + ni < S ? i0 + ni : S) : S;                                     \
      for (int64_t j0 = 0; j0 < jend; j0 += BK) {                                                           \
        const int64_t nj = jend - j0 < BK ? jend - j0 : BK;                                                 \
        for (int64_t jj = 0; jj < nj; jj++) {                                                               \
          const T *kr = (const T *)(k + (j0 + jj) * rk);                                                    \
          for (int64_t e = 0; e < E; e++) kt[e * BK + jj] = kr[e];                                          \
        }                                                                                                   \
        for (int64_t ii = 0; ii < ni; ii++) {                                                               \
          const int64_t i = i0 + ii;                                                                        \
          const int64_t nje = a->causal ? (i - j0 + 1 < nj ? i - j0 + 1 : nj) : nj;                         \
          if (nje <= 0) continue;                                                                           \
          const T *qr = (const T *)(q + i * rq);                                                            \
          T *sr = s + ii * BK;                                                                              \
          for (int64_t jj = 0; jj < nje; jj++) sr[jj] = 0;                                                  \
          for (int64_t e = 0; e < E; e++) {                                                                 \
            const T qv = qr[e], *kc = kt + e * BK;                                                          \
            for (int64_t jj = 0; jj < nje; jj++) sr[jj] += qv * kc[jj];                                     \
          }                                                                                                 \
          T mx = -INFINITY;                                                                                 \
          for (int64_t jj = 0; jj < nje; jj++) { sr[jj] *= scale; mx = sr[jj] > mx ? sr[jj] : mx; }         \
          const T mnew = mx > m[ii] ? mx : m[ii];                                                           \
          T *ar = acc + ii * E;                                                                             \
          if (mnew == -INFINITY) continue;                                                                  \
          if (m[ii] != mnew) {                                                                              \
            const T corr = m[ii] == -INFINITY ? 0 : EXP(m[ii] - mnew);                                      \
            l[ii] *= corr;                                                                                  \
            for (int64_t e = 0; e < E; e++) ar[e] *= corr;                                                  \
            m[ii] = mnew;                                                                                   \
          }                                                                                                 \
          T sum = 0;                                                                                        \
          for (int64_t jj = 0; jj < nje; jj++) { sr[jj] = EXP(sr[jj] - mnew); sum += sr[jj]; }              \
          l[ii] += sum;                                                                                     \
          for (int64_t jj = 0; jj < nje; jj++) {                                                            \
            const T p = sr[jj], *vr = (const T *)(v + (j0 + jj) * rv);                                      \
            for (int64_t e = 0; e < E; e++) ar[e] += p * vr[e];                                             \
          }                                                                                                 \
        }                                                                                                   \
      }                                                                                                     \
      for (int64_t ii = 0; ii < ni; ii++) {                                                                 \
        T *orow = (T *)(out + (i0 + ii) * ro);                                                              \
        const T inv = 1 / l[ii], *ar = acc + ii * E;                                                        \
        for (int64_t e = 0; e < E; e++) orow[e] = ar[e] * inv;                                              \
        orow[E] = m[ii] + LOG(l[ii]);                                                                       \
      }                                                                                                     \
    }                                                                                                       \
    free(kt);                                                                                               \
  }                                                                                                         \
}                                                                                                           \
                                                                                                            \
static void attn_bwd_##T(const attn_args *a, int64_t nthreads) {                                            \
  const int64_t L = a->L, S = a->S, E = a->E;                                                               \
  const T scale = (T)a->scale;                                                                              \
  _Pragma("omp parallel num_threads(nthreads)")                                                              \
  {                                                                                                         \
    T *kt = malloc(sizeof(T) * (2 * E * BK + 2 * BK * E + 3 * BK + L));                                    \
    T *vt = kt + E * BK, *dk = vt + E * BK, *dv = dk + BK * E, *p = dv + BK * E, *dp = p + BK,              \
      *ds = dp + BK, *D = ds + BK;                                                                          \
    _Pragma("omp for schedule(dynamic)")                                                                    \
    for (int64_t b = 0; b < a->nb; b++) {                                                                   \
      char *out = a->data[0] + attn_off(a, b, 0);                                                           \
      const char *q = a->data[1] + attn_off(a, b, 1), *k = a->data[2] + attn_off(a, b, 2),                 \
                 *v = a->data[3] + attn_off(a, b, 3), *y = a->data[4] + attn_off(a, b, 4),                  \
                 *gy = a->data[5] + attn_off(a, b, 5);                                                      \
      const int64_t ro = a->rs[0], rq = a->rs[1], rk = a->rs[2], rv = a->rs[3], ry = a->rs[4],             \
                    rg = a->rs[5];                                                                          \
      for (int64_t i = 0; i < L; i++) {                                                                     \
        const T *yr = (const T *)(y + i * ry), *gr = (const T *)(gy + i * rg);                              \
        T d = 0;                                                                                            \
        for (int64_t e = 0; e < E; e++) d += gr[e] * yr[e];                                                 \
        D[i] = d - gr[E];                                                                                   \
        memset(out + i * ro, 0, sizeof(T) * E);                                                             \
      }                                                                                                     \
      for (int64_t j0 = 0; j0 < S; j0 += BK) {                                                              \
        const int64_t nj = S - j0 < BK ? S - j0 : BK;                                                       \
        for (int64_t jj = 0; jj < nj; jj++) {                                                               \
          const T *kr = (const T *)(k + (j0 + jj) * rk), *vr = (const T *)(v + (j0 + jj) * rv);             \
          for (int64_t e = 0; e < E; e++) { kt[e * BK + jj] = kr[e]; vt[e * BK + jj] = vr[e]; }             \
        }                                                                                                   \
        memset(dk, 0, sizeof(T) * nj * E);                                                                  \
        memset(dv, 0, sizeof(T) * nj * E);                                                                  \
        for (int64_t i = a->causal ? j0 : 0; i < L; i++) {                                                  \
          const int64_t nje = a->causal ? (i - j0 + 1 < nj ? i - j0 + 1 : nj) : nj;                         \
          const T *qr = (const T *)(q + i * rq), *gr = (const T *)(gy + i * rg);                            \
          const T lse = ((const T *)(y + i * ry))[E], Di = D[i];                                            \
          for (int64_t jj = 0; jj < nje; jj++) { p[jj] = 0; dp[jj] = 0; }                                   \
          for (int64_t e = 0; e < E; e++) {                                                                 \
            const T qv = qr[e], gv = gr[e], *kc = kt + e * BK, *vc = vt + e * BK;                           \
            for (int64_t jj = 0; jj < nje; jj++) { p[jj] += qv * kc[jj]; dp[jj] += gv * vc[jj]; }           \
          }                                                                                                 \
          for (int64_t jj = 0; jj < nje; jj++) {                                                            \
            p[jj] = EXP(p[jj] * scale - lse);                                                               \
            ds[jj] = p[jj] * (dp[jj] - Di) * scale;                                                         \
          }                                                                                                 \
          T *dq = (T *)(out + i * ro);                                                                      \
          for (int64_t jj = 0; jj < nje; jj++) {                                                            \
            const T pj = p[jj], sj = ds[jj], *kr = (const T *)(k + (j0 + jj) * rk);                         \
            T *dvr = dv + jj * E, *dkr = dk + jj * E;                                                       \
            for (int64_t e = 0; e < E; e++) {                                                               \
              dvr[e] += pj * gr[e];                                                                         \
              dkr[e] += sj * qr[e];                                                                         \
              dq[e] += sj * kr[e];                                                                          \
            }                                                                                               \
          }                                                                                                 \
        }                                                                                                   \
        for (int64_t jj = 0; jj < nj; jj++) {                                                               \
          memcpy(out + (L + j0 + jj) * ro, dk + jj * E, sizeof(T) * E);                                     \
          memcpy(out + (L + S + j0 + jj) * ro, dv + jj * E, sizeof(T) * E);                                 \
        }                                                                                                   \
      }                                                                                                     \
    }                                                                                                       \
    free(kt);                                                                                               \
  }                                                                                                         \
}

ATTN(float, expf, logf)
ATTN(double, exp, log)

int32_t loom_attention(const char *objs, const int64_t *meta, int64_t nthreads) {
  attn_args a;
  if (attn_args_read(&a, objs, meta) || a.nobj != 4) return 1;
  if (nthreads < 1) nthreads = 1;
  if (meta[3]) attn_fwd_double(&a, nthreads); else attn_fwd_float(&a, nthreads);
  return 0;
}

int32_t loom_attention_grad(const char *objs, const int64_t *meta, int64_t nthreads) {
  attn_args a;
  if (attn_args_read(&a, objs, meta) || a.nobj != 6) return 1;
  if (nthreads < 1) nthreads = 1;
  if (meta[3]) attn_bwd_double(&a, nthreads); else attn_bwd_float(&a, nthreads);
  return 0;
}
"""

_P = ctypes.c_void_p
_ENTRY = [_P, _P, ctypes.c_int64]
LIBRARY = NativeLibrary("attention kernels", FORMAT, SOURCE, (),
                        {"loom_attention": _ENTRY, "loom_attention_grad": _ENTRY}, "LOOM_NATIVE_ATTENTION")
_SYMBOL = {"attention": "loom_attention", "attention_grad": "loom_attention_grad"}


def meta(node, locs) -> np.ndarray | None:
    """The int64 meta block of an attention step over `locs` (output first, then the inputs; each with
    shape, byte strides and dtype), or None when a layout is not one the kernel reads."""
    out = locs[0]
    isz = out.dtype.itemsize
    if out.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    for loc in locs:
        if loc.dtype != out.dtype or loc.strides[-1] != isz or any(s % isz for s in loc.strides):
            return None
    q, k = locs[1], locs[2]
    L, S, E = int(q.shape[-2]), int(k.shape[-2]), int(q.shape[-1])
    nb = len(q.shape) - 2
    dims = []
    for j in range(nb):
        if int(q.shape[j]) != 1:
            dims.append([int(q.shape[j])] + [int(loc.strides[j]) for loc in locs])
    scale = struct.unpack("<q", struct.pack("<d", float(node.attrs["scale"])))[0]
    rows = [int(loc.strides[-2]) for loc in locs]
    return np.array([0, 0, len(locs), int(isz == 8), int(bool(node.attrs["causal"])), scale, L, S, E, len(dims)]
                    + [v for d in dims for v in d] + rows, np.int64)


def step(node, locs) -> tuple[int, np.ndarray] | None:
    """(entry point address, meta) of an attention node's native step, or None (not built, or a layout the
    kernel does not read)."""
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
