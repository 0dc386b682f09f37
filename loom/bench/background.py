"""A busy background process beside the benchmark workers (``python -m loom.bench --background-load N``).

The compute issue asks that loom keep its standing against its peers when
another process is busy on the same CPUs (a data loader, a second job). This
module starts such processes: each runs one single-threaded CPU-bound loop
(a float32 GEMM loop over NumPy, whose working set also competes for the
caches, or a pure-Python spin), pinned to the CPUs the workers are pinned
to. They are stopped when the timed blocks end, by `stop` or at interpreter
exit, and the kernel sends them SIGKILL if the harness dies first.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys

KINDS = ("gemm", "spin")

_LOOP = r"""
import sys
if sys.argv[1] == "gemm":
    import numpy as np
    a = np.random.default_rng(0).standard_normal((384, 384)).astype(np.float32)
    b = a.copy()
    while True:
        np.matmul(a, b, out=b)
        b *= 1.0 / 384
else:
    x = 0
    while True:
        x = (x + 1) % 1000003
"""

_PR_SET_PDEATHSIG = 1


def _child_setup(cpus: list[int] | None) -> None:
    """In the child before exec: die with the parent, and share the workers' CPUs."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # Not Linux: `stop` and the atexit hook still end it.
    if cpus:
        os.sched_setaffinity(0, cpus)


class BusyLoad:
    """`count` busy processes of `kind` ("gemm" or "spin") while started; a context manager.

    Examples
    --------
    >>> load = BusyLoad(1, "spin")
    >>> with load:
    ...     load.running()
    1
    >>> load.running()
    0
    """

    def __init__(self, count: int = 1, kind: str = "gemm", cpus: list[int] | None = None):
        if kind not in KINDS:
            raise ValueError(f"loom.bench: background load kind must be one of {', '.join(KINDS)}, got {kind!r}")
        self.count, self.kind, self.cpus = count, kind, cpus
        self._procs: list[subprocess.Popen] = []

    def start(self) -> None:
        env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
        cpus = self.cpus
        for _ in range(self.count - len(self._procs)):
            self._procs.append(subprocess.Popen([sys.executable, "-c", _LOOP, self.kind], env=env,
                                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                preexec_fn=lambda: _child_setup(cpus)))
        atexit.register(self.stop)

    def running(self) -> int:
        """How many of the processes are alive."""
        return sum(1 for p in self._procs if p.poll() is None)

    def stop(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self._procs.clear()
        atexit.unregister(self.stop)

    def __enter__(self) -> BusyLoad:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
