"""The native convolution library: conv2d and its adjoints in float32 through oneDNN, called from C.

A small C library (``SOURCE``) wraps oneDNN's C API; it is built once per
machine through the kernel cache's build and trust machinery (``-ldnnl``),
stored under ``$LOOM_CACHE_DIR/kernels`` with its hash index, and loaded only
when `loom.codegen.trust` accepts it. oneDNN is optional: when its header or
library is missing the build fails once, quietly, and every convolution runs
the NumPy reference (`loom.ir.conv`). Unlike kernels, the library is loaded
(or built, a fraction of a second once per machine) in the calling thread at
the first convolution: oneDNN's results are not the reference path's bits, and
its output layout is not the reference's, so a background build would let
thread timing decide which convolutions of a process (and which summation
order downstream) each run gets. ``LOOM_CODEGEN=0`` or ``LOOM_NATIVE_CONV=0``
never use it.

Threads: oneDNN runs on OpenMP; each call sets the calling thread's OpenMP
count to `loom.get_num_threads()` (or 1 for convolutions under
``LOOM_BLAS_PAR_MIN`` multiply-adds, the rule matmuls follow), so loom never
computes on more threads than it owns.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import threading

import numpy as np

from loom.runtime import threads

log = logging.getLogger("loom.codegen")

KINDS = {"conv2d": 0, "conv2d_input_grad": 1, "conv2d_weight_grad": 2}
FORMAT = "loom-conv-4"
LIBS = ("-ldnnl",)

SOURCE = r"""/* loom's native convolution: conv2d forward and both adjoints through oneDNN's C API (2.x).
 *
 * One entry point, loom_conv2d(kind, nthreads, p, a, b, out):
 *   kind 0  forward        a = x (N, C, H, W), b = w (O, C/G, kh, kw), out = y (N, O, Ho, Wo)
 *   kind 1  input grad     a = gy,              b = w,                  out = gx (N, C, H, W)
 *   kind 2  weight grad    a = x,               b = gy,                 out = gw (O, C/G, kh, kw)
 *   + 4     the same, letting oneDNN choose its blocked layouts (reordered from and to plain ones)
 * p holds 18 int64: N C H W O kh kw Ho Wo G sh sw dh dw pt pb pl pr (dilation as in loom: 1 = dense).
 * All arrays are float32, C-contiguous (plain nchw / oihw layouts).
 *
 * Primitives (and their reorders) are created once per (kind, threads, p) and kept in a small
 * locked list; creating one JIT-compiles code, executing it is cheap. Their scratchpads are ours
 * (dnnl_scratchpad_mode_user), not oneDNN's per-thread ones: a primitive made or run on a thread
 * that has since exited must not point at that thread's freed scratch memory. oneDNN runs on OpenMP: the
 * count is set on the calling thread before creation and before each run, so it uses exactly
 * loom's thread count. Returns 0 on success, else a oneDNN status (>0) or -1 (out of memory).
 */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    int kind, nthreads;
    int64_t p[18];
    dnnl_primitive_t prim;
    dnnl_primitive_t reorder[3];   /* Plain -> chosen for the two inputs, chosen -> plain for the output. */
    dnnl_memory_desc_t plain[3], chosen[3];
    pthread_mutex_t busy;          /* Held while a call uses the kept buffers; others allocate their own. */
    void *kept[3];
    dnnl_memory_desc_t scratch[4]; /* Scratchpad of the primitive (0) and of each reorder (1 + i). */
    void *kept_scratch[4];
    struct entry *next;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine = NULL;
static entry *cache = NULL;

static const dnnl_query_t QUERY[3][3] = {
    {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
    {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
    {dnnl_query_src_md, dnnl_query_diff_dst_md, dnnl_query_diff_weights_md}};
static const int ARG[3][3] = {
    {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
    {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
    {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}};

#define CHECK(call) do { dnnl_status_t s_ = (call); if (s_ != dnnl_success) { status = s_; goto done; } } while (0)

static dnnl_status_t create(entry *e) {
    const int64_t *p = e->p;
    int op = e->kind & 3, blocked = e->kind & 4;
    int64_t N = p[0], C = p[1], H = p[2], W = p[3], O = p[4], kh = p[5], kw = p[6], Ho = p[7], Wo = p[8];
    int64_t G = p[9];
    dnnl_dims_t src_dims = {N, C, H, W}, dst_dims = {N, O, Ho, Wo};
    dnnl_dims_t w_dims = {G, O / G, C / G, kh, kw};
    dnnl_dims_t strides = {p[10], p[11]}, dil = {p[12] - 1, p[13] - 1};
    dnnl_dims_t pad_l = {p[14], p[16]}, pad_r = {p[15], p[17]};
    dnnl_memory_desc_t src, dst, wei, src_p, dst_p, wei_p;
    dnnl_convolution_desc_t fwd_d, bwd_d;
    dnnl_primitive_desc_t fwd_pd = NULL, bwd_pd = NULL, pd, rpd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_status_t status = dnnl_success;
    CHECK(dnnl_primitive_attr_create(&attr));
    CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    CHECK(dnnl_memory_desc_init_by_tag(&src_p, 4, src_dims, dnnl_f32, dnnl_nchw));
    CHECK(dnnl_memory_desc_init_by_tag(&dst_p, 4, dst_dims, dnnl_f32, dnnl_nchw));
    CHECK(dnnl_memory_desc_init_by_tag(&wei_p, 5, w_dims, dnnl_f32, dnnl_goihw));
    CHECK(dnnl_memory_desc_init_by_tag(&src, 4, src_dims, dnnl_f32, blocked ? dnnl_format_tag_any : dnnl_nchw));
    CHECK(dnnl_memory_desc_init_by_tag(&dst, 4, dst_dims, dnnl_f32, blocked ? dnnl_format_tag_any : dnnl_nchw));
    CHECK(dnnl_memory_desc_init_by_tag(&wei, 5, w_dims, dnnl_f32, blocked ? dnnl_format_tag_any : dnnl_goihw));
    CHECK(dnnl_dilated_convolution_forward_desc_init(&fwd_d, op == 0 ? dnnl_forward_inference : dnnl_forward_training,
                                                     dnnl_convolution_direct, &src, &wei, NULL, &dst, strides, dil,
                                                     pad_l, pad_r));
    CHECK(dnnl_primitive_desc_create(&fwd_pd, &fwd_d, attr, engine, NULL));
    pd = fwd_pd;
    if (op != 0) {
        if (op == 1)
            CHECK(dnnl_dilated_convolution_backward_data_desc_init(&bwd_d, dnnl_convolution_direct, &src, &wei, &dst,
                                                                   strides, dil, pad_l, pad_r));
        else
            CHECK(dnnl_dilated_convolution_backward_weights_desc_init(&bwd_d, dnnl_convolution_direct, &src, &wei,
                                                                      NULL, &dst, strides, dil, pad_l, pad_r));
        CHECK(dnnl_primitive_desc_create(&bwd_pd, &bwd_d, attr, engine, fwd_pd));
        pd = bwd_pd;
    }
    CHECK(dnnl_primitive_create(&e->prim, pd));
    e->scratch[0] = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    const dnnl_memory_desc_t *plain[3][3] = {{&src_p, &wei_p, &dst_p}, {&dst_p, &wei_p, &src_p},
                                             {&src_p, &dst_p, &wei_p}};
    for (int i = 0; i < 3; i++) {
        e->plain[i] = *plain[op][i];
        e->chosen[i] = *dnnl_primitive_desc_query_md(pd, QUERY[op][i], 0);
        if (dnnl_memory_desc_equal(&e->plain[i], &e->chosen[i])) continue;
        const dnnl_memory_desc_t *from = i < 2 ? &e->plain[i] : &e->chosen[i];
        const dnnl_memory_desc_t *to = i < 2 ? &e->chosen[i] : &e->plain[i];
        CHECK(dnnl_reorder_primitive_desc_create(&rpd, from, engine, to, engine, attr));
        CHECK(dnnl_primitive_create(&e->reorder[i], rpd));
        e->scratch[1 + i] = *dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0);
        dnnl_primitive_desc_destroy(rpd);
        rpd = NULL;
    }
done:
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
    if (bwd_pd) dnnl_primitive_desc_destroy(bwd_pd);
    if (status != dnnl_success) {
        if (e->prim) dnnl_primitive_destroy(e->prim);
        for (int i = 0; i < 3; i++)
            if (e->reorder[i]) dnnl_primitive_destroy(e->reorder[i]);
    }
    return status;
}

static dnnl_status_t lookup(int kind, int nthreads, const int64_t *p, entry **found) {
    dnnl_status_t status = dnnl_success;
    pthread_mutex_lock(&lock);
    if (engine == NULL) {
        status = dnnl_engine_create(&engine, dnnl_cpu, 0);
        if (status != dnnl_success) { engine = NULL; goto done; }
    }
    for (entry *e = cache; e; e = e->next) {
        if (e->kind == kind && e->nthreads == nthreads && !memcmp(e->p, p, sizeof e->p)) {
            *found = e;
            goto done;
        }
    }
    entry *e = calloc(1, sizeof *e);
    if (!e) { status = (dnnl_status_t)-1; goto done; }
    e->kind = kind;
    e->nthreads = nthreads;
    memcpy(e->p, p, sizeof e->p);
    pthread_mutex_init(&e->busy, NULL);
    status = create(e);
    if (status != dnnl_success) { free(e); goto done; }
    e->next = cache;
    cache = e;
    *found = e;
done:
    pthread_mutex_unlock(&lock);
    return status;
}

/* Run `prim` with `args` plus its scratchpad (described by e->scratch[slot]): the entry's kept one when
   this call owns the entry's buffers, else one allocated for the call. */
static dnnl_status_t run(entry *e, int slot, int own, dnnl_primitive_t prim, dnnl_stream_t stream, int nargs,
                         const dnnl_exec_arg_t *args) {
    dnnl_exec_arg_t all[4];
    dnnl_memory_t pad = NULL;
    void *mine = NULL;
    dnnl_status_t s = dnnl_success;
    size_t size = dnnl_memory_desc_get_size(&e->scratch[slot]);
    memcpy(all, args, (size_t)nargs * sizeof *args);
    if (size) {
        void *mem = own ? e->kept_scratch[slot] : NULL;
        if (!mem) {
            mem = aligned_alloc(64, (size + 63) / 64 * 64);
            if (!mem) return (dnnl_status_t)-1;
            if (own) e->kept_scratch[slot] = mem; else mine = mem;
        }
        s = dnnl_memory_create(&pad, &e->scratch[slot], engine, mem);
        if (s != dnnl_success) { free(mine); return s; }
        all[nargs].arg = DNNL_ARG_SCRATCHPAD;
        all[nargs].memory = pad;
        nargs++;
    }
    s = dnnl_primitive_execute(prim, stream, nargs, all);
    if (s == dnnl_success) s = dnnl_stream_wait(stream);
    if (pad) dnnl_memory_destroy(pad);
    free(mine);
    return s;
}

int loom_conv2d(int kind, int nthreads, const int64_t *p, const float *a, const float *b, float *out) {
    if (kind < 0 || kind > 6 || (kind & 3) == 3 || nthreads < 1) return (int)dnnl_invalid_arguments;
    omp_set_num_threads(nthreads);
    entry *e;
    dnnl_status_t status = lookup(kind, nthreads, p, &e);
    if (status != dnnl_success) return (int)status;
    int op = kind & 3;
    dnnl_memory_t user[3] = {NULL, NULL, NULL}, work[3] = {NULL, NULL, NULL};
    void *buf[3] = {NULL, NULL, NULL};
    dnnl_stream_t stream = NULL;
    void *data[3] = {(void *)a, (void *)b, out};
    dnnl_exec_arg_t args[3];
    /* Reorder buffers: the entry's kept ones (allocated once, so no page faults per call) unless
       another thread is using them. */
    int own = pthread_mutex_trylock(&e->busy) == 0;
    CHECK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
    for (int i = 0; i < 3; i++) {
        CHECK(dnnl_memory_create(&user[i], &e->plain[i], engine, data[i]));
        if (e->reorder[i]) {
            size_t size = (dnnl_memory_desc_get_size(&e->chosen[i]) + 63) / 64 * 64;
            void *mem = own ? e->kept[i] : NULL;
            if (!mem) {
                mem = aligned_alloc(64, size);
                if (!mem) { status = (dnnl_status_t)-1; goto done; }
                if (own) e->kept[i] = mem; else buf[i] = mem;
            }
            CHECK(dnnl_memory_create(&work[i], &e->chosen[i], engine, mem));
        }
        if (e->reorder[i] && i < 2) {
            dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, user[i]}, {DNNL_ARG_TO, work[i]}};
            CHECK(run(e, 1 + i, own, e->reorder[i], stream, 2, r));
        }
        args[i].arg = ARG[op][i];
        args[i].memory = work[i] ? work[i] : user[i];
    }
    CHECK(run(e, 0, own, e->prim, stream, 3, args));
    if (e->reorder[2]) {
        dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, work[2]}, {DNNL_ARG_TO, user[2]}};
        CHECK(run(e, 3, own, e->reorder[2], stream, 2, r));
    }
done:
    if (stream) dnnl_stream_destroy(stream);
    for (int i = 0; i < 3; i++) {
        if (user[i]) dnnl_memory_destroy(user[i]);
        if (work[i]) dnnl_memory_destroy(work[i]);
        free(buf[i]);
    }
    if (own) pthread_mutex_unlock(&e->busy);
    return (int)status;
}
"""

POOL_SOURCE = r"""/* loom's max-pooling window choice (the max_pool2d_index primitive), PyTorch's loop per window:
 * start at the window's first element inside the input, move on `v > best || isnan(v)`.
 * p holds 13 int64: N*C H W Ho Wo kh kw sh sw pt pl dh dw; out gets int64 flat indices h * W + w. */
#include <math.h>
#include <stdint.h>

#define POOL(NAME, T)                                                                               \
void NAME(int nthreads, const int64_t *p, const T *x, int64_t *out) {                              \
    int64_t NC = p[0], H = p[1], W = p[2], Ho = p[3], Wo = p[4], kh = p[5], kw = p[6];              \
    int64_t sh = p[7], sw = p[8], pt = p[9], pl = p[10], dh = p[11], dw = p[12];                    \
    _Pragma("omp parallel for num_threads(nthreads) if(nthreads > 1)")                               \
    for (int64_t c = 0; c < NC; c++) {                                                              \
        const T *xc = x + c * H * W;                                                                \
        int64_t *oc = out + c * Ho * Wo;                                                            \
        for (int64_t oh = 0; oh < Ho; oh++) {                                                       \
            for (int64_t ow = 0; ow < Wo; ow++) {                                                   \
                int64_t idx = -1;                                                                   \
                T best = -INFINITY;                                                                 \
                for (int64_t i = 0; i < kh; i++) {                                                  \
                    int64_t h = oh * sh - pt + i * dh;                                              \
                    if (h < 0 || h >= H) continue;                                                  \
                    for (int64_t j = 0; j < kw; j++) {                                              \
                        int64_t w = ow * sw - pl + j * dw;                                          \
                        if (w < 0 || w >= W) continue;                                              \
                        T v = xc[h * W + w];                                                        \
                        if (idx < 0) idx = h * W + w;                                               \
                        int upd = (v > best) | (v != v);  /* Branch-free: a random maximum mispredicts. */\
                        idx = upd ? h * W + w : idx;                                                \
                        best = upd ? v : best;                                                      \
                    }                                                                               \
                }                                                                                   \
                oc[oh * Wo + ow] = idx;                                                             \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
}

POOL(loom_max_pool2d_index_f32, float)
POOL(loom_max_pool2d_index_f64, double)
"""

_LOADED: list = []


class NativeLibrary:
    """One small C library built through the kernel cache's build and trust machinery, loaded once.

    `state`: status (unbuilt | building | ready | failed), fn (the loaded entry points, a dict by
    symbol), error. Builds run on the kernel build pool (in the calling thread with
    ``LOOM_CODEGEN_SYNC=1``, or always when `sync`: a library whose results differ from the NumPy
    path's must not be picked by timing); on any failure the caller's NumPy path stays.
    """

    def __init__(self, name: str, fmt: str, source: str, libs: tuple[str, ...], symbols: dict[str, list],
                 switch: str, sync: bool = False):
        self.name, self.fmt, self.source, self.libs = name, fmt, source, libs
        self.symbols, self.switch, self.sync = symbols, switch, sync
        self.lock = threading.Lock()
        self.state: dict = {"status": "unbuilt", "fn": None, "error": None}
        self.done = threading.Event()

    def key(self, cc_id: str) -> str:
        from . import build
        h = hashlib.sha256()
        for part in (self.fmt, cc_id, " ".join(build.flags(False)), " ".join(self.libs), self.source):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def _load(self, path: str, root: str) -> dict:
        from . import trust
        with trust.locked(os.path.dirname(path), exclusive=False):
            trust.verify(path, root)
            lib = ctypes.CDLL(path)
        fns = {}
        for symbol, argtypes in self.symbols.items():
            fn = getattr(lib, symbol)
            fn.restype = ctypes.c_int if symbol == "loom_conv2d" else None
            fn.argtypes = argtypes
            fns[symbol] = fn
        _LOADED.append(lib)  # Kept loaded for the life of the process, as kernel libraries are.
        return fns

    def _build(self) -> None:
        """Load the library from the cache, or build it there; on any failure the reference path stays."""
        from . import build, cache, trust
        fns, error = None, None
        try:
            cc_id = build.compiler_id()
            root = cache._root()
            if cc_id is None or root is None:
                raise build.BuildError("no C compiler or no safe kernel cache directory")
            key = self.key(cc_id)
            path = os.path.join(root, "kernels", key[:2], key + ".so")
            trust.private_subdir(root, "kernels", key[:2])
            try:
                fns = self._load(path, root)
            except (FileNotFoundError, trust.Untrusted, OSError):
                build.compile_shared(self.source, path, False, extra_libs=self.libs)
                fns = self._load(path, root)
        except (build.BuildError, trust.Untrusted, OSError, AttributeError) as e:
            error = str(e)
            log.info("loom.codegen: native %s unavailable, using the NumPy path: %s", self.name,
                     error.splitlines()[0] if error else e)
        with self.lock:
            self.state.update(status="ready" if fns is not None else "failed", fn=fns, error=error)
        self.done.set()

    def reset(self) -> None:
        """Forget the loaded library (tests: the next call loads or builds it again)."""
        with self.lock:
            self.state.update(status="unbuilt", fn=None, error=None)
            self.done = threading.Event()

    def after_fork(self) -> None:
        self.lock = threading.Lock()
        if self.state["status"] == "building":  # Its build thread is not in the child.
            self.reset()

    def enabled(self) -> bool:
        return os.environ.get("LOOM_CODEGEN", "1") != "0" and os.environ.get(self.switch, "1") != "0"

    def library(self):
        """The loaded entry points, or None while they build (in the background) or when unavailable."""
        if not self.enabled():
            return None
        state = self.state
        if state["status"] == "ready":
            return state["fn"]
        if state["status"] == "unbuilt":
            with self.lock:
                start = state["status"] == "unbuilt"
                if start:
                    state["status"] = "building"
            if start:
                from . import cache
                if self.sync or cache.sync_mode():
                    self._build()
                else:
                    cache._pool().submit(self._build)
        if state["status"] == "building" and (self.sync or os.environ.get("LOOM_CODEGEN_SYNC", "0") not in ("", "0")):
            self.done.wait()
        return state["fn"] if state["status"] == "ready" else None

    def available(self, timeout: float | None = None) -> bool:
        """Whether the library is usable, waiting up to `timeout` seconds for its build."""
        self.library()
        if self.state["status"] == "building":
            self.done.wait(timeout)
        return self.state["status"] == "ready"


_P = ctypes.c_void_p
CONV = NativeLibrary("convolution (oneDNN missing?)", FORMAT, SOURCE, LIBS,
                     {"loom_conv2d": [ctypes.c_int, ctypes.c_int, _P, _P, _P, _P]}, "LOOM_NATIVE_CONV", sync=True)
POOL = NativeLibrary("max pooling", "loom-pool-2", POOL_SOURCE, (),
                     {f"loom_max_pool2d_index_{t}": [ctypes.c_int, _P, _P, _P] for t in ("f32", "f64")},
                     "LOOM_NATIVE_CONV")
_state = CONV.state
reset = CONV.reset
available = CONV.available


def library():
    """The convolution entry point, or None while it builds or when it is unavailable."""
    fns = CONV.library()
    return None if fns is None else fns["loom_conv2d"]


def _after_fork() -> None:
    CONV.after_fork()
    POOL.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def max_pool2d_index(x: np.ndarray, attrs: dict, shape: tuple[int, ...],
                     out: np.ndarray | None = None) -> np.ndarray | None:
    """The max_pool2d_index primitive on a float32/float64 array in C; None if the library is not available."""
    fns = POOL.library()
    if fns is None or x.dtype not in (np.float32, np.float64) or 0 in x.shape:
        return None
    k, s, p, d = attrs["kernel_size"], attrs["stride"], attrs["padding"], attrs["dilation"]
    params = np.array([x.shape[0] * x.shape[1], x.shape[2], x.shape[3], shape[2], shape[3], k[0], k[1], s[0], s[1],
                       p[0], p[2], d[0], d[1]], np.int64)
    x = np.ascontiguousarray(x)
    dst = out if out is not None and out.flags.c_contiguous and out.dtype == np.int64 else np.empty(shape, np.int64)
    n = threads.get_num_threads() if x.size >= (1 << 20) else 1
    fns["loom_max_pool2d_index_f32" if x.dtype == np.float32 else "loom_max_pool2d_index_f64"](
        n, params.ctypes.data, x.ctypes.data, dst.ctypes.data)
    if out is not None and dst is not out:
        np.copyto(out, dst)
        return out
    return dst


def _params(op, a, b, attrs, shape):
    """The 18 geometry ints of the C entry point, and the multiply-adds of the call."""
    if op == "conv2d":
        x, w, y = a.shape, b.shape, shape
    elif op == "conv2d_input_grad":
        x, w, y = shape, b.shape, a.shape
    else:
        x, w, y = a.shape, shape, b.shape
    s, p, d = attrs["stride"], attrs["padding"], attrs["dilation"]
    return np.array([x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], attrs["groups"], s[0], s[1], d[0], d[1],
                     p[0], p[1], p[2], p[3]], np.int64), int(np.prod(y, dtype=np.int64)) * w[1] * w[2] * w[3]


def out_shape(op, a, b, attrs):
    from loom.ir.conv import _out_hw
    if op == "conv2d":
        return (a.shape[0], b.shape[0]) + _out_hw(op, a.shape, b.shape[2:], attrs)
    if op == "conv2d_input_grad":
        return (a.shape[0], b.shape[1] * attrs["groups"]) + tuple(attrs["input_size"])
    return (b.shape[1], a.shape[1] // attrs["groups"]) + tuple(attrs["kernel_size"])


def choose(op: str, w_shape: tuple[int, ...], attrs: dict) -> str:
    """The measured winner per shape class (benchmarks/conv_layers.py): "reference", "plain" or "blocked".

    Measured with cold caches (``--cold``), as in a training step: oneDNN's
    blocked layouts (direct JIT kernels, plus reorders from and to the plain
    ones) win for 3x3-style convolutions with many channels and for
    depthwise ones; plain layouts (its im2col + GEMM) win for pointwise
    (1x1, any stride) ones and for a single input channel, where the NumPy
    path wins an unpadded forward pass.
    """
    cin, g, padded = w_shape[1], attrs["groups"], any(attrs["padding"])
    if cin == 1 and g == 1:
        forward = "plain" if padded else "reference"  # NumPy's im2col pads with a copy.
        return {"conv2d": forward, "conv2d_input_grad": "plain", "conv2d_weight_grad": "blocked"}[op]
    if w_shape[2:] == (1, 1) and not padded:  # Strided too: the blocked reorders cost more than they save.
        return "plain"
    return "blocked"


# Per call geometry: (out shape, address of its C params (kept alive here), multiply-adds, `choose`'s answer).
_GEOMETRY: dict = {}


def _geometry(op: str, a: np.ndarray, b: np.ndarray, attrs: dict) -> tuple:
    """`run`'s per-geometry facts, worked out once per geometry (a training step repeats every one)."""
    key = (op, a.shape, b.shape) + tuple(attrs.get(k) for k in ("stride", "padding", "dilation", "groups",
                                                                  "input_size", "kernel_size"))
    try:
        hit = _GEOMETRY.get(key)
    except TypeError:  # Unhashable attrs (lists): work it out every time.
        key, hit = None, None
    if hit is not None:
        return hit
    shape = out_shape(op, a, b, attrs)
    if 0 in a.shape or 0 in b.shape or 0 in shape:
        hit = (None, None, 0, None, None)
    else:
        p, macs = _params(op, a, b, attrs, shape)
        w_shape = (int(p[4]), int(p[1]) // attrs["groups"], int(p[5]), int(p[6]))  # (O, C/G, kh, kw)
        hit = (shape, p.ctypes.data, macs, choose(op, w_shape, attrs), p)
    if key is not None:
        if len(_GEOMETRY) > 4096:
            _GEOMETRY.clear()
        _GEOMETRY[key] = hit
    return hit


def run(op: str, a: np.ndarray, b: np.ndarray, attrs: dict, out: np.ndarray | None = None,
        blocked: bool | None = None) -> np.ndarray | None:
    """`op` on float32 arrays through the native library, into `out` if given; None if it is not available.

    `blocked`: let oneDNN pick its blocked layouts (and reorder to and from the plain ones) rather
    than run on the plain layouts; None decides by shape class (`choose`, which may also answer
    that the NumPy path is faster: then None is returned).
    """
    fn = library()
    if fn is None or a.dtype != np.float32 or b.dtype != np.float32:
        return None
    shape, params, macs, how, _ = _geometry(op, a, b, attrs)
    if shape is None:
        return None
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    dst = out if out is not None and out.flags.c_contiguous and out.dtype == np.float32 else np.empty(shape, np.float32)
    n = threads.get_num_threads() if macs >= threads.blas_par_min() else 1
    if blocked is None:
        if how == "reference":
            return None
        blocked = how == "blocked"
    status = fn(KINDS[op] + (4 if blocked else 0), n, params, a.ctypes.data, b.ctypes.data, dst.ctypes.data)
    if status != 0:
        log.debug("loom.codegen: oneDNN %s failed with status %d; using the NumPy path", op, status)
        return None
    if out is not None and dst is not out:
        np.copyto(out, dst)
        return out
    return dst
