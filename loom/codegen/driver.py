"""The native step driver: one generic C library that runs a compiled step's plan table without Python.

A plan table (an int64 array written by `loom.runtime.native`) lists the
steps of one compiled graph: generated kernels (called through their
``loom_call`` with precomputed arguments), GEMMs (through a CBLAS library
whose entry points the table names), strided copies, and steps Python must
run. ``loom_run`` walks the table from a given step and returns at the first
Python step or failing kernel, so Python crosses into C once per native
segment. ``loom_run_team`` runs a whole table on loom's team of threads in one
parallel region, by a static schedule that `loom.runtime.native` plans:
independent steps on different threads at once, large GEMMs shared. The
library does not depend on the graph: it is built once per machine and kept
in the kernel cache (`loom.codegen.cache`, checked by `loom.codegen.trust`
like every kernel).

Table layout (all int64): ``[nsteps, sgemm, dgemm, set_num_threads, offset of
each step...]`` then one record per step:

- kernel ``[1, loom_call, meta, nobj, (base, byte offset) * nobj]``
- gemm ``[2, is_double, transa, transb, M, N, K, lda, ldb, ldc, (base, offset)
  for A, B and C, batch dims, multiply-adds, (size, A, B, C byte strides) per
  batch dim]``
- copy ``[3, ndim, itemsize, src base, src offset, dst base, dst offset,
  (size, src stride, dst stride) per dim]``
- python ``[4]``
- half-precision gemm ``[9, ...]``: see `loom.codegen.gemm`
- gather ``[5, ...]``, scatter_add ``[6, ...]``, pad ``[7, ...]``, check ``[8, ...]``, a fused
  gather-multiply-scatter_add (sparse-dense product) ``[10, ...]``: see
  `loom.codegen.driver_index` (a bad index or value stops the walk there, and Python reruns the step
  to raise loom's error for it)

Bases are the call's objects (the arena, inputs, outputs and constants), read
with the same convention as ``loom_call`` (``ctl[0]``, ``ctl[1]``: tuple item and
array data offsets; both 0 for a table of pointers to data-pointer cells).
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading

from . import build, driver_index, gemm, trust

log = logging.getLogger("loom.codegen")

SOURCE = r"""
#include <omp.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

typedef int32_t (*loom_call_t)(const char *, const int64_t *, int64_t);
typedef void (*sgemm_t)(int, int, int, int32_t, int32_t, int32_t, float, const float *, int32_t,
                        const float *, int32_t, float, float *, int32_t);
typedef void (*dgemm_t)(int, int, int, int32_t, int32_t, int32_t, double, const double *, int32_t,
                        const double *, int32_t, double, double *, int32_t);
typedef void (*setnt_t)(int);

enum { CTL_ITEM, CTL_DATA, CTL_NOBJ, CTL_THREADS, CTL_BLAS_MIN, CTL_RC, CTL_BLAS_NOW, CTL_DONE, CTL_TRACE };

static void loom_copy(int64_t nd, int64_t isz, const int64_t *d, char *src, char *dst) {
  if (nd == 0) { memcpy(dst, src, isz); return; }
  int64_t n = d[0], ss = d[1], ds = d[2];
  if (nd == 1) {
    if (ss == isz && ds == isz) { memcpy(dst, src, n * isz); return; }
    switch (isz) {
      case 1: for (int64_t i = 0; i < n; i++) dst[i * ds] = src[i * ss]; return;
      case 2: for (int64_t i = 0; i < n; i++) *(uint16_t *)(dst + i * ds) = *(uint16_t *)(src + i * ss); return;
      case 4: for (int64_t i = 0; i < n; i++) *(uint32_t *)(dst + i * ds) = *(uint32_t *)(src + i * ss); return;
      case 8: for (int64_t i = 0; i < n; i++) *(uint64_t *)(dst + i * ds) = *(uint64_t *)(src + i * ss); return;
      default: for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds, src + i * ss, isz); return;
    }
  }
  for (int64_t i = 0; i < n; i++) loom_copy(nd - 1, isz, d + 3, src + i * ss, dst + i * ds);
}

static void loom_blas_threads(const int64_t *prog, int64_t *ctl, int64_t macs) {
  /* The BLAS library computes on the calling thread alone: large products are split across loom's own team
     (`loom_gemm`), so no second thread pool spins on the cores (`loom.runtime.threads`). */
  (void)macs;
  int64_t *now = (int64_t *)ctl[CTL_BLAS_NOW];
  if (now == 0) return;
  if (__atomic_load_n(now, __ATOMIC_RELAXED) != 1) {
    ((setnt_t)prog[3])(1);
    __atomic_store_n(now, 1, __ATOMIC_RELAXED);
  }
}

static int64_t loom_gemm_team;  /* Threads of the last GEMM record's split (1: not split), for loom_last_gemm_team. */

int64_t loom_last_gemm_team(void) { return __atomic_load_n(&loom_gemm_team, __ATOMIC_RELAXED); }

/* Multiply-adds each piece of a cut GEMM gets at least: far above OpenBLAS's small-matrix path (M*N*K up to
   10^6), so every piece runs the kernels the whole product runs. */
#define LOOM_GEMM_PIECE_MIN (1 << 21)

/* Threads a product of `macs` multiply-adds over `nb` batch items runs on: loom's count from CTL_BLAS_MIN
   multiply-adds on. Items go whole to the threads; with fewer items than threads, a float32 item (M rows of C)
   is cut into pieces of rows (`loom_gemm_part`): no more than its 16-row tiles, none under LOOM_GEMM_PIECE_MIN.
   float64 items are never cut: OpenBLAS's dgemm rounds the last column of some shapes differently when the
   rows come in other blocks (measured: 85 of 186 random shapes), sgemm's rows never did (0 of 500). */
static int64_t loom_gemm_threads(const int64_t *ctl, int dbl, int64_t macs, int64_t nb, int64_t M) {
  int64_t nt = macs >= ctl[CTL_BLAS_MIN] ? ctl[CTL_THREADS] : 1;
  if (nb < 1) nb = 1;
  if (nt > nb) {
    const int64_t tiles = (M + 15) / 16, item = macs / nb;
    int64_t cut = dbl ? 1 : nt < tiles ? nt : tiles;
    for (; cut > 1; cut--) {  /* The smallest piece (`loom_gemm_part`'s rows) must be worth its call. */
      int64_t least = M;
      for (int64_t t = 0; t < cut; t++) {
        int64_t lo = tiles * t / cut * 16, hi = tiles * (t + 1) / cut * 16;
        hi = hi < M ? hi : M;
        least = hi - lo < least ? hi - lo : least;
      }
      if (item / M * least >= LOOM_GEMM_PIECE_MIN) break;
    }
    nt = cut > nb ? cut : nb;
  }
  if (nt < 1) nt = 1;
  __atomic_store_n(&loom_gemm_team, nt, __ATOMIC_RELAXED);
  return nt;
}

static void loom_gemm_call(const int64_t *prog, int dbl, int ta, int tb, int32_t M, int32_t N, int32_t K,
                           int32_t lda, int32_t ldb, int32_t ldc, const char *A, const char *B, char *C) {
  if (M <= 0 || N <= 0) return;
  if (dbl)
    ((dgemm_t)prog[2])(101, ta ? 112 : 111, tb ? 112 : 111, M, N, K, 1.0, (const double *)A, lda,
                       (const double *)B, ldb, 0.0, (double *)C, ldc);
  else
    ((sgemm_t)prog[1])(101, ta ? 112 : 111, tb ? 112 : 111, M, N, K, 1.0f, (const float *)A, lda,
                       (const float *)B, ldb, 0.0f, (float *)C, ldc);
}

/* Thread t of n's share of one float32 product: its whole 16-row tiles of C, one single-threaded BLAS call.
   Every element of C comes out as in one whole call, so the result does not depend on n. Columns are never
   cut: sgemm rounds some shapes differently when their columns come in other blocks. */
static void loom_gemm_part(const int64_t *prog, int ta, int tb, int32_t M, int32_t N, int32_t K, int32_t lda,
                           int32_t ldb, int32_t ldc, const char *A, const char *B, char *C, int64_t t, int64_t n) {
  const int64_t tiles = ((int64_t)M + 15) / 16;
  const int64_t lo = tiles * t / n * 16, hi0 = tiles * (t + 1) / n * 16, hi = hi0 < M ? hi0 : M;
  if (lo < hi)
    loom_gemm_call(prog, 0, ta, tb, (int32_t)(hi - lo), N, K, lda, ldb, ldc, A + lo * (ta ? 1 : lda) * 4, B,
                   C + lo * ldc * 4);
}

/* Byte offsets of batch item `b` in A, B and C. */
static void loom_batch_offsets(const int64_t *bd, int64_t nbd, int64_t b, int64_t *oa, int64_t *ob, int64_t *oc) {
  int64_t rest = b;
  *oa = *ob = *oc = 0;
  for (int64_t j = nbd - 1; j >= 0; j--) {
    int64_t i = rest % bd[4 * j]; rest /= bd[4 * j];
    *oa += i * bd[4 * j + 1]; *ob += i * bd[4 * j + 2]; *oc += i * bd[4 * j + 3];
  }
}

/* A large product runs on loom's team (`loom_gemm_threads`): batch items across the threads when there are
   enough of them, else every (float32) item cut into one piece of rows per thread (`loom_gemm_part`). */
static void loom_gemm(const int64_t *prog, const int64_t *r, char *const *base, int64_t *ctl) {
  int dbl = (int)r[1], ta = (int)r[2], tb = (int)r[3];
  int32_t M = (int32_t)r[4], N = (int32_t)r[5], K = (int32_t)r[6];
  int32_t lda = (int32_t)r[7], ldb = (int32_t)r[8], ldc = (int32_t)r[9];
  char *A = base[r[10]] + r[11], *B = base[r[12]] + r[13], *C = base[r[14]] + r[15];
  int64_t nbd = r[16], macs = r[17], nb = 1;
  const int64_t *bd = r + 18;
  for (int64_t j = 0; j < nbd; j++) nb *= bd[4 * j];
  loom_blas_threads(prog, ctl, macs);
  const int64_t nt = loom_gemm_threads(ctl, dbl, macs, nb, M);
  if (nt == 1) {  /* No OpenMP call at all: even a team of one costs a GOMP_parallel. */
    for (int64_t b = 0; b < nb; b++) {
      int64_t oa, ob, oc;
      loom_batch_offsets(bd, nbd, b, &oa, &ob, &oc);
      loom_gemm_call(prog, dbl, ta, tb, M, N, K, lda, ldb, ldc, A + oa, B + ob, C + oc);
    }
    return;
  }
  if (nb >= nt) {
    #pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < nb; b++) {
      int64_t oa, ob, oc;
      loom_batch_offsets(bd, nbd, b, &oa, &ob, &oc);
      loom_gemm_call(prog, dbl, ta, tb, M, N, K, lda, ldb, ldc, A + oa, B + ob, C + oc);
    }
    return;
  }
  #pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
    for (int64_t b = 0; b < nb; b++) {
      int64_t oa, ob, oc;
      loom_batch_offsets(bd, nbd, b, &oa, &ob, &oc);
      loom_gemm_part(prog, ta, tb, M, N, K, lda, ldb, ldc, A + oa, B + ob, C + oc, t, n);
    }
  }
}

""" + gemm.DRIVER_SOURCE + driver_index.SOURCE + r"""
#define LOOM_PY_STEP ((int64_t)1 << 40)  /* loom_step's answer for a step Python runs. */

/* A kernel record's call with argument block `meta` (the record's own, or a row block's in a team walk). */
static int64_t loom_kernel_call(const int64_t *r, char *const *base, const int64_t *meta, int64_t threads) {
  int64_t n = r[3];
  char *cells[n > 0 ? n : 1];
  const char *refs[n > 0 ? n : 1];
  for (int64_t o = 0; o < n; o++) {
    cells[o] = base[r[4 + 2 * o]] + r[5 + 2 * o];
    refs[o] = (const char *)&cells[o];
  }
  return ((loom_call_t)r[1])((const char *)refs, meta, threads);
}

/* One record: 0 when done, else the code that stops the walk (a kernel's or index step's, or LOOM_PY_STEP). */
static int64_t loom_step(const int64_t *prog, const int64_t *r, char *const *base, int64_t *ctl) {
  switch (r[0]) {
    case 1: return loom_kernel_call(r, base, (const int64_t *)r[2], ctl[CTL_THREADS]);
    case 2: loom_gemm(prog, r, base, ctl); return 0;
    case 3: loom_copy(r[1], r[2], r + 7, base[r[3]] + r[4], base[r[5]] + r[6]); return 0;
    case 5: return loom_gather(r, base) ? 1 : 0;
    case 6: return loom_scatter_add(r, base) ? 1 : 0;
    case 7: loom_pad(r, base); return 0;
    case 8: return loom_check(r, base) ? 1 : 0;
    case 9: loom_gemm_half(prog, r, base, ctl); return 0;
    case 10: return loom_spmm(r, base) ? 1 : 0;
    default: return LOOM_PY_STEP;
  }
}

static void loom_bases(const char *objs, const int64_t *ctl, char **base) {
  const int64_t nobj = ctl[CTL_NOBJ], item_off = ctl[CTL_ITEM], data_off = ctl[CTL_DATA];
  for (int64_t o = 0; o < nobj; o++) {
    const char *obj = *(const char *const *)(objs + item_off + 8 * o);
    base[o] = *(char *const *)(obj + data_off);
  }
}

/* Run steps from `start` until a Python step, a kernel or index step that returns nonzero (its code goes to
   ctl[CTL_RC]) or the end; return that step's index (nsteps at the end). With ctl[CTL_DONE] set (resuming a
   team walk, `loom_run_team`), steps marked done there are skipped and the others marked as they finish. */
int64_t loom_run(const int64_t *prog, const char *objs, int64_t *ctl, int64_t start) {
  const int64_t nsteps = prog[0], nobj = ctl[CTL_NOBJ];
  int64_t *done = (int64_t *)ctl[CTL_DONE];
  char *base[nobj > 0 ? nobj : 1];
  loom_bases(objs, ctl, base);
  ctl[CTL_RC] = 0;
  for (int64_t k = start; k < nsteps; k++) {
    if (done && done[k]) continue;
    const int64_t rc = loom_step(prog, prog + prog[4 + k], base, ctl);
    if (rc != 0) { ctl[CTL_RC] = rc == LOOM_PY_STEP ? 0 : rc; return k; }
    if (done) done[k] = 1;
  }
  return nsteps;
}

/* Thread t of n's share of a GEMM record the team runs together: its batch items, or (fewer items than
   threads, float32) its 16-row tiles of every item, each one single-threaded BLAS call: the bits of the whole
   call (`loom_gemm_part`). */
static void loom_gemm_share(const int64_t *prog, const int64_t *r, char *const *base, int64_t t, int64_t n) {
  int dbl = (int)r[1], ta = (int)r[2], tb = (int)r[3];
  int32_t M = (int32_t)r[4], N = (int32_t)r[5], K = (int32_t)r[6];
  int32_t lda = (int32_t)r[7], ldb = (int32_t)r[8], ldc = (int32_t)r[9];
  char *A = base[r[10]] + r[11], *B = base[r[12]] + r[13], *C = base[r[14]] + r[15];
  int64_t nbd = r[16], nb = 1;
  const int64_t *bd = r + 18;
  for (int64_t j = 0; j < nbd; j++) nb *= bd[4 * j];
  if (t == 0) __atomic_store_n(&loom_gemm_team, n, __ATOMIC_RELAXED);
  for (int64_t b = nb >= n ? nb * t / n : 0; b < (nb >= n ? nb * (t + 1) / n : nb); b++) {
    int64_t oa, ob, oc;
    loom_batch_offsets(bd, nbd, b, &oa, &ob, &oc);
    if (nb >= n)
      loom_gemm_call(prog, dbl, ta, tb, M, N, K, lda, ldb, ldc, A + oa, B + ob, C + oc);
    else
      loom_gemm_part(prog, ta, tb, M, N, K, lda, ldb, ldc, A + oa, B + ob, C + oc, t, n);
  }
}

/* How a thread of a team walk waits for a step of another: it spins a little (a small step finishes within
   microseconds), then sleeps on its own futex word (Linux; elsewhere it yields the core) after posting the
   step it waits for, and the thread that finishes that step wakes it alone. A thread that spun longer would
   burn the core that the thread it waits for needs when another process keeps the machine busy. */
typedef struct { int32_t word, pad; int64_t waits_for; char line[48]; } loom_waiter;

#define LOOM_SPIN_NS 20000  /* A waiting thread spins this long (a small step finishes sooner), then sleeps. */
#define LOOM_STEAL_NS 2000000  /* A wait this long: the awaited thread is off the cores, its steps are taken. */
#define LOOM_TEAM_MAX 256

static void loom_wake(loom_waiter *w) {
  __atomic_add_fetch(&w->word, 1, __ATOMIC_SEQ_CST);
#ifdef __linux__
  syscall(SYS_futex, &w->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#endif
}

/* Step k is done (or the walk stopped, k = -1): wake the threads sleeping on it. */
static void loom_finished(loom_waiter *ws, int64_t n, int64_t k) {
  for (int64_t t = 0; t < n; t++) {
    const int64_t f = __atomic_load_n(&ws[t].waits_for, __ATOMIC_SEQ_CST);
    if (f >= 0 && (f == k || k < 0)) loom_wake(&ws[t]);
  }
}

static inline void loom_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

/* Sleep until step j's count `done[j]` may have reached `need` (or the walk stopped): `me` posts the step it
   waits for, and the thread that finishes it wakes it (`loom_finished`). */
static void loom_sleep(const int64_t *done, int64_t j, int64_t need, const int64_t *stop, loom_waiter *me) {
#ifdef __linux__
  const int32_t word = __atomic_load_n(&me->word, __ATOMIC_SEQ_CST);
  __atomic_store_n(&me->waits_for, j, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&done[j], __ATOMIC_SEQ_CST) < need && __atomic_load_n(stop, __ATOMIC_SEQ_CST) == INT64_MAX) {
    struct timespec limit = {0, 2000000};  /* A lost wake-up would cost 2 ms at most. */
    syscall(SYS_futex, &me->word, FUTEX_WAIT_PRIVATE, word, &limit, NULL, 0);
  }
  __atomic_store_n(&me->waits_for, -1, __ATOMIC_SEQ_CST);
#else
  (void)done; (void)j; (void)need; (void)stop; (void)me;
  sched_yield();
#endif
}

/* Nanoseconds on the monotonic clock, for ctl[CTL_TRACE]: per step of a team walk, the thread that ran it (for a
   shared GEMM thread 0), its start and its end. */
static int64_t loom_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A team walk's shared state (`loom_run_team`). */
typedef struct {
  const int64_t *prog, *order, *owner, *first, *deps, *blocks;
  char *const *base;
  int64_t nsteps, nt, *done, *claims, *trace;
  int64_t stop, code, low, finished;  /* finished: pieces done so far (a waiting thread rescans on news). */
  loom_waiter *waiters;
  const int64_t *ctl;
} loom_team;

/* Pieces of step k: a shared GEMM's row tiles or a shared kernel's row blocks (one per planned thread), else
   the step whole. */
static inline int64_t loom_pieces(const loom_team *tm, int64_t k) { return tm->owner[k] < 0 ? tm->nt : 1; }

static inline int loom_stopped(loom_team *tm) { return __atomic_load_n(&tm->stop, __ATOMIC_SEQ_CST) != INT64_MAX; }

static int loom_ready(const loom_team *tm, int64_t k) {
  for (int64_t d = tm->first[k]; d < tm->first[k + 1]; d++) {
    const int64_t j = tm->deps[d];
    if (__atomic_load_n(&tm->done[j], __ATOMIC_SEQ_CST) < loom_pieces(tm, j)) return 0;
  }
  return 1;
}

/* Run piece p of step k (claimed, its dependencies done) on thread t; 1 when it stopped the walk. */
static int loom_piece(loom_team *tm, int64_t k, int64_t p, int64_t t, int64_t *lctl) {
  const int64_t *r = tm->prog + tm->prog[4 + k];
  int64_t *trace = tm->trace;
  if (trace && p == 0) trace[3 * k] = t, trace[3 * k + 1] = loom_now_ns();
  int64_t rc = 0;
  if (tm->owner[k] < 0 && r[0] == 2) loom_gemm_share(tm->prog, r, tm->base, p, tm->nt);
  else if (tm->owner[k] < 0) rc = loom_kernel_call(r, tm->base, ((const int64_t *const *)tm->blocks[k])[p], 1);
  else rc = loom_step(tm->prog, r, tm->base, lctl);
  if (trace && p == 0) trace[3 * k + 2] = loom_now_ns();
  if (rc != 0) {
    #pragma omp critical(loom_team_stop)
    if (k < tm->stop) { tm->code = rc; __atomic_store_n(&tm->stop, k, __ATOMIC_SEQ_CST); }
    loom_finished(tm->waiters, tm->nt, -1);
    return 1;
  }
  __atomic_add_fetch(&tm->done[k], 1, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&tm->finished, 1, __ATOMIC_SEQ_CST);
  loom_finished(tm->waiters, tm->nt, k);
  return 0;
}

/* Claim step k's next piece and run it; -1 when no piece was left, else loom_piece's answer. */
static int loom_claim(loom_team *tm, int64_t k, int64_t t, int64_t *lctl) {
  if (__atomic_load_n(&tm->claims[k], __ATOMIC_SEQ_CST) >= loom_pieces(tm, k)) return -1;
  const int64_t p = __atomic_fetch_add(&tm->claims[k], 1, __ATOMIC_SEQ_CST);
  return p < loom_pieces(tm, k) ? loom_piece(tm, k, p, t, lctl) : -1;
}

#define LOOM_HELP_WINDOW 64

/* While thread t would wait: run a piece of a step that nobody has claimed and that is ready, the first in
   `order` from the first step not yet done (a thread that is descheduled, or late to start, leaves its steps
   to the others). 1 when it ran one (or the walk stopped), 0 when none was there. */
static int loom_help(loom_team *tm, int64_t t, int64_t *lctl, int steal) {
  int64_t i = __atomic_load_n(&tm->low, __ATOMIC_RELAXED);
  while (i < tm->nsteps && __atomic_load_n(&tm->done[tm->order[i]], __ATOMIC_SEQ_CST) >= loom_pieces(tm, tm->order[i]))
    i++;
  __atomic_store_n(&tm->low, i, __ATOMIC_RELAXED);  /* A hint: a stale value only makes a scan longer. */
  for (int64_t s = i; s < tm->nsteps && s < i + LOOM_HELP_WINDOW; s++) {
    const int64_t k = tm->order[s], own = tm->owner[k];
    if ((own >= 0 && own != t && !steal) || __atomic_load_n(&tm->claims[k], __ATOMIC_SEQ_CST) >= loom_pieces(tm, k) ||
        !loom_ready(tm, k))
      continue;
    const int rc = loom_claim(tm, k, t, lctl);
    if (rc >= 0) return 1;
  }
  return 0;
}

/* Wait until step k's dependencies are done, helping meanwhile (a scan for ready steps each time a piece
   has finished since the last one): with shared pieces at once, with steps another thread owns once this thread
   has waited LOOM_STEAL_NS in one wait (`*steal`, kept for the rest of the walk). A thread that the scheduler
   only time-slices (the machine's other processes) gets its turn sooner, and its steps are its process's second
   share of the machine; one that stays off the cores that long has its steps run by the others. 1 when the walk
   stopped, 2 when another thread claimed all of k. */
static int loom_wait_ready(loom_team *tm, int64_t k, int64_t t, int64_t *lctl, int *steal) {
  for (int64_t d = tm->first[k]; d < tm->first[k + 1]; d++) {
    const int64_t j = tm->deps[d], need = loom_pieces(tm, j);
    int64_t seen = -1, since = 0, start = 0;
    while (__atomic_load_n(&tm->done[j], __ATOMIC_SEQ_CST) < need) {
      if (loom_stopped(tm)) return 1;
      if (__atomic_load_n(&tm->claims[k], __ATOMIC_SEQ_CST) >= loom_pieces(tm, k)) return 2;
      const int64_t fin = __atomic_load_n(&tm->finished, __ATOMIC_SEQ_CST);
      const int64_t now = loom_now_ns();
      if (!start) start = now;
      if (!*steal && now - start >= LOOM_STEAL_NS) { *steal = 1; seen = -1; }
      if (fin != seen) {
        seen = fin;
        if (loom_help(tm, t, lctl, *steal)) { since = 0; start = 0; continue; }
      }
      if (!since) since = now;
      if (now - since < LOOM_SPIN_NS) { loom_pause(); continue; }
      loom_sleep(tm->done, j, need, &tm->stop, &tm->waiters[t]);
      since = 0;
    }
  }
  return 0;
}

/* Thread t's part of a team walk: the steps it owns or shares, in order, then any left unclaimed (a late or
   absent thread's); returns when every step is claimed or the walk stopped. */
static void loom_team_loop(loom_team *tm, int64_t t, int steal) {
  int64_t lctl[CTL_TRACE + 1];
  memcpy(lctl, tm->ctl, sizeof lctl);
  lctl[CTL_THREADS] = 1;
  lctl[CTL_DONE] = 0;
  int quit = 0;
  for (int pass = 0; pass < 2 && !quit; pass++) {
    for (int64_t i = 0; i < tm->nsteps && !quit; i++) {
      const int64_t k = tm->order[i], own = tm->owner[k];
      const int foreign = own >= 0 && own != t;
      if (pass == 0 && foreign) continue;
      int64_t start = 0;
      while (!quit && __atomic_load_n(&tm->claims[k], __ATOMIC_SEQ_CST) < loom_pieces(tm, k)) {
        const int w = loom_wait_ready(tm, k, t, lctl, &steal);
        if (w == 1) { quit = 1; break; }
        if (w == 2) break;
        if (foreign && !steal) {  /* Another thread's step: it gets LOOM_STEAL_NS to claim it. */
          const int64_t now = loom_now_ns();
          if (!start) start = now;
          if (now - start < LOOM_STEAL_NS) {
            if (now - start < LOOM_SPIN_NS) loom_pause();
            else loom_sleep(tm->done, k, 1, &tm->stop, &tm->waiters[t]);
            quit = loom_stopped(tm);
            continue;
          }
          steal = 1;
        }
        quit = loom_claim(tm, k, t, lctl) == 1;
      }
      quit = quit || loom_stopped(tm);
    }
  }
}

/* loom's own team for team walks: worker threads 1, 2, ... that sleep on `gen` (Linux futex) between walks.
   A walk is posted, the workers woken, and the caller runs its part at once; a worker joins only while the
   walk is open (`state`: LOOM_OPEN plus the workers inside), and the caller closes it when every step is done
   and waits only for the workers inside. So a worker that another process keeps off the cores costs the walk
   nothing: its steps are claimed by the others (`loom_help`), and no join waits for it to be scheduled, as an
   OpenMP region's closing barrier would. One walk uses the team at a time; a concurrent one runs alone. */
#define LOOM_OPEN ((int64_t)1 << 40)
/* A worker spins this long for the next walk, then sleeps: a late start costs a walk little (the caller claims
   the first steps), spinning through the gap between steps costs CPU. */
#define LOOM_IDLE_NS 30000

static struct {
  int32_t gen, busy;
  int64_t state, workers, pid;
  loom_team *walk;
} loom_pool;

#ifdef __linux__
static pthread_mutex_t loom_pool_grow = PTHREAD_MUTEX_INITIALIZER;

static void *loom_worker(void *arg) {
  const int64_t t = (int64_t)(intptr_t)arg;
  int32_t seen = __atomic_load_n(&loom_pool.gen, __ATOMIC_SEQ_CST);
  for (;;) {
    int32_t g;
    for (int64_t since = loom_now_ns(); (g = __atomic_load_n(&loom_pool.gen, __ATOMIC_SEQ_CST)) == seen;) {
      if (loom_now_ns() - since < LOOM_IDLE_NS) loom_pause();
      else syscall(SYS_futex, &loom_pool.gen, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
    }
    seen = g;
    int64_t st = __atomic_load_n(&loom_pool.state, __ATOMIC_SEQ_CST);
    int inside = 0;
    while ((st & LOOM_OPEN) && !inside)
      inside = __atomic_compare_exchange_n(&loom_pool.state, &st, st + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    if (!inside) continue;
    loom_team *tm = __atomic_load_n(&loom_pool.walk, __ATOMIC_SEQ_CST);
    if (t < tm->nt) loom_team_loop(tm, t, 0);
    __atomic_sub_fetch(&loom_pool.state, 1, __ATOMIC_SEQ_CST);
  }
  return NULL;
}

/* Start workers up to `n` (a child process after fork has none: it starts its own). 0 when none can run. */
static int loom_pool_ready(int64_t n) {
  const int64_t pid = (int64_t)getpid();
  pthread_mutex_lock(&loom_pool_grow);
  if (loom_pool.pid != pid) {
    loom_pool.pid = pid;
    loom_pool.workers = 0;
    loom_pool.state = 0;
  }
  while (loom_pool.workers < n) {
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int bad = pthread_create(&th, &attr, loom_worker, (void *)(intptr_t)(loom_pool.workers + 1));
    pthread_attr_destroy(&attr);
    if (bad) break;
    loom_pool.workers++;
  }
  const int ok = loom_pool.workers > 0;
  pthread_mutex_unlock(&loom_pool_grow);
  return ok;
}
#endif

/* Run the whole table on a team of threads by a static schedule (`loom.runtime.native` writes it): ``[threads,
   order[nsteps], owner[nsteps], first dependency[nsteps + 1], dependencies..., blocks[nsteps]]``. The caller
   is thread 0, loom's team (above) the others. Each thread takes the steps in `order` that it owns (owner t),
   or that every thread shares (owner -1: a GEMM cut in one piece of row tiles per planned thread,
   `loom_gemm_share`, or a kernel in row blocks, `blocks[k]` the address of their argument blocks), and
   starts one when the steps it depends on (whose memory it reads or writes, or that may stop the walk) are
   done; a step is claimed before it runs, and a thread that would wait runs ready steps nobody has claimed
   (`loom_help`). Kernels run on one thread each. `done` holds 2 * nsteps cells: per step, the pieces finished,
   then the pieces claimed. Returns nsteps, or the index of a step that stopped the walk (its code in
   ctl[CTL_RC]), once no thread runs a step any more: the first nsteps cells of `done` then hold 1 for each
   step that ran whole, 0 for the others, for `loom_run` to resume with (ctl[CTL_DONE]). */
int64_t loom_run_team(const int64_t *prog, const char *objs, int64_t *ctl, const int64_t *sched, int64_t *done) {
  const int64_t nsteps = prog[0], nobj = ctl[CTL_NOBJ], nt = sched[0] < LOOM_TEAM_MAX ? sched[0] : LOOM_TEAM_MAX;
  char *base[nobj > 0 ? nobj : 1];
  loom_bases(objs, ctl, base);
  memset(done, 0, (size_t)(2 * nsteps) * sizeof *done);
  ctl[CTL_RC] = 0;
  loom_blas_threads(prog, ctl, 0);
  loom_waiter waiters[LOOM_TEAM_MAX];
  const int64_t *first = sched + 1 + 2 * nsteps, *deps = first + nsteps + 1;
  loom_team tm = {prog, sched + 1, sched + 1 + nsteps, first, deps, deps + first[nsteps], base,
                  nsteps, nt, done, done + nsteps, (int64_t *)ctl[CTL_TRACE], INT64_MAX, 0, 0, 0, waiters, ctl};
  for (int64_t t = 0; t < nt; t++) { waiters[t].word = 0; waiters[t].waits_for = -1; }
  int team = 0;
#ifdef __linux__
  int32_t free_ = 0;
  if (__atomic_compare_exchange_n(&loom_pool.busy, &free_, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    team = loom_pool_ready(nt - 1);
    if (team) {
      __atomic_store_n(&loom_pool.walk, &tm, __ATOMIC_SEQ_CST);
      __atomic_store_n(&loom_pool.state, LOOM_OPEN, __ATOMIC_SEQ_CST);
      __atomic_add_fetch(&loom_pool.gen, 1, __ATOMIC_SEQ_CST);
      syscall(SYS_futex, &loom_pool.gen, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
    } else {
      __atomic_store_n(&loom_pool.busy, 0, __ATOMIC_SEQ_CST);
    }
  }
#endif
  /* Without every worker of the plan, the caller takes any step at once. */
  loom_team_loop(&tm, 0, !team || loom_pool.workers < nt - 1);
  for (int64_t k = 0; k < nsteps && !loom_stopped(&tm); k++)  /* Steps still running on other threads. */
    for (int64_t since = loom_now_ns(); __atomic_load_n(&done[k], __ATOMIC_SEQ_CST) < loom_pieces(&tm, k) &&
         !loom_stopped(&tm);)
      if (loom_now_ns() - since < LOOM_SPIN_NS) loom_pause();
      else loom_sleep(done, k, loom_pieces(&tm, k), &tm.stop, &waiters[0]);
#ifdef __linux__
  if (team) {
    int64_t st = __atomic_load_n(&loom_pool.state, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(&loom_pool.state, &st, st & ~LOOM_OPEN, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {}
    for (int64_t since = loom_now_ns(); __atomic_load_n(&loom_pool.state, __ATOMIC_SEQ_CST) != 0;)
      if (loom_now_ns() - since < LOOM_SPIN_NS) loom_pause(); else sched_yield();
    __atomic_store_n(&loom_pool.busy, 0, __ATOMIC_SEQ_CST);
  }
#endif
  if (tm.stop == INT64_MAX) return nsteps;
  for (int64_t k = 0; k < nsteps; k++) done[k] = done[k] >= loom_pieces(&tm, k);
  ctl[CTL_RC] = tm.code == LOOM_PY_STEP ? 0 : tm.code;
  return tm.stop;
}
"""

_LOCK = threading.Lock()


class _State:
    driver: Driver | None = None           # The loaded library.
    done: threading.Event | None = None    # Set when its build (or load) has finished.


_STATE = _State()


class Driver:
    """The loaded driver library: ``run_objects(prog, objs, ctl, start)`` (objects as a tuple) and
    ``run_pointers`` (the same with a table of pointers to data-pointer cells); ``team_objects(prog, objs,
    ctl, schedule, done)`` and ``team_pointers`` run a table on a team of threads (``loom_run_team``)."""

    def __init__(self, lib: ctypes.CDLL, path: str):
        self.path = path
        self._lib = lib
        proto = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p, ctypes.c_int64)
        self.run_objects = proto(("loom_run", lib))
        proto = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
        self.run_pointers = proto(("loom_run", lib))
        team = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p)
        self.team_objects = team(("loom_run_team", lib))
        team = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p)
        self.team_pointers = team(("loom_run_team", lib))


def _load(path: str, root: str) -> Driver:
    with trust.locked(os.path.dirname(path), exclusive=False):
        trust.verify(path, root)
        lib = ctypes.CDLL(path)
    if not hasattr(lib, "loom_run"):
        raise trust.Untrusted("entry", f"driver library {path} has no entry point loom_run")
    return Driver(lib, path)


def _where() -> tuple[str, str] | None:
    """(library path, cache root) of the driver for this compiler; None when it cannot be built here."""
    from . import cache

    cc_id = build.compiler_id()
    root = cache._root()
    if cc_id is None or root is None or os.environ.get("LOOM_CODEGEN", "1") == "0":
        return None
    key = cache.kernel_key("loom-step-driver\n" + SOURCE, False, cc_id)
    return os.path.join(root, "kernels", key[:2], key + ".so"), root


def _load_cached() -> Driver | None:
    """The driver from the kernel cache if it is there and loom built it (a load, not a build: quick)."""
    where = _where()
    if where is None:
        return None
    try:
        return _load(*where)
    except FileNotFoundError:
        return None
    except (trust.Untrusted, OSError) as e:
        log.debug("loom.codegen: the cached step driver is not loaded (%s); it is rebuilt", e)
        return None


def _build() -> Driver | None:
    where = _where()
    if where is None:
        return None
    path, root = where
    try:
        return _load(path, root)
    except FileNotFoundError:
        pass
    except (trust.Untrusted, OSError) as e:
        log.debug("loom.codegen: rebuilding the step driver (%s)", e)
    try:
        trust.private_subdir(root, "kernels", os.path.basename(os.path.dirname(path)))
        build.compile_shared(SOURCE, path, False)
        return _load(path, root)
    except (build.BuildError, trust.Untrusted, OSError) as e:
        log.warning("loom.codegen: building the native step driver failed (%s); compiled steps run from Python", e)
        return None


def get_driver(wait: bool = False) -> Driver | None:
    """The driver library if it is loaded; loads it from the kernel cache, or starts its build (in the background
    unless `wait`) otherwise.

    Returns None while it builds and when it cannot be built (no compiler,
    no safe cache directory, ``LOOM_CODEGEN=0``).
    """
    from . import cache

    if _STATE.driver is not None:
        return _STATE.driver
    sync = wait or cache.sync_mode()
    with _LOCK:
        done = _STATE.done
        if done is None:
            done = _STATE.done = threading.Event()
            # Already in the cache (every run after the first on this machine): load it now, so the first call
            # of a compiled step runs natively. Only a build goes to the background.
            found = _load_cached()
            if found is not None:
                _STATE.driver = found
                done.set()
                return found

            def work(event: threading.Event = done) -> None:
                try:
                    _STATE.driver = _build()
                finally:
                    event.set()
            if sync:
                work()
            else:
                cache._pool().submit(work)
    if sync:
        done.wait()
    return _STATE.driver


def driver_done() -> bool:
    """Whether the driver's build (or load) has finished, successfully or not."""
    done = _STATE.done
    return done is not None and done.is_set()


def wait_driver(timeout: float | None = None) -> bool:
    """Block until the driver is built (or `timeout` seconds pass); True if it is loaded."""
    get_driver()
    done = _STATE.done
    if done is not None:
        done.wait(timeout)
    return _STATE.driver is not None


def _after_fork() -> None:
    """A build thread does not survive fork: a child whose build was pending starts it again."""
    global _LOCK
    _LOCK = threading.Lock()
    if _STATE.done is not None and not _STATE.done.is_set():
        _STATE.done = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
