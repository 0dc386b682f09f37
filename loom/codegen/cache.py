"""The kernel cache: rendered bodies keyed by a hash of their C source, built once, kept on disk.

Lookup order for a key: this process's memory, then ``$LOOM_CACHE_DIR/
kernels/<key[:2]>/<key>.so`` (default ``~/.cache/loom``), then a build. Builds
run on a small thread pool so `get_kernel` returns at once; until a build is
done the kernel runs its body on the reference path. ``LOOM_CODEGEN_SYNC=1``
builds in the calling thread instead. When the compiler is missing or fails
the problem is logged once and the kernel stays on the reference path.

Within a process a body met again (the same ops, attrs, dtypes and shapes, by
`body_key`: a repeated layer, an optimizer update at a new batch size) gets
the same `Kernel` without its C being rendered and hashed again. The answer of
the libmvec probe is kept in ``$LOOM_CACHE_DIR/probes``, so only the first
process on a machine runs it.

Only code loom built is loaded (`loom.codegen.trust`): a cache directory that
another user owns or can write is refused with a `KernelCacheWarning` and this
process uses a fresh private directory instead; a library is loaded only if
its SHA-256 matches the index written when it was built, and one that does
not (or lacks the entry point) is rebuilt, with one warning per kind of fault.

Environment: ``LOOM_CACHE_DIR``, ``LOOM_CODEGEN_SYNC``, ``LOOM_CODEGEN=0``
(never compile), ``LOOM_CODEGEN_JOBS`` (parallel builds, default 2),
``LOOM_CC``, ``LOOM_MVEC``, ``LOOM_PAR_MIN``. Thread counts and OpenMP's
wait policy belong to `loom.runtime.threads`, imported before any kernel
loads libgomp.
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import logging
import os
import shutil
import struct
import threading
import warnings
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from loom import dtypes as dt
from loom.ir.graph import Graph
from loom.runtime import threads  # noqa: F401  (Sets OpenMP's wait policy before a kernel loads libgomp.)

from . import build, trust
from .c import FORMAT_VERSION, Unsupported, render
from .kernel import Kernel, make_call

log = logging.getLogger("loom.codegen")

_LOCK = threading.Lock()
_LIBS: dict[str, _Lib] = {}
_POOL: ThreadPoolExecutor | None = None
_STATS = {"builds": 0, "build_failures": 0, "disk_hits": 0, "memory_hits": 0, "unsupported": 0, "untrusted": 0}
_WARNED: set[str] = set()
_ROOT_LOCK = threading.Lock()
_ROOTS: dict[str, str | None] = {}  # Configured cache directory -> the checked one in use (None: none is safe).


def configured_cache_dir() -> str:
    """The cache directory asked for (``LOOM_CACHE_DIR``, default ``~/.cache/loom``), before any check."""
    return os.environ.get("LOOM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "loom")


def cache_dir() -> str:
    """Where compiled kernels live: ``LOOM_CACHE_DIR`` (default ``~/.cache/loom``) if it is safe.

    A directory that another user owns or can write (or whose parents they
    can) is refused with a `KernelCacheWarning`, and a fresh private directory
    serves this process instead; that one is returned then.
    """
    return _root() or configured_cache_dir()


def _root() -> str | None:
    configured = configured_cache_dir()
    with _ROOT_LOCK:
        if configured not in _ROOTS:
            _ROOTS[configured] = _resolve_root(configured)
        return _ROOTS[configured]


def _resolve_root(configured: str) -> str | None:
    """Check (creating 0700 what is missing) the configured directory, or make the private fallback."""
    try:
        root = trust.secure_root(configured)
        trust.private_subdir(root, "kernels")
        for name in sorted(os.listdir(os.path.join(root, "kernels"))):
            if len(name) == 2 and all(c in "0123456789abcdef" for c in name):
                trust.private_subdir(root, "kernels", name, create=False)
        return root
    except trust.Untrusted as e:
        reason = str(e)
    except OSError as e:
        reason = f"it cannot be used ({e})"
    advice = ("make it yours and not writable by others (chown, chmod go-w), or point LOOM_CACHE_DIR at a "
              "directory only you can write")
    try:
        fallback = trust.private_fallback()
    except (trust.Untrusted, OSError) as e:
        warnings.warn(f"loom.codegen: not using the kernel cache directory {configured}: {reason}. No private "
                      f"directory could be made either ({e}), so kernels run on the NumPy reference path; "
                      f"{advice}", trust.KernelCacheWarning, stacklevel=4)
        return None
    atexit.register(_remove_fallback, fallback, os.getpid())
    warnings.warn(f"loom.codegen: not using the kernel cache directory {configured}: {reason}. This process "
                  f"keeps its kernels in the private directory {fallback} instead; {advice}",
                  trust.KernelCacheWarning, stacklevel=4)
    return fallback


def _remove_fallback(path: str, pid: int) -> None:
    if os.getpid() == pid:  # Not from a forked child: the parent may still use it.
        shutil.rmtree(path, ignore_errors=True)


def stats() -> dict[str, int]:
    """Counters since start-up (or `reset_stats`): builds, build_failures, disk_hits, memory_hits, unsupported,
    untrusted (cached libraries refused and rebuilt).

    Examples
    --------
    >>> sorted(stats())
    ['build_failures', 'builds', 'disk_hits', 'memory_hits', 'unsupported', 'untrusted']
    """
    with _LOCK:
        return dict(_STATS)


def reset_stats() -> None:
    with _LOCK:
        for k in _STATS:
            _STATS[k] = 0


def clear_memory() -> None:
    """Forget loaded kernels and checked directories (the disk cache stays): the next lookups go to disk."""
    with _LOCK:
        _LIBS.clear()
        _BODIES.clear()
    with _ROOT_LOCK:
        _ROOTS.clear()


def _warn_once(kind: str, msg: str) -> None:
    with _LOCK:
        first = kind not in _WARNED
        _WARNED.add(kind)
    if first:
        log.warning("%s; affected kernels run on the NumPy reference path", msg)
    else:
        log.debug("%s", msg)


def _reject(e: trust.Untrusted) -> None:
    """A cached library loom will not load: count it and warn once per kind of fault."""
    with _LOCK:
        _STATS["untrusted"] += 1
        first = f"untrusted:{e.kind}" not in _WARNED
        _WARNED.add(f"untrusted:{e.kind}")
    msg = f"loom.codegen: not loading a cached kernel: {e}; it is rebuilt"
    if first:
        warnings.warn(msg + " (others refused for this reason are rebuilt without a warning)",
                      trust.KernelCacheWarning, stacklevel=3)
    else:
        log.debug("%s", msg)


class _Lib:
    """One shared object: pending, ready or failed."""

    def __init__(self, key: str, root: str):
        self.key = key
        self.root = root
        self.path = os.path.join(root, "kernels", key[:2], key + ".so")
        self.state = "pending"
        self.call = None
        self.error: str | None = None
        self.done = threading.Event()

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def load(self) -> None:
        """Load the library if loom built it; raise trust.Untrusted, FileNotFoundError or OSError if not."""
        with trust.locked(os.path.dirname(self.path), exclusive=False):
            trust.verify(self.path, self.root)
            lib = ctypes.CDLL(self.path)  # ctypes.CDLL calls release the GIL.
        try:
            call = make_call(lib)
        except AttributeError:
            _unload(lib)  # Else a rebuilt file at the same path would get this handle back from dlopen.
            raise trust.Untrusted("entry", f"kernel library {self.path} has no entry point loom_call") from None
        self._handle = lib
        self.call = call
        self.state = "ready"
        self.done.set()

    def fail(self, error: str) -> None:
        self.error = error
        self.state = "failed"
        self.done.set()


def _unload(lib: ctypes.CDLL) -> None:
    import _ctypes
    dlclose = getattr(_ctypes, "dlclose", None)
    if dlclose is not None:
        dlclose(lib._handle)


def kernel_key(source: str, use_mvec: bool, cc_id: str) -> str:
    """The cache key: a hash of the format version, compiler identity, flags and source."""
    h = hashlib.sha256()
    for part in (f"loom-kernel-{FORMAT_VERSION}", cc_id, " ".join(build.flags(use_mvec)),
                 " ".join(build.libs(use_mvec)), source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def kernel_path(key: str) -> str:
    """Where the library for `key` lives (in `cache_dir`); its hash index is this path + ``.sha256``."""
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
    global _POOL, _LOCK, _ROOT_LOCK
    _POOL = None
    _LOCK = threading.Lock()
    _ROOT_LOCK = threading.Lock()
    for key in [k for k, lib in _LIBS.items() if not lib.done.is_set()]:
        del _LIBS[key]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _build(lib: _Lib, source: str, use_mvec: bool) -> None:
    try:
        trust.private_subdir(lib.root, "kernels", lib.key[:2])
        build.compile_shared(source, lib.path, use_mvec)
        lib.load()
        with _LOCK:
            _STATS["builds"] += 1
    except trust.Untrusted as e:  # What loom just built is not usable (no entry point, a directory gone bad).
        with _LOCK:
            _STATS["build_failures"] += 1
        _warn_once(f"build-untrusted:{e.kind}", f"loom.codegen: kernel {lib.key[:12]} was built but not loaded: {e}")
        lib.fail(str(e))
    except (build.BuildError, OSError) as e:
        with _LOCK:
            _STATS["build_failures"] += 1
        _warn_once(f"build:{type(e).__name__}", f"loom.codegen: building kernel {lib.key[:12]} failed: {e}")
        lib.fail(str(e))
    except BaseException as e:  # Never let a build thread die silently.
        lib.fail(repr(e))
        raise


_PROBE_DIRS: dict[str, str | None] = {}


def _probe_dir(root: str) -> str | None:
    """The cache's private folder for answers of compiler probes (None if it cannot be made)."""
    if root not in _PROBE_DIRS:
        try:
            _PROBE_DIRS[root] = trust.private_subdir(root, "probes")
        except (trust.Untrusted, OSError):
            _PROBE_DIRS[root] = None
    return _PROBE_DIRS[root]


# Kernels by the exact structure of their body (`body_key`), so a body met again (the same layer repeated, the
# same optimizer update, a retrace at a new batch size) skips rendering C and hashing it: its Kernel, with the
# call arguments it has planned, is shared. Bounded: least recently used first out.
_BODIES: OrderedDict[tuple, Kernel] = OrderedDict()
_BODIES_MAX = 8192


def _exact(value):
    """An attr value as a key that tells apart what == does not (0.0 and -0.0, NaN payloads)."""
    if type(value) is tuple and all(type(v) is int for v in value):
        return ("ints", value)  # Shapes, axes, permutations (the common case, one tuple instead of one per int).
    if isinstance(value, float):
        return ("f", struct.pack("<d", value))
    if isinstance(value, tuple):
        return tuple(_exact(v) for v in value)
    if isinstance(value, dt.DType):
        return ("dtype", value.name)
    if value is None or isinstance(value, (bool, int, str)):
        return (type(value).__name__, value)
    raise TypeError(type(value).__name__)


def body_key(body: Graph) -> tuple | None:
    """A key equal for two bodies exactly when they are the same computation on the same shapes and dtypes: every
    node's op, attrs, dtype, shape and inputs, in topological order. None for a body holding data (a buffer) or
    attrs it cannot key."""
    index: dict = {}
    parts = []
    try:
        for n in body.topological_order():
            if n.buffer is not None:
                return None
            attrs = tuple(sorted((k, _exact(v)) for k, v in n.attrs.items()))
            parts.append((n.op, n.dtype.name, tuple(n.shape), attrs, tuple(index[i] for i in n.inputs)))
            index[n] = len(index)
        return (tuple(parts), tuple(index[p] for p in body.inputs), tuple(index[o] for o in body.outputs))
    except (TypeError, KeyError):
        return None


def _memo_get(key) -> Kernel | None:
    with _LOCK:
        found = _BODIES.get(key)
        if found is not None:
            _BODIES.move_to_end(key)
            _STATS["memory_hits"] += 1
        return found


def _memo_put(key, kernel: Kernel) -> Kernel:
    if key is not None:
        with _LOCK:
            _BODIES[key] = kernel
            while len(_BODIES) > _BODIES_MAX:
                _BODIES.popitem(last=False)
    return kernel


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
    shape = body_key(body)
    memo = None if shape is None else (shape, configured_cache_dir(), build.compiler(),
                                       os.environ.get("LOOM_MVEC", "1"))
    if memo is not None:
        known = _memo_get(memo)
        if known is not None:
            if known._lib is not None and sync_mode():
                known._lib.done.wait()
            return known
    try:
        spec = render(body)
    except Unsupported as e:
        with _LOCK:
            _STATS["unsupported"] += 1
        log.debug("loom.codegen: body stays on the reference path: %s", e)
        return _memo_put(memo, Kernel(body, None, None, str(e)))
    cc_id = build.compiler_id()
    if cc_id is None:
        _warn_once("no-compiler", f"loom.codegen: C compiler {build.compiler()!r} not found (set LOOM_CC)")
        return Kernel(body, spec, None, f"no C compiler ({build.compiler()!r})")
    root = _root()
    if root is None:
        return Kernel(body, spec, None, "no kernel cache directory is safe to use (see the KernelCacheWarning)")
    use_mvec = spec.uses_mvec and build.mvec_available(memo_dir=_probe_dir(root))
    key = kernel_key(spec.source, use_mvec, cc_id)
    sync = sync_mode()
    with _LOCK:
        found = _LIBS.get(key)
        if found is None:
            lib = _LIBS[key] = _Lib(key, root)
        else:
            lib = found
            _STATS["memory_hits"] += 1
    if found is not None:
        if sync:
            lib.done.wait()
        return _memo_put(memo, Kernel(body, spec, lib))
    try:
        lib.load()
        with _LOCK:
            _STATS["disk_hits"] += 1
        return _memo_put(memo, Kernel(body, spec, lib))
    except FileNotFoundError:  # Not built yet.
        pass
    except trust.Untrusted as e:  # Not what loom built (or not from here): never loaded, built again.
        _reject(e)
    except OSError as e:  # A damaged file: build it again.
        log.debug("loom.codegen: could not load %s (%s); rebuilding", lib.path, e)
    if sync:
        _build(lib, spec.source, use_mvec)
    else:
        _pool().submit(_build, lib, spec.source, use_mvec)
    return _memo_put(memo, Kernel(body, spec, lib))
