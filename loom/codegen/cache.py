"""The kernel cache: rendered bodies keyed by a hash of their C source, built once, kept on disk.

Lookup order for a key: this process's memory, then ``$LOOM_CACHE_DIR/
kernels/<key[:2]>/<key>.so`` (default ``~/.cache/loom``), then a build. Builds
run on a small thread pool so `get_kernel` returns at once; until a build is
done the kernel runs its body on the reference path. ``LOOM_CODEGEN_SYNC=1``
builds in the calling thread instead. When the compiler is missing or fails
the problem is logged once and the kernel stays on the reference path.

Environment: ``LOOM_CACHE_DIR``, ``LOOM_CODEGEN_SYNC``, ``LOOM_CODEGEN=0``
(never compile), ``LOOM_CODEGEN_JOBS`` (parallel builds, default 2),
``LOOM_CC``, ``LOOM_MVEC``, ``LOOM_PAR_MIN``. Unless ``OMP_WAIT_POLICY`` or
``GOMP_SPINCOUNT`` is set, loom sets ``GOMP_SPINCOUNT=10000`` before the first
kernel loads libgomp: idle OpenMP threads spin briefly (warm for the next
kernel) instead of for ~0.3 s, which starves other work on busy machines.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from loom.ir.graph import Graph

from . import build
from .c import FORMAT_VERSION, Unsupported, render
from .kernel import Kernel, make_call

log = logging.getLogger("loom.codegen")

if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "10000"

_LOCK = threading.Lock()
_LIBS: dict[str, _Lib] = {}
_POOL: ThreadPoolExecutor | None = None
_STATS = {"builds": 0, "build_failures": 0, "disk_hits": 0, "memory_hits": 0, "unsupported": 0}
_WARNED: set[str] = set()


def cache_dir() -> str:
    """Where compiled kernels live (``LOOM_CACHE_DIR``, default ``~/.cache/loom``)."""
    return os.environ.get("LOOM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "loom")


def stats() -> dict[str, int]:
    """Counters since start-up (or `reset_stats`): builds, build_failures, disk_hits, memory_hits, unsupported.

    Examples
    --------
    >>> sorted(stats())
    ['build_failures', 'builds', 'disk_hits', 'memory_hits', 'unsupported']
    """
    with _LOCK:
        return dict(_STATS)


def reset_stats() -> None:
    with _LOCK:
        for k in _STATS:
            _STATS[k] = 0


def clear_memory() -> None:
    """Forget loaded kernels (the disk cache stays): the next lookups go to disk."""
    with _LOCK:
        _LIBS.clear()


def _warn_once(kind: str, msg: str) -> None:
    with _LOCK:
        first = kind not in _WARNED
        _WARNED.add(kind)
    if first:
        log.warning("%s; affected kernels run on the NumPy reference path", msg)
    else:
        log.debug("%s", msg)


class _Lib:
    """One shared object: pending, ready or failed."""

    def __init__(self, key: str, path: str):
        self.key = key
        self.path = path
        self.state = "pending"
        self.call = None
        self.error: str | None = None
        self.done = threading.Event()

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def load(self) -> None:
        lib = ctypes.CDLL(self.path)  # ctypes.CDLL calls release the GIL.
        self._handle = lib
        self.call = make_call(lib)
        self.state = "ready"
        self.done.set()

    def fail(self, error: str) -> None:
        self.error = error
        self.state = "failed"
        self.done.set()


def kernel_key(source: str, use_mvec: bool, cc_id: str) -> str:
    """The cache key: a hash of the format version, compiler identity, flags and source."""
    h = hashlib.sha256()
    for part in (f"loom-kernel-{FORMAT_VERSION}", cc_id, " ".join(build.flags(use_mvec)),
                 " ".join(build.libs(use_mvec)), source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def kernel_path(key: str) -> str:
    return os.path.join(cache_dir(), "kernels", key[:2], key + ".so")


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None:
            jobs = max(1, int(os.environ.get("LOOM_CODEGEN_JOBS", "2") or 2))
            _POOL = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="loom-codegen")
        return _POOL


def _after_fork() -> None:
    """A forked child has no build threads: start afresh (its loaded kernels stay usable)."""
    global _POOL, _LOCK
    _POOL = None
    _LOCK = threading.Lock()
    for key in [k for k, lib in _LIBS.items() if not lib.done.is_set()]:
        del _LIBS[key]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _build(lib: _Lib, source: str, use_mvec: bool) -> None:
    try:
        build.compile_shared(source, lib.path, use_mvec)
        lib.load()
        with _LOCK:
            _STATS["builds"] += 1
    except (build.BuildError, OSError) as e:
        with _LOCK:
            _STATS["build_failures"] += 1
        _warn_once(f"build:{type(e).__name__}", f"loom.codegen: building kernel {lib.key[:12]} failed: {e}")
        lib.fail(str(e))
    except BaseException as e:  # Never let a build thread die silently.
        lib.fail(repr(e))
        raise


def sync_mode() -> bool:
    return os.environ.get("LOOM_CODEGEN_SYNC", "0") not in ("", "0")


def get_kernel(body: Graph) -> Kernel:
    """The kernel for a fused body; returns at once (the build runs in the background).

    Kernels are cached by a hash of their generated source, which depends on
    the body's structure (ops, dtypes, ranks) but not on its sizes: a body
    that differs only in sizes (a new batch size) reuses the compiled code.

    Parameters
    ----------
    body : loom.ir.Graph
        Placeholders in, one output out; elementwise, movement and at most
        one kind of reduction (see `loom.codegen.c`).

    Returns
    -------
    Kernel
        Callable as ``kernel(inputs, out)``; runs the reference path until
        `Kernel.ready` (at once with ``LOOM_CODEGEN_SYNC=1``).

    Examples
    --------
    >>> import numpy as np, loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((3,), loom.float32)
    >>> g.outputs = [g.add_node("mul", [x, x])]
    >>> k = get_kernel(g)
    >>> out = np.empty(3, np.float32)
    >>> k([np.array([1, 2, 3], np.float32)], out)
    >>> out.tolist()
    [1.0, 4.0, 9.0]
    """
    if not isinstance(body, Graph) or len(body.outputs) != 1:
        raise TypeError("loom.codegen.get_kernel: expected a loom.ir.Graph with exactly one output")
    if os.environ.get("LOOM_CODEGEN", "1") == "0":
        return Kernel(body, None, None, "code generation is off (LOOM_CODEGEN=0)")
    try:
        spec = render(body)
    except Unsupported as e:
        with _LOCK:
            _STATS["unsupported"] += 1
        log.debug("loom.codegen: body stays on the reference path: %s", e)
        return Kernel(body, None, None, str(e))
    cc_id = build.compiler_id()
    if cc_id is None:
        _warn_once("no-compiler", f"loom.codegen: C compiler {build.compiler()!r} not found (set LOOM_CC)")
        return Kernel(body, spec, None, f"no C compiler ({build.compiler()!r})")
    use_mvec = spec.uses_mvec and build.mvec_available()
    key = kernel_key(spec.source, use_mvec, cc_id)
    sync = sync_mode()
    with _LOCK:
        lib = _LIBS.get(key)
        fresh = lib is None
        if fresh:
            lib = _LIBS[key] = _Lib(key, kernel_path(key))
        else:
            _STATS["memory_hits"] += 1
    if not fresh:
        if sync:
            lib.done.wait()
        return Kernel(body, spec, lib)
    if os.path.exists(lib.path):
        try:
            lib.load()
            with _LOCK:
                _STATS["disk_hits"] += 1
            return Kernel(body, spec, lib)
        except OSError as e:  # A damaged file: build it again.
            log.debug("loom.codegen: could not load %s (%s); rebuilding", lib.path, e)
    if sync:
        _build(lib, spec.source, use_mvec)
    else:
        _pool().submit(_build, lib, spec.source, use_mvec)
    return Kernel(body, spec, lib)
