"""GEMM epilogues: a fused kernel that only post-processes a GEMM's result runs on each row block right after it.

When fused kernels read a matmul's value only in the rows they write (bias add,
activation, residual add, scaling, a row softmax, an optimizer's update of the
weight whose gradient it is, and kernels reading those kernels' values), the
native step (`loom.runtime.native`) runs them as alternating driver records:
``sgemm`` on a block of rows of C (or the whole GEMM first, for a chain of
several kernels: cutting it packs its B operand once per block), then each
kernel on the same rows while they are still in cache, instead of passes over
whole arrays. `reads_within_rows` checks that a kernel reads no other rows.

This module cuts a kernel's argument block (`loom.codegen.kernel`) into row
blocks. The kernel is not rebuilt: a block is the same argument block with
the outermost output loop dim shortened and every pointer moved to the block's
first element (the leaves' and the output's byte offsets, the pad guards'
bases), so every object's data pointer and extent stay those of the whole
call and the kernel's overlap and alignment checks answer as they would for
it. Nothing depends on the kernel's source.

It also holds the driver's GEMM on float16/bfloat16 operands (`DRIVER_SOURCE`):
blocks converted to float32, ``sgemm``, the result rounded once.
"""
from __future__ import annotations

import os

import numpy as np

from loom.runtime import threads

from . import half

BLOCK_BYTES_DEFAULT = 256 * 1024  # Bytes of C per row block and thread: about half an L2 cache.


def block_bytes() -> int:
    """Bytes of C per GEMM row block (``LOOM_GEMM_BLOCK_BYTES``; 0 runs each GEMM whole, then its epilogue).

    The default is `BLOCK_BYTES_DEFAULT` per thread of ``loom.get_num_threads()`` when the step is encoded:
    the driver cuts each block's GEMM and kernel across the threads, so each thread's share stays about half
    its core's L2, and a block costs two team starts however many threads share it.
    """
    default = BLOCK_BYTES_DEFAULT * threads.get_num_threads()
    try:
        return max(0, int(os.environ.get("LOOM_GEMM_BLOCK_BYTES", default)))
    except ValueError:
        return default


def block_rows(M: int, N: int, itemsize: int) -> int:
    """Rows of C per block: a multiple of 16 (the GEMM micro-kernels' row unroll) near `block_bytes`."""
    want = block_bytes() // max(1, N * itemsize)
    if want >= M or block_bytes() == 0:
        return M
    return max(32, want // 16 * 16)


def _output_rows(kern, meta: np.ndarray | None, elems: int):
    """The fused kernel's argument block read for a cut along its output's rows: ``(spec, kpos, layout, loop
    count, extents, leaf strides, D, step)`` with D the outermost output loop dim and step its output stride, or
    None when the kernel has no spec or D does not walk all `elems` output elements in order."""
    spec = getattr(kern, "spec", None)
    if spec is None or meta is None:
        return None
    nslot, nobj = int(meta[2]), int(meta[3])
    kpos = 4 + 2 * nslot + 4 * nobj
    lay = spec.layout.offsets()
    NO, L = spec.n_o, spec.n_o + spec.n_r
    n = meta[kpos + lay["n"][0]:kpos + lay["n"][0] + L]
    os_ = meta[kpos + lay["os"][0]:kpos + lay["os"][0] + NO]
    ls = meta[kpos + lay["ls"][0]:kpos + lay["ls"][0] + len(spec.leaves) * L].reshape(-1, L) \
        if spec.leaves else np.zeros((0, L), np.int64)
    outer = [d for d in range(NO) if n[d] != 1]
    if not outer:
        return None
    D = outer[0]
    step = int(os_[D])
    if step <= 0 or int(n[D]) * step != elems:
        return None  # Not the whole output in order.
    return spec, kpos, lay, L, n, ls, D, step


def row_blocks(kern, meta: np.ndarray, elems: int, row_elems: int, rows: list[tuple[int, int]],
               itemsize: int) -> list[np.ndarray] | None:
    """One argument block per row range of `rows` for a kernel whose full-call argument block is `meta`.

    The kernel's output is C-contiguous with `elems` elements; a row of C is
    `row_elems` of them, and rows ``[r0, r1)`` are its elements
    ``[r0 * row_elems, r1 * row_elems)``. Returns None when the kernel's
    outermost output loop dim does not walk the output in whole rows.
    """
    view = _output_rows(kern, meta, elems)
    if view is None:
        return None
    spec, kpos, lay, L, n, ls, D, step = view
    if spec.accs and D == spec.n_o - 1:
        return None  # A reduction's own inner dim.
    ng = sum(len(g.sizes) for g in spec.guards)
    gb0, gc0 = lay["gb"][0], lay["gc"][0]
    out = []
    for r0, r1 in rows:
        if (r0 * row_elems) % step or (r1 * row_elems) % step:
            return None
        i0, i1 = r0 * row_elems // step, r1 * row_elems // step
        m = meta.copy()
        m[kpos + lay["n"][0] + D] = i1 - i0
        m[5] += i0 * step * itemsize  # Slot 0 is the output: its byte offset.
        for k, lf in enumerate(spec.leaves):
            m[5 + 2 * (k + 1)] += i0 * int(ls[k, D]) * lf.dtype.np.itemsize
        for g in range(ng):
            m[kpos + gb0 + g] += i0 * int(meta[kpos + gc0 + g * L + D])
        out.append(m)
    return out


def reads_within_rows(kern, meta: np.ndarray, elems: int, inputs: set[int]) -> bool:
    """Whether the kernel reads each of `inputs` (C-contiguous, `elems` elements like its output) only in the rows
    of it that it writes: element for element, or along its own rows (a row kernel), so that a block of its
    output rows needs only the same rows of those inputs (`row_blocks`' cut)."""
    if getattr(kern, "spec", None) is None or meta is None:
        return False
    if not inputs:
        return True
    view = _output_rows(kern, meta, elems)
    if view is None:
        return False
    spec, kpos, lay, L, n, ls, D, step = view
    lo = meta[kpos + lay["lo"][0]:kpos + lay["lo"][0] + max(1, len(spec.leaves))]
    for k, lf in enumerate(spec.leaves):
        if lf.input not in inputs:
            continue
        if int(meta[5 + 2 * (k + 1)]) or int(lo[k]) or int(ls[k, D]) != step:
            return False  # Not at the output's element, or not moving with the output's rows.
        rest = [d for d in range(L) if d != D and n[d] > 1]
        if any(ls[k, d] < 0 for d in rest) or sum(int(n[d] - 1) * int(ls[k, d]) for d in rest) >= step:
            return False  # Reaches past its own rows.
    return True


# The step driver's half-precision GEMM (record 9, `loom.codegen.driver`): each operand converted to float32 in
# scratch memory of the arena, ``sgemm``, the result rounded back. Record: ``[9, bfloat16?, transa, transb, M, N,
# K, lda, ldb, ldc, (base, offset) for A, B and C, batch dims, multiply-adds, (base, offset) of the scratch,
# (size, A, B, C byte strides) per batch dim]``.
DRIVER_SOURCE = r"""
#include <math.h>
""" + half.HELPERS + r"""
static void loom_h2f(int bf, const char *src, int64_t rows, int64_t cols, int64_t ld, float *dst) {
  for (int64_t i = 0; i < rows; i++) {
    float *d = dst + i * cols;
    if (bf) {
      const uint16_t *s = (const uint16_t *)src + i * ld;
      for (int64_t j = 0; j < cols; j++) d[j] = loom_bf16_f32(s[j]);
    } else {
      const loom_f16 *s = (const loom_f16 *)src + i * ld;
      for (int64_t j = 0; j < cols; j++) d[j] = loom_f16_f32(s[j]);
    }
  }
}

static void loom_f2h(int bf, const float *src, int64_t rows, int64_t cols, char *dst, int64_t ld) {
  for (int64_t i = 0; i < rows; i++) {
    const float *s = src + i * cols;
    if (bf) {
      uint16_t *d = (uint16_t *)dst + i * ld;
      for (int64_t j = 0; j < cols; j++) d[j] = loom_f32_bf16(s[j]);
    } else {
      loom_f16 *d = (loom_f16 *)dst + i * ld;
      for (int64_t j = 0; j < cols; j++) d[j] = loom_f32_f16(s[j]);
    }
  }
}

static void loom_gemm_half(const int64_t *prog, const int64_t *r, char *const *base, int64_t *ctl) {
  int bf = (int)r[1], ta = (int)r[2], tb = (int)r[3];
  int32_t M = (int32_t)r[4], N = (int32_t)r[5], K = (int32_t)r[6];
  int64_t lda = r[7], ldb = r[8], ldc = r[9];
  char *A = base[r[10]] + r[11], *B = base[r[12]] + r[13], *C = base[r[14]] + r[15];
  int64_t nbd = r[16], macs = r[17], nb = 1;
  float *Af = (float *)(base[r[18]] + r[19]), *Bf = Af + (int64_t)M * K, *Cf = Bf + (int64_t)K * N;
  const int64_t *bd = r + 20;
  for (int64_t j = 0; j < nbd; j++) nb *= bd[4 * j];
  loom_blas_threads(prog, ctl, macs);
  const int64_t nt = loom_gemm_threads(ctl, 0, nb > 0 ? macs / nb : 0, 1, M);  /* Per item. */
  /* Stored shapes: A is M x K (K x M transposed), B is K x N (N x K transposed). */
  int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  for (int64_t b = 0; b < nb; b++) {
    int64_t oa, ob, oc;
    loom_batch_offsets(bd, nbd, b, &oa, &ob, &oc);
    loom_h2f(bf, A + oa, ar, ac, lda, Af);
    loom_h2f(bf, B + ob, br, bc, ldb, Bf);
    if (nt == 1)
      loom_gemm_part(prog, ta, tb, M, N, K, (int32_t)ac, (int32_t)bc, N, (const char *)Af, (const char *)Bf, (char *)Cf,
                     0, 1);
    else {
      #pragma omp parallel num_threads(nt)
      loom_gemm_part(prog, ta, tb, M, N, K, (int32_t)ac, (int32_t)bc, N, (const char *)Af, (const char *)Bf, (char *)Cf,
                     omp_get_thread_num(), omp_get_num_threads());
    }
    loom_f2h(bf, Cf, M, N, C + oc, ldc);
  }
}
"""
