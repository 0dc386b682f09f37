"""Compile kernel C sources to shared objects with the system C compiler.

Flags: ``-O3 -march=native -fopenmp -fPIC -shared`` plus three that keep
results exactly as the NumPy reference computes them while letting loops
vectorise: ``-fno-math-errno`` (libm calls set no errno, so they vectorise),
``-ffp-contract=off`` (no fused multiply-add: ``a * b + c`` rounds twice, as
in NumPy) and ``-fwrapv`` (signed integer overflow wraps, as in NumPy). No
``-ffast-math`` or anything else that changes NaN/Inf or signed-zero results.

glibc's vector math library (libmvec) gives SIMD versions of exp, log, sin,
... that gcc calls from vectorised loops; it is used when a one-off probe
compiles and links against it (``LOOM_MVEC=0`` turns it off).

Environment: ``LOOM_CC`` (default ``gcc``) names the compiler.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading

from . import trust

BASE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno", "-ffp-contract=off",
              "-fwrapv", "-std=gnu11", "-w")
MVEC_FLAGS = ("-DLOOM_MVEC",)
MVEC_LIBS = ("-lmvec",)
LIBS = ("-lm",)
TIMEOUT_S = 180


class BuildError(RuntimeError):
    """The compiler is missing or rejected a kernel."""


def compiler() -> str:
    """The C compiler command (``LOOM_CC``, default gcc)."""
    return os.environ.get("LOOM_CC", "gcc")


_ID_LOCK = threading.Lock()
_IDS: dict[str, str | None] = {}
_MVEC: dict[str, bool] = {}


def compiler_id(cc: str | None = None) -> str | None:
    """A string naming the compiler and the machine it targets (None if there is no compiler)."""
    cc = cc or compiler()
    with _ID_LOCK:
        if cc in _IDS:
            return _IDS[cc]
        path = shutil.which(cc)
        ident = None
        if path is not None:
            try:
                ver = subprocess.run([path, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True,
                                     timeout=30)
                mach = subprocess.run([path, "-dumpmachine"], capture_output=True, text=True, timeout=30)
                if ver.returncode == 0:
                    ident = f"{os.path.realpath(path)} {ver.stdout.strip()} {mach.stdout.strip()} {_cpu_id()}"
            except (OSError, subprocess.SubprocessError):
                ident = None
        _IDS[cc] = ident
        return ident


def _cpu_id() -> str:
    """-march=native depends on the CPU: kernels built on one machine are not reused on another."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        model = next((ln for ln in info.splitlines() if ln.startswith("model name")), "")
        flags = next((ln for ln in info.splitlines() if ln.startswith("flags")), "")
        return hashlib.sha256((model + flags).encode()).hexdigest()[:16]
    except OSError:
        return "unknown-cpu"


_PROBE = r"""
#include <math.h>
#pragma omp declare simd notinbranch
extern float expf(float);
void probe(float *x, int n) {
  #pragma omp simd
  for (int i = 0; i < n; i++) x[i] = expf(x[i]);
}
"""


def mvec_available(cc: str | None = None, memo_dir: str | None = None) -> bool:
    """Whether kernels can link glibc's libmvec (probed once per compiler).

    With `memo_dir` (a private folder of the kernel cache) the answer is kept
    there per compiler, machine and flags, so later processes skip the probe
    (a compile of its own).
    """
    if os.environ.get("LOOM_MVEC", "1") == "0":
        return False
    cc = cc or compiler()
    with _ID_LOCK:
        if cc in _MVEC:
            return _MVEC[cc]
    memo = _mvec_memo(cc, memo_dir) if memo_dir is not None else None
    ok = _read_memo(memo) if memo is not None else None
    if ok is None:
        ok = _probe_mvec(cc)
        if memo is not None:
            _write_memo(memo, ok)
    with _ID_LOCK:
        _MVEC[cc] = ok
    return ok


def _probe_mvec(cc: str) -> bool:
    if shutil.which(cc) is None:
        return False
    with tempfile.TemporaryDirectory(prefix="loom-probe-") as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write(_PROBE)
        try:
            r = subprocess.run([cc, *BASE_FLAGS, src, "-o", os.path.join(tmp, "probe.so"), *MVEC_LIBS, *LIBS],
                               capture_output=True, text=True, timeout=60)
            return r.returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False


def _mvec_memo(cc: str, folder: str) -> str | None:
    """The file that keeps the libmvec probe's answer for this compiler, machine, flags and probe."""
    ident = compiler_id(cc)
    if ident is None:
        return None
    h = hashlib.sha256("\0".join((ident, *BASE_FLAGS, *MVEC_LIBS, *LIBS, _PROBE)).encode()).hexdigest()
    return os.path.join(folder, f"mvec-{h[:32]}")


def _read_memo(path: str) -> bool | None:
    try:
        with open(path) as f:
            text = f.read(8).strip()
    except OSError:
        return None
    return {"1": True, "0": False}.get(text)


def _write_memo(path: str, value: bool) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write("1" if value else "0")
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def flags(use_mvec: bool) -> tuple[str, ...]:
    """The full flag list for one kernel."""
    return BASE_FLAGS + (MVEC_FLAGS if use_mvec else ())


def libs(use_mvec: bool) -> tuple[str, ...]:
    return (MVEC_LIBS if use_mvec else ()) + LIBS


def compile_shared(source: str, dest: str, use_mvec: bool, cc: str | None = None,
                   extra_libs: tuple[str, ...] = ()) -> None:
    """Compile `source` to the shared object `dest`, atomically, and record its SHA-256 beside it.

    The source and the object are written to unique temporary names in the
    destination directory and renamed into place with `os.replace`, so
    processes racing to build the same kernel all end with a complete file.
    The object and its hash index (``dest + ".sha256"``, see
    `loom.codegen.trust`) are published together under the directory's lock,
    so the index always describes the object beside it. `extra_libs` are
    linked after loom's own (``-ldnnl`` for the native convolution).

    Raises
    ------
    BuildError
        If the compiler is missing, times out or fails (its output is in the message).
    """
    cc = cc or compiler()
    path = shutil.which(cc)
    if path is None:
        raise BuildError(f"loom.codegen: C compiler {cc!r} not found (set LOOM_CC)")
    folder = os.path.dirname(dest)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    stem = os.path.basename(dest)[:-3] if dest.endswith(".so") else os.path.basename(dest)
    tag = f".{os.getpid()}.{threading.get_ident()}.{os.urandom(4).hex()}.tmp"
    c_tmp = os.path.join(folder, stem + tag + ".c")
    so_tmp = os.path.join(folder, stem + tag + ".so")
    try:
        with open(c_tmp, "w") as f:
            f.write(source)
        cmd = [path, *flags(use_mvec), c_tmp, "-o", so_tmp, *extra_libs, *libs(use_mvec)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise BuildError(f"loom.codegen: {cc} timed out after {TIMEOUT_S} s") from None
        except OSError as e:
            raise BuildError(f"loom.codegen: could not run {cc}: {e}") from None
        if r.returncode != 0:
            raise BuildError(f"loom.codegen: {cc} failed ({r.returncode}):\n{(r.stderr or r.stdout)[-4000:]}")
        os.chmod(so_tmp, 0o700)  # The compiler honours the umask; a group-writable library would be refused.
        digest = trust.sha256_file(so_tmp)
        with trust.locked(folder, exclusive=True):
            os.replace(so_tmp, dest)
            trust.write_index(dest, digest)
        os.replace(c_tmp, os.path.join(folder, stem + ".c"))
    finally:
        for p in (c_tmp, so_tmp):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
