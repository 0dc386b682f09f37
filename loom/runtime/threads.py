"""One owner for loom's threads: how many the generated kernels and the BLAS library may use.

loom computes on two thread pools: the OpenMP team of its generated C kernels
and the BLAS library's (NumPy's OpenBLAS) that runs the matmuls. They take
turns (a kernel never calls BLAS), so one count serves both and the process
never computes on more threads than that count.

Default: the number of CPUs this process may run on (its affinity mask, so a
``taskset`` or a container's CPU set is respected), or ``OMP_NUM_THREADS``
when that is set, as in PyTorch. ``loom.set_num_threads`` changes it for every
later kernel call and matmul. Kernels go parallel from ``LOOM_PAR_MIN`` loop
iterations. A native step program's matmuls never use the BLAS library's
threads: from ``LOOM_GEMM_PAR_MIN`` multiply-adds (`gemm_par_min`) the step
driver cuts them across loom's own OpenMP team, each piece a one-thread BLAS
call, with the same result at every count. A step program that runs as a
team walk (`loom.runtime.team`) uses loom's own worker threads, ``get_num_threads() - 1``
of them beside the caller, instead of the OpenMP team (never both at once).
Matmuls that run on NumPy go
parallel from ``LOOM_BLAS_PAR_MIN`` multiply-adds (`prepare_blas` sets
NumPy's BLAS count, through threadpoolctl, just before each one).

Idle threads sleep instead of spinning: unless ``OMP_WAIT_POLICY`` or
``GOMP_SPINCOUNT`` is set, this module sets ``OMP_WAIT_POLICY=PASSIVE``
before the first kernel loads libgomp (which reads it once, at load). A
spinning team burns the cores that other processes (and the BLAS threads)
need, and on a loaded machine a thread that slept is scheduled sooner than
one that spun.
"""
from __future__ import annotations

import operator
import os
import threading

import numpy as np

from loom.errors import LoomTypeError, LoomValueError

if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

BLAS_PAR_MIN_DEFAULT = 1 << 27  # Multiply-adds from which a matmul uses more than one BLAS thread.
GEMM_PAR_MIN_DEFAULT = 1 << 22  # Multiply-adds from which a native step's matmul is split across loom's team.

_LOCK = threading.Lock()
_num_threads: int | None = None  # None: not decided yet (the default is computed on first use).
_blas: list | None = None        # threadpoolctl's controllers of the loaded BLAS libraries.
_blas_now = 0                    # The count last given to them (0: never set).
_blas_par_min: int | None = None
_gemm_par_min: int | None = None


def available_cpus() -> int:
    """How many CPUs this process may run on (its affinity mask; all online CPUs where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_num_threads() -> int:
    """The count loom starts with: ``OMP_NUM_THREADS`` if it names a positive count, else `available_cpus`."""
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    try:
        n = int(value)
    except ValueError:
        n = 0
    return n if n >= 1 else available_cpus()


def get_num_threads() -> int:
    """The number of threads loom's kernels and matmuls use.

    Returns
    -------
    int
        The count set by `set_num_threads`, or the default: the CPUs this
        process may run on (``os.sched_getaffinity``), or ``OMP_NUM_THREADS``
        when it is set.

    Examples
    --------
    >>> import loom
    >>> loom.get_num_threads() >= 1
    True
    """
    n = _num_threads
    if n is None:
        with _LOCK:
            n = _num_threads if _num_threads is not None else _decide(default_num_threads())
    return n


def set_num_threads(n: int) -> None:
    """Set how many threads loom's generated kernels and its BLAS matmuls use, as `torch.set_num_threads`.

    One count governs both pools, which take turns, so loom never computes on
    more than `n` threads at once. Kernels read it on every call (loops of
    fewer than ``LOOM_PAR_MIN`` iterations run on one thread); matmuls of
    fewer than ``LOOM_BLAS_PAR_MIN`` multiply-adds (default 2**27) run on one
    BLAS thread, larger ones on `n`. The BLAS count is process-wide, so NumPy
    code outside loom sees it too. Idle threads sleep rather than spin (see
    ``docs/threads.md``).

    The default is the number of CPUs this process may run on (its affinity
    mask, ``os.sched_getaffinity``), or ``OMP_NUM_THREADS`` when it is set.
    On a machine where other processes keep cores busy, ``1`` is often faster.

    Parameters
    ----------
    n : int
        Threads to use, at least 1. More than the available CPUs is allowed
        (as in PyTorch) but rarely faster.

    Raises
    ------
    LoomTypeError
        If `n` is not an integer.
    LoomValueError
        If `n` is less than 1.

    Examples
    --------
    >>> import loom
    >>> old = loom.get_num_threads()
    >>> loom.set_num_threads(1)
    >>> loom.get_num_threads()
    1
    >>> loom.set_num_threads(old)
    """
    try:
        if isinstance(n, (bool, np.bool_)):
            raise TypeError
        n = operator.index(n)
    except TypeError:
        raise LoomTypeError(f"loom.set_num_threads: expected an int number of threads, "
                            f"got {type(n).__name__} {n!r}") from None
    if n < 1:
        raise LoomValueError(f"loom.set_num_threads: the number of threads must be at least 1, got {n}")
    with _LOCK:
        _decide(n)


def _decide(n: int) -> int:
    """Record `n`; the BLAS library goes back to one thread until a large product asks for more."""
    global _num_threads
    _num_threads = n
    _set_blas(1)
    return n


def blas_par_min() -> int:
    """Multiply-adds from which a matmul runs on ``get_num_threads()`` BLAS threads (``LOOM_BLAS_PAR_MIN``)."""
    global _blas_par_min
    if _blas_par_min is None:
        _blas_par_min = _env_count("LOOM_BLAS_PAR_MIN", BLAS_PAR_MIN_DEFAULT)
    return _blas_par_min


def _env_count(name: str, default: int) -> int:
    """The positive count in environment variable `name` (at least 1), or `default` when unset or not a number."""
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


def gemm_par_min() -> int:
    """Multiply-adds from which a native step program's matmul runs on ``get_num_threads()`` threads
    (``LOOM_GEMM_PAR_MIN``, default 2**22).

    The step driver (`loom.codegen.driver`) keeps its BLAS library on one
    thread and cuts a large product into one piece per thread of loom's own
    OpenMP team, each piece a single-threaded BLAS call. That team sleeps
    between calls (``OMP_WAIT_POLICY=PASSIVE``) where OpenBLAS's own threads
    spin after every call, so the split pays from far smaller products than
    `blas_par_min`, and the result is the same for every count.
    """
    global _gemm_par_min
    if _gemm_par_min is None:
        _gemm_par_min = _env_count("LOOM_GEMM_PAR_MIN", GEMM_PAR_MIN_DEFAULT)
    return _gemm_par_min


def prepare_blas(macs: int) -> None:
    """Give the BLAS library the threads a product of `macs` multiply-adds should run on.

    Small products run on one thread: a BLAS team forks and joins inside
    every call, and with any other process on the cores the join waits for a
    descheduled thread (measured 4-6x slower for an MLP's matmuls on a busy
    2-core machine). Products of at least `blas_par_min` use all of
    `get_num_threads`. Called just before each matmul; costs a compare when
    the count is already right.
    """
    want = get_num_threads() if macs >= blas_par_min() else 1
    if want != _blas_now:
        with _LOCK:
            _set_blas(want)


def _set_blas(n: int) -> None:
    global _blas, _blas_now
    if _blas is None:
        try:
            _blas = _numpy_blas()
        except ImportError:  # threadpoolctl missing: the BLAS keeps its own count.
            _blas = []
    for lib in _blas:
        lib.set_num_threads(n)
    _blas_now = n


def _blas_controller():
    """threadpoolctl's view of the BLAS libraries loaded in this process (NumPy's, loaded by its import)."""
    from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

    return ThreadpoolController().select(user_api="blas")


def _numpy_blas() -> list:
    """The controllers of the BLAS that NumPy calls (loom's matmuls); other libraries' BLAS (SciPy's,
    PyTorch's) loaded in the same process are theirs to manage."""
    libs = list(_blas_controller().lib_controllers)
    own = [lib for lib in libs if os.path.basename(os.path.dirname(lib.filepath)) in ("numpy.libs", ".dylibs")
           and "numpy" in lib.filepath]
    return own or libs  # A NumPy built against a system BLAS: that library is the one.


def blas_num_threads() -> list[int]:
    """The thread count the BLAS that loom's matmuls use reports now (to check that loom's count reached it)."""
    try:
        return [int(lib.get_num_threads()) for lib in _numpy_blas()]
    except ImportError:
        return []
