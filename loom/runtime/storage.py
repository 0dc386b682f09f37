"""Storage tiers: where a compiled step's values live, memory (the planned arena) or disk.

The memory tier is the arena a `MemoryPlan` lays out (`loom.runtime.executor`);
this module adds the disk tier and the ``storage`` primitive the compiler
writes into a graph to move a value between the two:

- ``storage(v, action="offload", key=k)`` writes `v` to the disk tier and
  yields a one-byte token; `v`'s arena slot is free from then on. With
  ``async=True`` the write runs on the tier's I/O thread instead, and `v`
  must stay as it is until a flush:
- ``storage(token, v, action="flush", key=k)`` waits for that write to be
  complete and passes the token on; it reads `v`, so the memory plan keeps
  `v`'s slot until then (the compiler puts it a few steps after the offload,
  so the write overlaps compute);
- ``storage(token, action="prefetch", key=k)`` asks, from the I/O thread, for
  the file to be read back into the OS page cache while compute goes on;
- ``storage(token, action="reload", key=k, shape=..., dtype=...)`` waits for
  that read and copies the bytes into the value's new arena slot, then
  deletes the file.

Files (plain, or NumPy memory-mapped with ``LOOM_STORAGE_IO=mmap``) live in one temporary directory per process
(``loom-storage-*`` under ``tempfile.gettempdir()``), removed when the tier
is closed or the process exits. A file is written under a ``.part`` name and
renamed once complete, so a reader never sees a half-written one, and a
read of a key whose write is still queued or running waits for it first. The
bytes come back exactly as they were written: results are bit-identical.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from loom import dtypes as dt
from loom.errors import LoomError, LoomValueError
from loom.ir import ops
from loom.ir.node import Node

ACTIONS = ("offload", "flush", "prefetch", "reload")
_CHUNK = 1 << 20  # Bytes the prefetch thread reads at a time.


class DiskTier:
    """Values kept in memory-mapped files of one temporary directory, by key.

    Parameters
    ----------
    root : str, optional
        Parent directory of the tier's own temporary directory (default:
        ``tempfile.gettempdir()``).
    io : str
        ``"file"`` (default): plain writes and ``readinto`` the destination;
        ``"mmap"``: NumPy memory-mapped files (``np.memmap``) both ways. Same
        bytes either way; on the machine measured plain I/O was 2-5x faster
        (page faults on every mapped page).

    Examples
    --------
    >>> import numpy as np
    >>> tier = DiskTier()
    >>> tier.put("a", np.arange(4, dtype=np.float32))
    >>> out = np.empty(4, np.float32)
    >>> tier.get("a", out).tolist(), tier.keys()
    ([0.0, 1.0, 2.0, 3.0], [])
    >>> tier.close()
    """

    def __init__(self, root: str | None = None, io: str = "file") -> None:
        if io not in ("file", "mmap"):
            raise LoomValueError(f"loom storage: io must be 'file' or 'mmap', got {io!r}")
        self.root = root
        self.io = io
        self._dir: str | None = None
        self._lock = threading.Lock()
        self._pending: dict[str, Future] = {}   # Prefetches by key.
        self._writes: dict[str, Future] = {}    # Asynchronous writes by key.
        self._pool: ThreadPoolExecutor | None = None  # One I/O thread: writes and prefetches run in order.
        self.bytes_written = 0
        self.bytes_read = 0

    @property
    def directory(self) -> str:
        """The tier's temporary directory (made on first use)."""
        with self._lock:
            if self._dir is None:
                self._dir = tempfile.mkdtemp(prefix="loom-storage-", dir=self.root)
            return self._dir

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, f"{key}.bin")

    def put(self, key: str, value: np.ndarray) -> None:
        """Write `value` under `key` (a file renamed into place once complete), waiting for an earlier
        asynchronous write of `key` first."""
        self.wait_written(key)
        self._write(key, value)

    def _write(self, key: str, value: np.ndarray) -> None:
        value = np.ascontiguousarray(value)
        final = self._path(key)
        part = final + ".part"
        data = value.reshape(-1).view(np.uint8)
        if self.io == "mmap" and value.nbytes:
            mm = np.memmap(part, dtype=np.uint8, mode="w+", shape=(value.nbytes,))
            mm[:] = data
            # Unmapped: the bytes stay in the page cache, not in this process's resident set. No msync: a
            # reader maps the same page cache, and values that die with the step need no durability.
            del mm
        else:
            with open(part, "wb", buffering=0) as f:
                f.write(memoryview(data))
        os.replace(part, final)
        with self._lock:
            self.bytes_written += value.nbytes

    def _submit(self, fn, *args) -> Future:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="loom-storage-io")
            return self._pool.submit(fn, *args)

    def put_async(self, key: str, value: np.ndarray) -> Future:
        """Start writing `value` under `key` on the I/O thread; `value` must not change until
        `wait_written(key)` returns (a `get` or `put` of `key` waits for the write too)."""
        self.wait_written(key)
        fut = self._submit(self._write, key, value)
        with self._lock:
            self._writes[key] = fut
        return fut

    def wait_written(self, key: str) -> None:
        """Block until an asynchronous write of `key` is complete (its file renamed into place); raises its error."""
        with self._lock:
            fut = self._writes.pop(key, None)
        if fut is not None:
            fut.result()

    def prefetch(self, key: str) -> None:
        """Start reading `key`'s file back on the I/O thread (into the page cache), after its pending write."""
        fut = self._submit(_warm, self._path(key))
        with self._lock:
            self._pending[key] = fut

    def get(self, key: str, out: np.ndarray, delete: bool = True) -> np.ndarray:
        """Copy `key`'s bytes into `out` (C-contiguous), after its prefetch if one is running; drop the file."""
        self.wait_written(key)
        with self._lock:
            fut = self._pending.pop(key, None)
        if fut is not None:
            fut.result()
        path = self._path(key)
        if not os.path.exists(path):
            raise LoomError(f"loom storage: no value stored under key {key!r} in the disk tier {self.directory} "
                            "(reloaded twice, or never offloaded)")
        size = os.path.getsize(path)
        if size != out.nbytes:
            raise LoomError(f"loom storage: key {key!r} holds {size} B on disk, the value to reload needs "
                            f"{out.nbytes} B ({out.dtype}{list(out.shape)})")
        if size and self.io == "mmap":
            mm = np.memmap(path, dtype=np.uint8, mode="r", shape=(size,))
            out.reshape(-1).view(np.uint8)[:] = mm
            del mm
        elif size:
            with open(path, "rb", buffering=0) as f:
                view = memoryview(out.reshape(-1).view(np.uint8))
                got = 0
                while got < size:
                    n = f.readinto(view[got:])
                    if not n:
                        raise LoomError(f"loom storage: key {key!r} ended after {got} of {size} B")
                    got += n
        if delete:
            os.remove(path)
        with self._lock:
            self.bytes_read += size
        return out

    def keys(self) -> list[str]:
        """Keys whose files exist (complete ones only)."""
        if self._dir is None or not os.path.isdir(self._dir):
            return []
        return sorted(n[:-4] for n in os.listdir(self._dir) if n.endswith(".bin"))

    def close(self) -> None:
        """Finish the I/O thread's work, stop it and delete the directory and every file in it."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._pending.clear()
            self._writes.clear()
            folder, self._dir = self._dir, None
        if pool is not None:
            pool.shutdown(wait=True)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _warm(path: str) -> None:
    """Bring a file's pages into the page cache: the kernel reads ahead (``posix_fadvise``), or, where that is
    missing, a read through the file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):
            # No copy through this process: a file just written is in the page cache already, and one that
            # was written back is read ahead by the kernel while compute goes on.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            return
        buf = bytearray(_CHUNK)
        while os.readv(fd, [buf]) == _CHUNK:
            pass
    finally:
        os.close(fd)


_TIER: list[DiskTier] = []
_TIER_LOCK = threading.Lock()


def disk() -> DiskTier:
    """The process's disk tier (its directory is removed at exit)."""
    if not _TIER:
        with _TIER_LOCK:
            if not _TIER:
                tier = DiskTier(os.environ.get("LOOM_STORAGE_DIR") or None,
                                os.environ.get("LOOM_STORAGE_IO") or "file")
                atexit.register(tier.close)
                _TIER.append(tier)
    return _TIER[0]


_BW: list[float] = []


def disk_bandwidth() -> float:
    """Bytes per second of one write plus one read through the disk tier (4 MiB values, the median of
    five), measured once per process; ``LOOM_DISK_BANDWIDTH`` replaces the measurement."""
    if not _BW:
        env = os.environ.get("LOOM_DISK_BANDWIDTH")
        if env:
            _BW.append(float(env))
        else:
            tier, probe = disk(), np.ones(1 << 20, np.float32)
            out = np.empty_like(probe)
            rates = []
            for k in range(5):
                t0 = time.perf_counter()
                tier.put(f"bandwidth-probe-{k}", probe)
                tier.get(f"bandwidth-probe-{k}", out)
                rates.append(probe.nbytes / max(time.perf_counter() - t0, 1e-6))
            _BW.append(sorted(rates)[2])
    return _BW[0]


# ---------------------------------------------------------------- the storage primitive

def _key(attrs: dict) -> str:
    # One file per (graph key, thread): concurrent calls of one compiled step do not share files.
    return f"{attrs['key']}-{threading.get_ident()}"


def _infer(inputs, attrs):
    if attrs["action"] == "reload":
        return tuple(attrs["shape"]), attrs["dtype"]
    return (1,), dt.uint8  # One byte, not zero: the native program refuses empty values.


def _check(inputs, attrs):
    ops._attr_names("storage", attrs, ("action", "key"), ("shape", "dtype", "async"))
    if attrs["action"] not in ACTIONS:
        raise ops._bad_attr("storage", "action", attrs["action"], f"one of {ACTIONS}")
    ops._int_attr("storage", "key", attrs["key"], 0, 2**62)
    want = 2 if attrs["action"] == "flush" else 1
    if len(inputs) != want:
        raise LoomValueError(f"loom.storage: action {attrs['action']!r} takes {want} input(s) "
                             f"({'the offload token and the value written' if want == 2 else 'one value'}), "
                             f"got {len(inputs)}")
    if "async" in attrs and (attrs["action"] != "offload" or not isinstance(attrs["async"], bool)):
        raise ops._bad_attr("storage", "async", attrs["async"], "a bool, on an 'offload' only")
    if attrs["action"] == "reload":
        if "shape" not in attrs or "dtype" not in attrs:
            raise LoomValueError(f"loom.storage: action 'reload' needs the shape and dtype attrs, got {sorted(attrs)}")
        ops._shape_attr("storage", "shape", attrs["shape"])
        ops._dtype_attr("storage", "dtype", attrs["dtype"])
    if attrs["action"] != "offload" and (inputs[0].shape != (1,) or inputs[0].dtype is not dt.uint8):
        raise LoomValueError(f"loom.storage: action {attrs['action']!r} reads the token of an offload or "
                             f"prefetch (uint8[1]), got {inputs[0].dtype.name}{list(inputs[0].shape)}")


def _impl(x, *rest):
    attrs = rest[-1]
    out = np.empty(tuple(attrs["shape"]), attrs["dtype"].np) if attrs["action"] == "reload" else None
    return _run(attrs, x, out)


def _run(attrs: dict, x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    tier, key, action = disk(), _key(attrs), attrs["action"]
    if action == "offload":
        if attrs.get("async"):
            tier.put_async(key, x)  # `x` is read by the flush too: its memory stays as it is until then.
        else:
            tier.put(key, x)
    elif action == "flush":
        tier.wait_written(key)
    elif action == "prefetch":
        tier.prefetch(key)
    else:
        return tier.get(key, out)
    return np.zeros((1,), np.uint8)


def step(node: Node):
    """The executor's step function for a ``storage`` node: `run(args, out)`, reloading straight into `out`."""
    attrs = node.attrs

    def run(args, out):
        if attrs["action"] == "reload" and out is None:
            out = np.empty(tuple(attrs["shape"]), attrs["dtype"].np)
        if out is not None and attrs["action"] == "reload" and not out.flags.c_contiguous:
            value = _run(attrs, args[0], np.empty(out.shape, out.dtype))
            np.copyto(out, value)
            return out
        result = _run(attrs, args[0], out)
        if out is not None and result is not out:
            np.copyto(out, result)
            return out
        return result
    return run


if "storage" not in ops.PRIMITIVES:
    ops.register("storage", "storage", -1, _infer, _impl, check_attrs=_check)
