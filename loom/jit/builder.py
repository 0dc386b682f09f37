"""Build libloomrt (the C runtime for `loom.jit.save` dumps), its example program, and a dump's kernels.

One command builds the library and the example::

    python -m loom.jit --out build/loomrt --example examples/c_runtime/main.c

and one rebuilds the kernels of a dump (after copying it to another machine)::

    python -m loom.jit --kernels path/to/dump

The library links the CBLAS of the ``scipy-openblas32`` wheel when it is
installed (``--no-blas``, or a missing wheel, gives plain C loops); the
compiler is ``$LOOM_CC`` (default gcc).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from loom.errors import LoomError

CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")
SOURCES = ("loomrt.c", "loomrt_json.c")
HEADERS = ("loomrt.h", "loomrt_json.h")
LIB_FLAGS = ("-O2", "-std=gnu11", "-fPIC", "-shared", "-Wall")
TIMEOUT_S = 300


@dataclass(frozen=True)
class Runtime:
    """Paths of a built runtime.

    Attributes
    ----------
    library : str
        ``libloomrt.so``.
    include_dir : str
        The folder holding ``loomrt.h``.
    example : str or None
        The example program's binary, when one was built.
    blas : bool
        Whether the library calls scipy-openblas32's CBLAS (else plain loops).
    """

    library: str
    include_dir: str
    example: str | None
    blas: bool


def _blas() -> tuple[str, str] | None:
    """(library folder, library name) of scipy-openblas32, or None without it."""
    try:
        import scipy_openblas32
    except ImportError:
        return None
    return scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library()


def _run(cmd: list[str]) -> None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        raise LoomError(f"loom.jit.build_runtime: could not run {cmd[0]}: {e}") from None
    if r.returncode != 0:
        raise LoomError(f"loom.jit.build_runtime: {' '.join(cmd)} failed ({r.returncode}):\n"
                        f"{(r.stderr or r.stdout)[-4000:]}")


def _compiler() -> str:
    from loom.codegen import build

    cc = shutil.which(build.compiler())
    if cc is None:
        raise LoomError(f"loom.jit.build_runtime: C compiler {build.compiler()!r} not found (set LOOM_CC)")
    return cc


def build_runtime(dest: str | os.PathLike | None = None, *, example: str | os.PathLike | None = None,
                  blas: bool = True) -> Runtime:
    """Compile libloomrt (and optionally an example program against it).

    Parameters
    ----------
    dest : str or os.PathLike, optional
        Output folder. By default a folder of the kernel cache keyed by the
        sources, flags and compiler, so a second call with nothing changed
        builds nothing.
    example : str or os.PathLike, optional
        A C program to compile and link against the library (e.g.
        ``examples/c_runtime/main.c``); its binary is ``dest/loomrt_run``.
    blas : bool
        Link scipy-openblas32's CBLAS for matmul and conv2d when installed.

    Returns
    -------
    Runtime
        The paths of what was built.

    Examples
    --------
    >>> import loom, os
    >>> rt = loom.jit.build_runtime()
    >>> os.path.basename(rt.library), os.path.exists(os.path.join(rt.include_dir, "loomrt.h"))
    ('libloomrt.so', True)
    """
    cc = _compiler()
    found = _blas() if blas else None
    defines = ["-DLOOMRT_BLAS"] if found else []
    links = [f"-L{found[0]}", f"-l{found[1]}", f"-Wl,-rpath,{found[0]}"] if found else []
    example_src = None
    if example is not None:
        example_src = os.path.abspath(os.fspath(example))
        if not os.path.isfile(example_src):
            raise LoomError(f"loom.jit.build_runtime: example program {example_src} does not exist")
    if dest is None:
        from loom.codegen import build, cache

        h = hashlib.sha256()
        for name in SOURCES + HEADERS:
            with open(os.path.join(CSRC, name), "rb") as f:
                h.update(f.read())
        if example_src:
            with open(example_src, "rb") as f:
                h.update(f.read())
        h.update(" ".join([str(build.compiler_id(cc)), *LIB_FLAGS, *defines, *links]).encode())
        dest = os.path.join(cache.cache_dir(), "loomrt", h.hexdigest()[:16])
    out = os.path.abspath(os.fspath(dest))
    include = os.path.join(out, "include")
    library = os.path.join(out, "libloomrt.so")
    binary = os.path.join(out, "loomrt_run") if example_src else None
    stamp = os.path.join(out, "build.json")
    want = {"library": library, "example": binary, "blas": bool(found)}
    if os.path.exists(stamp) and os.path.exists(library) and (binary is None or os.path.exists(binary)):
        try:
            with open(stamp) as f:
                done = json.load(f) == want and not _stale(out, example_src)
        except (OSError, ValueError):
            done = False
        if done:
            return Runtime(library, include, binary, bool(found))
    os.makedirs(include, exist_ok=True)
    tag = f".{os.getpid()}.tmp"  # Every file is written aside and renamed: concurrent builds never see half a file.
    shutil.copyfile(os.path.join(CSRC, "loomrt.h"), os.path.join(include, "loomrt.h" + tag))
    os.replace(os.path.join(include, "loomrt.h" + tag), os.path.join(include, "loomrt.h"))
    tmp = library + tag
    _run([cc, *LIB_FLAGS, *defines, *[os.path.join(CSRC, s) for s in SOURCES], "-o", tmp, *links, "-ldl", "-lm"])
    os.replace(tmp, library)
    if example_src and binary:
        tmp = binary + tag
        _run([cc, "-O2", "-std=gnu11", "-Wall", f"-I{include}", example_src, "-o", tmp, f"-L{out}", "-lloomrt",
              f"-Wl,-rpath,{out}", "-lm"])
        os.replace(tmp, binary)
    with open(stamp + tag, "w") as f:
        json.dump(want, f)
    os.replace(stamp + tag, stamp)
    return Runtime(library, include, binary, bool(found))


def _stale(out: str, example_src: str | None) -> bool:
    """Whether a source is newer than the library (an explicit `dest` is not keyed by content)."""
    built = os.path.getmtime(os.path.join(out, "libloomrt.so"))
    sources = [os.path.join(CSRC, s) for s in SOURCES + HEADERS] + ([example_src] if example_src else [])
    return any(os.path.getmtime(s) > built for s in sources)


def build_kernels(dump: str | os.PathLike) -> list[str]:
    """Compile every kernel of a dump from its C (``kernels/kN.c``) for this machine; the libraries built.

    Examples
    --------
    >>> import loom, os, tempfile
    >>> net = loom.nn.Linear(4, 2).eval()
    >>> folder = loom.jit.save(net, loom.randn(1, 4), tempfile.mkdtemp(), compile_kernels=False)
    >>> [os.path.basename(p) for p in loom.jit.build_kernels(folder)]
    ['k0.so']
    """
    from loom.jit.dump import MANIFEST_FILE, build_kernel

    folder = os.fspath(dump)
    try:
        with open(os.path.join(folder, MANIFEST_FILE)) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise LoomError(f"loom.jit.build_kernels: cannot read {folder}/{MANIFEST_FILE}: {e}") from None
    done: dict[str, str] = {}
    for k in manifest.get("kernels", []):
        lib = k["library"]
        if lib not in done:
            stem = os.path.basename(lib)[:-3]
            build_kernel(os.path.join(folder, os.path.dirname(lib)), stem, bool(k.get("mvec")))
            done[lib] = os.path.join(folder, lib)
    return list(done.values())


def main(argv: list[str] | None = None) -> int:
    """The command line: build the runtime (and example), or a dump's kernels."""
    p = argparse.ArgumentParser(prog="python -m loom.jit", description=__doc__.split("\n")[0])
    p.add_argument("--out", help="output folder (default: a folder of the kernel cache)")
    p.add_argument("--example", help="a C program to build against the library (examples/c_runtime/main.c)")
    p.add_argument("--no-blas", action="store_true", help="plain C loops instead of scipy-openblas32")
    p.add_argument("--kernels", metavar="DUMP", help="rebuild the kernels of a dump instead")
    a = p.parse_args(argv)
    try:
        if a.kernels:
            for path in build_kernels(a.kernels):
                print(path)
            return 0
        rt = build_runtime(a.out, example=a.example, blas=not a.no_blas)
    except LoomError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"library: {rt.library}\ninclude: {rt.include_dir}\nblas: {'scipy-openblas32' if rt.blas else 'none'}")
    if rt.example:
        print(f"example: {rt.example}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
