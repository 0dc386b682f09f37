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

FORMAT = "loom-attention-5"

SOURCE = r"""
#pragma GCC optimize ("fp-contract=fast", "no-trapping-math")
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

/* exp for float rows: Cephes' polynomial on a split ln 2 (about 1 ulp), branch-free so loops vectorise
   (libm's expf is a call per element); exp(x) for x below -87.3 is 0. */
static inline float fexpf(float x) {
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

/* C[m][n] = (beta ? C[m][n] : 0) + sum_k A(m, k) B[k][n], with A(m, k) = A[m * am + k * ak]: tiles of MR
   rows x 2 vectors (then x 1 vector) held in registers (GCC vector types, unaligned loads), edges by a scalar
   loop. The vector width is the widest the build target has (-march=native: 512 bits where AVX-512 is). */
#define MR 4
#define MM_TILE(T, V, NV)                                                                                     \
  {                                                                                                         \
    V c[MR][NV];                                                                                            \
    for (int r = 0; r < MR; r++) for (int u = 0; u < NV; u++) c[r][u] = (V){0};                             \
    const T *a0 = A + m0 * am;                                                                              \
    for (int64_t k = 0; k < K; k++) {                                                                       \
      V b[NV];                                                                                              \
      for (int u = 0; u < NV; u++) b[u] = *(const V *)(B + k * ldb + n0 + u * (int64_t)(sizeof(V) / sizeof(T))); \
      for (int r = 0; r < MR; r++) {                                                                        \
        const T x = a0[r * am + k * ak];                                                                    \
        for (int u = 0; u < NV; u++) c[r][u] += x * b[u];                                                   \
      }                                                                                                     \
    }                                                                                                       \
    for (int r = 0; r < MR; r++)                                                                            \
      for (int u = 0; u < NV; u++) {                                                                        \
        V *cr = (V *)(C + (m0 + r) * ldc + n0 + u * (int64_t)(sizeof(V) / sizeof(T)));                      \
        *cr = beta ? *cr + c[r][u] : c[r][u];                                                               \
      }                                                                                                     \
  }
#define MM(T, V, W)                                                                                           \
typedef T V __attribute__((vector_size(W * sizeof(T)), aligned(sizeof(T))));                               \
static void mm_##T(int64_t M, int64_t N, int64_t K, const T *A, int64_t am, int64_t ak, const T *B,         \
                   int64_t ldb, T *C, int64_t ldc, int beta) {                                               \
  for (int64_t m0 = 0; m0 < M; m0 += MR) {                                                                  \
    const int64_t mr = M - m0 < MR ? M - m0 : MR;                                                           \
    int64_t n0 = 0;                                                                                         \
    if (mr == MR) {                                                                                         \
      for (; n0 + 2 * W <= N; n0 += 2 * W) MM_TILE(T, V, 2)                                                 \
      for (; n0 + W <= N; n0 += W) MM_TILE(T, V, 1)                                                         \
    }                                                                                                       \
    for (int64_t r = 0; r < mr; r++) {                                                                      \
      T *cr = C + (m0 + r) * ldc;                                                                           \
      const T *ar = A + (m0 + r) * am;                                                                      \
      for (int64_t c = n0; c < N; c++) {                                                                    \
        T acc = 0;                                                                                          \
        for (int64_t k = 0; k < K; k++) acc += ar[k * ak] * B[k * ldb + c];                                 \
        cr[c] = beta ? cr[c] + acc : acc;                                                                   \
      }                                                                                                     \
    }                                                                                                       \
  }                                                                                                         \
}
#if defined(__AVX512F__)
MM(float, vfloat, 16)
MM(double, vdouble, 8)
#else
MM(float, vfloat, 8)
MM(double, vdouble, 4)
#endif

/* Row reductions in RL fixed lanes (then the lanes in order), so they vectorise without reassociating
   flags and give the same bits on every run and thread count. scale_max scales the row in place. */
#define RL 8
#define ROWRED(T)                                                                                             \
static inline T scale_max_##T(T *x, int64_t n, T scale) {                                                   \
  T pm[RL];                                                                                                 \
  for (int l = 0; l < RL; l++) pm[l] = -INFINITY;                                                           \
  int64_t j = 0;                                                                                            \
  for (; j + RL <= n; j += RL)                                                                              \
    for (int l = 0; l < RL; l++) { const T t = x[j + l] * scale; x[j + l] = t; pm[l] = t > pm[l] ? t : pm[l]; } \
  for (; j < n; j++) { const T t = x[j] * scale; x[j] = t; pm[0] = t > pm[0] ? t : pm[0]; }                \
  T mx = pm[0];                                                                                             \
  for (int l = 1; l < RL; l++) mx = pm[l] > mx ? pm[l] : mx;                                                \
  return mx;                                                                                                \
}                                                                                                           \
static inline T lane_sum_##T(const T *x, int64_t n) {                                                       \
  T ps[RL] = {0};                                                                                           \
  int64_t j = 0;                                                                                            \
  for (; j + RL <= n; j += RL)                                                                              \
    for (int l = 0; l < RL; l++) ps[l] += x[j + l];                                                         \
  for (; j < n; j++) ps[0] += x[j];                                                                    \
  T sum = 0;                                                                                                \
  for (int l = 0; l < RL; l++) sum += ps[l];                                                                \
  return sum;                                                                                               \
}
ROWRED(float)
ROWRED(double)

#define ATTN(T, EXP, LOG)                                                                                     \
static void attn_fwd_##T(const attn_args *a, int64_t nthreads) {                                            \
  const int64_t L = a->L, S = a->S, E = a->E, nqb = (L + BQ - 1) / BQ, z = sizeof(T);                       \
  const T scale = (T)a->scale;                                                                              \
  _Pragma("omp parallel num_threads(nthreads)")                                                              \
  {                                                                                                         \
    T *kt = malloc(sizeof(T) * (E * BK + BQ * BK + BQ * E + 2 * BQ));                                      \
    T *s = kt + E * BK, *acc = s + BQ * BK, *m = acc + BQ * E, *l = m + BQ;                                 \
    /* The packed key block kt holds rows [0, pk_n) of key block pk_j0 of batch entry pk_b: a task on the   \
       same entry packs only the rows it lacks. With many batch entries a task is one entry's query blocks, \
       so they share their packs; results do not depend on the split. */                                   \
    int64_t pk_b = -1, pk_j0 = -1, pk_n = 0;                                                                \
    const int64_t per = a->nb >= 4 * nthreads ? nqb : 1;                                                    \
    _Pragma("omp for schedule(dynamic)")                                                                    \
    for (int64_t task = 0; task < a->nb * nqb; task += per)                                                 \
    for (int64_t tq = task; tq < task + per; tq++) {                                                        \
      const int64_t b = tq / nqb, i0 = (tq % nqb) * BQ, ni = L - i0 < BQ ? L - i0 : BQ;                    \
      char *out = a->data[0] + attn_off(a, b, 0);                                                           \
      const char *q = a->data[1] + attn_off(a, b, 1), *k = a->data[2] + attn_off(a, b, 2),                 \
                 *v = a->data[3] + attn_off(a, b, 3);                                                       \
      const int64_t ro = a->rs[0], rq = a->rs[1], rk = a->rs[2], rv = a->rs[3];                            \
      for (int64_t ii = 0; ii < ni; ii++) { m[ii] = -INFINITY; l[ii] = 0; }                                 \
      memset(acc, 0, sizeof(T) * ni * E);                                                                   \
      const int64_t jend = a->causal ? (i0 + ni < S ? i0 + ni : S) : S;                                     \
      for (int64_t j0 = 0; j0 < jend; j0 += BK) {                                                           \
        const int64_t nj = jend - j0 < BK ? jend - j0 : BK;                                                 \
        if (pk_b != b || pk_j0 != j0) { pk_b = b; pk_j0 = j0; pk_n = 0; }                                   \
        for (int64_t jj = pk_n; jj < nj; jj++) {                                                            \
          const T *kr = (const T *)(k + (j0 + jj) * rk);                                                    \
          for (int64_t e = 0; e < E; e++) kt[e * BK + jj] = kr[e];                                          \
        }                                                                                                   \
        pk_n = nj > pk_n ? nj : pk_n;                                                                       \
        mm_##T(ni, nj, E, (const T *)(q + i0 * rq), rq / z, 1, kt, BK, s, BK, 0);                           \
        for (int64_t ii = 0; ii < ni; ii++) {                                                               \
          const int64_t i = i0 + ii;                                                                        \
          const int64_t nje = a->causal ? (i - j0 + 1 < nj ? i - j0 + 1 : nj) : nj;                         \
          T *sr = s + ii * BK, *ar = acc + ii * E;                                                          \
          for (int64_t jj = nje > 0 ? nje : 0; jj < nj; jj++) sr[jj] = 0;                                   \
          if (nje <= 0) continue;                                                                           \
          const T mx = scale_max_##T(sr, nje, scale);                                                       \
          const T mnew = mx > m[ii] ? mx : m[ii];                                                           \
          if (m[ii] != mnew) {                                                                              \
            const T corr = m[ii] == -INFINITY ? 0 : EXP(m[ii] - mnew);                                      \
            l[ii] *= corr;                                                                                  \
            for (int64_t e = 0; e < E; e++) ar[e] *= corr;                                                  \
            m[ii] = mnew;                                                                                   \
          }                                                                                                 \
          for (int64_t jj = 0; jj < nje; jj++) sr[jj] = EXP(sr[jj] - mnew);                                 \
          l[ii] += lane_sum_##T(sr, nje);                                                                   \
        }                                                                                                   \
        mm_##T(ni, E, nj, s, BK, 1, (const T *)(v + j0 * rv), rv / z, acc, E, 1);                           \
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
  const int64_t L = a->L, S = a->S, E = a->E, z = sizeof(T);                                                \
  const T scale = (T)a->scale;                                                                              \
  _Pragma("omp parallel num_threads(nthreads)")                                                              \
  {                                                                                                         \
    T *kt = malloc(sizeof(T) * (2 * E * BK + 2 * BK * E + 2 * BQ * BK + L));                               \
    T *vt = kt + E * BK, *dk = vt + E * BK, *dv = dk + BK * E, *p = dv + BK * E, *ds = p + BQ * BK,         \
      *D = ds + BQ * BK;                                                                                    \
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
        for (int64_t i0 = a->causal ? j0 : 0; i0 < L; i0 += BQ) {                                           \
          const int64_t ni = L - i0 < BQ ? L - i0 : BQ;                                                     \
          /* Causal: keys past the block's last query are masked for every row of it. */                   \
          const int64_t nb = a->causal && i0 + ni - j0 < nj ? i0 + ni - j0 : nj;                            \
          mm_##T(ni, nb, E, (const T *)(q + i0 * rq), rq / z, 1, kt, BK, p, BK, 0);                         \
          mm_##T(ni, nb, E, (const T *)(gy + i0 * rg), rg / z, 1, vt, BK, ds, BK, 0);                       \
          for (int64_t ii = 0; ii < ni; ii++) {                                                             \
            const int64_t i = i0 + ii;                                                                      \
            const int64_t nje = a->causal ? (i - j0 + 1 < nb ? i - j0 + 1 : nb) : nb;                       \
            const T lse = ((const T *)(y + i * ry))[E], Di = D[i];                                          \
            T *pr = p + ii * BK, *dr = ds + ii * BK;                                                        \
            for (int64_t jj = 0; jj < nje; jj++) {                                                          \
              pr[jj] = EXP(pr[jj] * scale - lse);                                                           \
              dr[jj] = pr[jj] * (dr[jj] - Di) * scale;                                                      \
            }                                                                                               \
            for (int64_t jj = nje > 0 ? nje : 0; jj < nb; jj++) { pr[jj] = 0; dr[jj] = 0; }                 \
          }                                                                                                 \
          mm_##T(nb, E, ni, p, 1, BK, (const T *)(gy + i0 * rg), rg / z, dv, E, 1);                         \
          mm_##T(nb, E, ni, ds, 1, BK, (const T *)(q + i0 * rq), rq / z, dk, E, 1);                         \
          mm_##T(ni, E, nb, ds, BK, 1, (const T *)(k + j0 * rk), rk / z, (T *)(out + i0 * ro), ro / z, 1);  \
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

ATTN(float, fexpf, logf)
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
