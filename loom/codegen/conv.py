"""The native convolution library: conv2d and its adjoints in float32 through oneDNN, called from C.

A small C library (``SOURCE``) wraps oneDNN's C API; it is built once per
machine through the kernel cache's build and trust machinery (``-ldnnl``),
stored under ``$LOOM_CACHE_DIR/kernels`` with its hash index, and loaded only
when `loom.codegen.trust` accepts it. oneDNN is optional: when its header or
library is missing the build fails once, quietly, and every convolution runs
the NumPy reference (`loom.ir.conv`). As with kernels, the build runs in the
background and the reference path serves until it is done
(``LOOM_CODEGEN_SYNC=1`` builds in the calling thread; ``LOOM_CODEGEN=0`` or
``LOOM_NATIVE_CONV=0`` never use it).

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
FORMAT = "loom-conv-1"
LIBS = ("-ldnnl",)

SOURCE = r"""/* loom's native convolution: conv2d forward and both adjoints through oneDNN's C API (2.x).
 *
 * One entry point, loom_conv2d(kind, nthreads, p, a, b, out):
 *   kind 0  forward        a = x (N, C, H, W), b = w (O, C/G, kh, kw), out = y (N, O, Ho, Wo)
 *   kind 1  input grad     a = gy,              b = w,                  out = gx (N, C, H, W)
 *   kind 2  weight grad    a = x,               b = gy,                 out = gw (O, C/G, kh, kw)
 * p holds 18 int64: N C H W O kh kw Ho Wo G sh sw dh dw pt pb pl pr (dilation as in loom: 1 = dense).
 * All arrays are float32, C-contiguous (plain nchw / oihw layouts, so no reorders).
 *
 * Primitives are created once per (kind, threads, p) and kept in a small locked list; creating
 * one JIT-compiles code, executing it is cheap. oneDNN runs on OpenMP: the count is set on the
 * calling thread before creation and before each run, so it uses exactly loom's thread count.
 * Returns 0 on success, else a oneDNN status (>0) or -1 (out of memory).
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
    struct entry *next;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine = NULL;
static entry *cache = NULL;

#define CHECK(call) do { dnnl_status_t s_ = (call); if (s_ != dnnl_success) { status = s_; goto done; } } while (0)

static dnnl_status_t create(int kind, const int64_t *p, dnnl_primitive_t *out) {
    int64_t N = p[0], C = p[1], H = p[2], W = p[3], O = p[4], kh = p[5], kw = p[6], Ho = p[7], Wo = p[8];
    int64_t G = p[9];
    dnnl_dims_t src_dims = {N, C, H, W}, dst_dims = {N, O, Ho, Wo};
    dnnl_dims_t w_dims = {G, O / G, C / G, kh, kw};
    dnnl_dims_t strides = {p[10], p[11]}, dil = {p[12] - 1, p[13] - 1};
    dnnl_dims_t pad_l = {p[14], p[16]}, pad_r = {p[15], p[17]};
    dnnl_memory_desc_t src, dst, wei;
    dnnl_convolution_desc_t fwd_d, bwd_d;
    dnnl_primitive_desc_t fwd_pd = NULL, bwd_pd = NULL;
    dnnl_status_t status = dnnl_success;
    CHECK(dnnl_memory_desc_init_by_tag(&src, 4, src_dims, dnnl_f32, dnnl_nchw));
    CHECK(dnnl_memory_desc_init_by_tag(&dst, 4, dst_dims, dnnl_f32, dnnl_nchw));
    CHECK(dnnl_memory_desc_init_by_tag(&wei, 5, w_dims, dnnl_f32, dnnl_goihw));
    CHECK(dnnl_dilated_convolution_forward_desc_init(&fwd_d, kind == 0 ? dnnl_forward_inference : dnnl_forward_training,
                                                     dnnl_convolution_direct, &src, &wei, NULL, &dst, strides, dil,
                                                     pad_l, pad_r));
    CHECK(dnnl_primitive_desc_create(&fwd_pd, &fwd_d, NULL, engine, NULL));
    if (kind == 0) {
        CHECK(dnnl_primitive_create(out, fwd_pd));
    } else {
        if (kind == 1)
            CHECK(dnnl_dilated_convolution_backward_data_desc_init(&bwd_d, dnnl_convolution_direct, &src, &wei, &dst,
                                                                   strides, dil, pad_l, pad_r));
        else
            CHECK(dnnl_dilated_convolution_backward_weights_desc_init(&bwd_d, dnnl_convolution_direct, &src, &wei,
                                                                      NULL, &dst, strides, dil, pad_l, pad_r));
        CHECK(dnnl_primitive_desc_create(&bwd_pd, &bwd_d, NULL, engine, fwd_pd));
        CHECK(dnnl_primitive_create(out, bwd_pd));
    }
done:
    if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
    if (bwd_pd) dnnl_primitive_desc_destroy(bwd_pd);
    return status;
}

static dnnl_status_t lookup(int kind, int nthreads, const int64_t *p, dnnl_primitive_t *prim) {
    dnnl_status_t status = dnnl_success;
    pthread_mutex_lock(&lock);
    if (engine == NULL) {
        status = dnnl_engine_create(&engine, dnnl_cpu, 0);
        if (status != dnnl_success) { engine = NULL; goto done; }
    }
    for (entry *e = cache; e; e = e->next) {
        if (e->kind == kind && e->nthreads == nthreads && !memcmp(e->p, p, sizeof e->p)) {
            *prim = e->prim;
            goto done;
        }
    }
    entry *e = calloc(1, sizeof *e);
    if (!e) { status = (dnnl_status_t)-1; goto done; }
    status = create(kind, p, &e->prim);
    if (status != dnnl_success) { free(e); goto done; }
    e->kind = kind;
    e->nthreads = nthreads;
    memcpy(e->p, p, sizeof e->p);
    e->next = cache;
    cache = e;
    *prim = e->prim;
done:
    pthread_mutex_unlock(&lock);
    return status;
}

static dnnl_status_t wrap(dnnl_memory_t *m, const_dnnl_primitive_t prim, dnnl_query_t what, const void *data) {
    const_dnnl_primitive_desc_t pd;
    dnnl_status_t s = dnnl_primitive_get_primitive_desc(prim, &pd);
    if (s != dnnl_success) return s;
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
    return dnnl_memory_create(m, md, engine, (void *)data);
}

int loom_conv2d(int kind, int nthreads, const int64_t *p, const float *a, const float *b, float *out) {
    if (kind < 0 || kind > 2 || nthreads < 1) return (int)dnnl_invalid_arguments;
    omp_set_num_threads(nthreads);
    dnnl_primitive_t prim;
    dnnl_status_t status = lookup(kind, nthreads, p, &prim);
    if (status != dnnl_success) return (int)status;
    dnnl_memory_t m[3] = {NULL, NULL, NULL};
    dnnl_stream_t stream = NULL;
    static const dnnl_query_t q[3][3] = {
        {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
        {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
        {dnnl_query_src_md, dnnl_query_diff_dst_md, dnnl_query_diff_weights_md}};
    static const int arg[3][3] = {
        {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
        {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
        {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}};
    const void *data[3] = {a, b, out};
    dnnl_exec_arg_t args[3];
    for (int i = 0; i < 3; i++) {
        CHECK(wrap(&m[i], prim, q[kind][i], data[i]));
        args[i].arg = arg[kind][i];
        args[i].memory = m[i];
    }
    CHECK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
    CHECK(dnnl_primitive_execute(prim, stream, 3, args));
    CHECK(dnnl_stream_wait(stream));
done:
    if (stream) dnnl_stream_destroy(stream);
    for (int i = 0; i < 3; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    return (int)status;
}
"""

_LOCK = threading.Lock()
_state = {"status": "unbuilt", "fn": None, "error": None}  # unbuilt | building | ready | failed
_done = threading.Event()


def _key(cc_id: str) -> str:
    from . import build
    h = hashlib.sha256()
    for part in (FORMAT, cc_id, " ".join(build.flags(False)), " ".join(LIBS), SOURCE):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _load(path: str, root: str):
    from . import trust
    with trust.locked(os.path.dirname(path), exclusive=False):
        trust.verify(path, root)
        lib = ctypes.CDLL(path)
    fn = lib.loom_conv2d
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    fn._lib = lib  # Keep the library loaded while the function lives.
    return fn


def _build() -> None:
    """Load the library from the cache, or build it there; on any failure the reference path stays."""
    from . import build, cache, trust
    fn, error = None, None
    try:
        cc_id = build.compiler_id()
        root = cache._root()
        if cc_id is None or root is None:
            raise build.BuildError("no C compiler or no safe kernel cache directory")
        key = _key(cc_id)
        path = os.path.join(root, "kernels", key[:2], key + ".so")
        trust.private_subdir(root, "kernels", key[:2])
        try:
            fn = _load(path, root)
        except (FileNotFoundError, trust.Untrusted, OSError):
            build.compile_shared(SOURCE, path, False, extra_libs=LIBS)
            fn = _load(path, root)
    except (build.BuildError, trust.Untrusted, OSError, AttributeError) as e:
        error = str(e)
        log.info("loom.codegen: native convolution unavailable (oneDNN missing?), using the NumPy path: %s",
                 error.splitlines()[0] if error else e)
    with _LOCK:
        _state.update(status="ready" if fn is not None else "failed", fn=fn, error=error)
    _done.set()


def _after_fork() -> None:
    """A forked child has no build thread: a build in flight in the parent starts afresh there."""
    global _LOCK
    _LOCK = threading.Lock()
    if _state["status"] == "building":
        reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def reset() -> None:
    """Forget the loaded library (tests: the next call loads or builds it again)."""
    global _done
    with _LOCK:
        _state.update(status="unbuilt", fn=None, error=None)
        _done = threading.Event()


def _enabled() -> bool:
    return os.environ.get("LOOM_CODEGEN", "1") != "0" and os.environ.get("LOOM_NATIVE_CONV", "1") != "0"


def library():
    """The loaded entry point, or None while it builds (in the background) or when it is unavailable."""
    if not _enabled():
        return None
    status = _state["status"]
    if status == "ready":
        return _state["fn"]
    if status == "unbuilt":
        with _LOCK:
            start = _state["status"] == "unbuilt"
            if start:
                _state["status"] = "building"
        if start:
            from . import cache
            if cache.sync_mode():
                _build()
            else:
                cache._pool().submit(_build)
    if _state["status"] == "building" and os.environ.get("LOOM_CODEGEN_SYNC", "0") not in ("", "0"):
        _done.wait()
    return _state["fn"] if _state["status"] == "ready" else None


def available(timeout: float | None = None) -> bool:
    """Whether the native library is usable, waiting up to `timeout` seconds for its build."""
    library()
    if _state["status"] == "building":
        _done.wait(timeout)
    return _state["status"] == "ready"


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


def run(op: str, a: np.ndarray, b: np.ndarray, attrs: dict, out: np.ndarray | None = None) -> np.ndarray | None:
    """`op` on float32 arrays through the native library, into `out` if given; None if it is not available."""
    fn = library()
    if fn is None or a.dtype != np.float32 or b.dtype != np.float32:
        return None
    shape = out_shape(op, a, b, attrs)
    if 0 in a.shape or 0 in b.shape or 0 in shape:
        return None
    p, macs = _params(op, a, b, attrs, shape)
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    dst = out if out is not None and out.flags.c_contiguous and out.dtype == np.float32 else np.empty(shape, np.float32)
    n = threads.get_num_threads() if macs >= threads.blas_par_min() else 1
    status = fn(KINDS[op], n, p.ctypes.data, a.ctypes.data, b.ctypes.data, dst.ctypes.data)
    if status != 0:
        log.debug("loom.codegen: oneDNN %s failed with status %d; using the NumPy path", op, status)
        return None
    if out is not None and dst is not out:
        np.copyto(out, dst)
        return out
    return dst
