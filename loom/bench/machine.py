"""What the benchmark ran on: CPU, cores, memory, load, and the versions of every framework.

Versions are read from package metadata, so nothing heavy is imported here.

Examples
--------
>>> info = machine_info()
>>> isinstance(info["avx512"], bool), info["logical_cores"] >= 1
(True, True)
>>> "python" in versions()
True
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
from pathlib import Path

# The instruction-set flags worth reporting beside vectorised-kernel figures.
INTERESTING_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                     "avx512_vnni", "amx_tile")


def _cpuinfo() -> dict[str, str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    return info


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS does not say)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict:
    """CPU model and flags (all instruction-set flags, and the notable ones as booleans), cores, memory, load."""
    cpu = _cpuinfo()
    flags = set(cpu.get("flags", "").split())
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:
        available = os.cpu_count()
    mem_gib = None
    try:
        mem_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {
        "cpu_model": cpu.get("model name") or platform.processor() or "unknown",
        "cpu_flags": {f: f in flags for f in INTERESTING_FLAGS},
        "avx512": "avx512f" in flags,
        "all_cpu_flags": sorted(flags),
        "logical_cores": os.cpu_count(),
        "cores_available": available,
        "memory_gib": mem_gib,
        "platform": platform.platform(),
        "load_average": load_average(),
    }


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "") if head else None


def _gcc() -> str | None:
    cc = os.environ.get("LOOM_CC", "gcc")
    if shutil.which(cc) is None:
        return None
    try:
        return subprocess.run([cc, "-dumpfullversion"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict[str, str | None]:
    """Versions of python, numpy, loom (with its git commit), torch, jax, jaxlib and the C compiler."""
    import loom
    return {"python": platform.python_version(), "numpy": _version("numpy"), "loom": loom.__version__,
            "loom_commit": _git_commit(), "torch": _version("torch"), "jax": _version("jax"),
            "jaxlib": _version("jaxlib"), "cc": _gcc()}
