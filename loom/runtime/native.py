"""A compiled step as one native program: the executor's steps written into a plan table that C walks.

`NativeProgram` is built beside an `Executable` whose shapes are fixed. It
decides, once, where every value lives (an arena offset, an input, a fresh
output, a constant, or a strided view of one of these: reshape, permute,
expand, slice and flip cost nothing), and writes each step as a record for
the C driver (`loom.codegen.driver`):

- fused nodes call their generated kernel's ``loom_call`` with the argument
  block `Kernel` would compute for the same strides;
- float32/float64 matmuls call ``cblas_sgemm``/``dgemm`` of the
  ``scipy-openblas32`` wheel, transposes and leading dimensions read from the
  operand strides (a transposed operand is never copied), batches as a loop;
  float16/bfloat16 ones convert their operands to float32 scratch in the
  arena and call ``sgemm`` (`loom.codegen.gemm`); the fused kernels that read
  a float GEMM's rows (its epilogue chain: bias, activation and mask; a
  parameter's optimizer update after its weight gradient, Adam's scalar steps
  moved before the GEMM) run right after it, on its row blocks;
- views that must exist as values (outputs, views whose source memory is
  reused before their last reader) become strided copies;
- gather, scatter_add, pad and ``check`` become the driver's index steps
  (`loom.codegen.driver_index`); one that meets a bad index or value stops
  the walk and Python reruns it, raising loom's error;
- everything else (reference-only ops, argsort, ...) stays a Python step that
  splits the program into native segments.

A call crosses into C once per native segment. Tiers: until the driver
library is built every step runs from Python, and a kernel that is not built
yet is a Python step; both tiers run the same kernels, the same BLAS calls
and the same copies on the same memory, so results are identical. A kernel
that returns an error code is rerun from Python (an integer division by
zero raises there; an overlap or misalignment is retried on copies and the
step stays in Python). Inputs that are not C-contiguous and aligned send the
call back to the executor's own path.

``LOOM_NATIVE=0`` turns native programs off.
"""
from __future__ import annotations

import bisect
import ctypes
import importlib.util
import math
import mmap
import os
import sys
import threading
import time
from collections import Counter
from typing import Any

import numpy as np

from loom import dtypes as _dt
from loom import profiler as _profiler
from loom.ir.node import Node
from loom.runtime import team as _team
from loom.runtime import threads

_KERNEL, _GEMM, _COPY, _PY, _GATHER, _SCATTER, _PAD, _CHECK, _HGEMM, _SPMM = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
_INDEX_OPS = {"gather": _GATHER, "scatter_add": _SCATTER, "pad": _PAD, "check": _CHECK}
_CHECK_CODES = {np.dtype(t): c for c, t in enumerate((np.float32, np.float64, np.int8, np.int16, np.int32,
                                                        np.int64, np.uint8, np.uint16, np.uint32))}
_SCATTER_CODES = {np.dtype(t): c for c, t in enumerate((np.float32, np.float64, np.int32, np.int64))}
_HALF = (_dt.float16, _dt.bfloat16)
# Ops a kernel computes the same in any row block (no vectorised function with a scalar remainder that could
# round differently): a team walk may cut such a kernel across its threads (`_kernel_blocks`).
_EXACT_OPS = frozenset({"input", "const", "cast", "reshape", "expand", "permute", "slice", "add", "sub", "mul",
                        "div", "neg", "where", "maximum", "minimum", "abs", "eq", "ne", "lt", "le", "gt", "ge"})
_VIEW_OPS = frozenset({"reshape", "permute", "expand", "slice", "flip"})
# Library ops whose native kernels the toolchain supplies (`Toolchain.library_step`).
LIBRARY_OPS = frozenset({"attention", "attention_grad", "layer_norm", "layer_norm_grad", "cross_entropy_rows",
                          "cross_entropy_rows_grad"})
# Library kernels whose rows are independent: their results do not depend on the thread count.
_ROW_LIBRARY_OPS = frozenset({"cross_entropy_rows", "cross_entropy_rows_grad", "layer_norm"})
_TEAM_EXPLORE = 32  # Calls between two tries of the team size not in use (`_pick_team`).
# Whether a chain of several kernels runs on row blocks. Off: measured on the mlp workload (1 thread, loaded
# 2-core machine), the blocks' extra kernel calls cost 50-100 us per step more than the cache they saved (the
# optimizer's parameters and momentum come from memory either way); its kernels run right after the GEMM.
_CHAIN_BLOCKS = os.environ.get("LOOM_CHAIN_BLOCKS", "0") not in ("", "0")
_ALIGN = 64
_HOIST_ELEMS = 64  # Elements of a step's value at most for it to move before a GEMM (`_hoistable`).
_INT32_MAX = 2**31 - 1
_CTL_RC = 5
_CTL_DONE = 7  # The driver's resume cells after a team walk stopped (`loom_run`).
# Whether a program runs as one team walk (`loom.runtime.team`): where that is expected faster ("1", the
# default), never ("0") or wherever it can ("always", for tests).
_TEAM_WALK = os.environ.get("LOOM_TEAM_WALK", "1").strip().lower()
_RECYCLE_BYTES = 1 << 16  # Outputs at least this large are recycled (smaller ones come from malloc's heap).
_RECYCLE_DEPTH = 4        # Arrays kept per output.


def enabled() -> bool:
    """Whether compiled graphs run as native programs (``LOOM_NATIVE``, default on)."""
    return os.environ.get("LOOM_NATIVE", "1") not in ("", "0")


# ---------------------------------------------------------------- BLAS

class _Blas:
    """The CBLAS of the ``scipy-openblas32`` wheel (prefixed symbols, 32-bit integers)."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        self.sgemm_addr = _address(lib.scipy_cblas_sgemm)
        self.dgemm_addr = _address(lib.scipy_cblas_dgemm)
        self.set_threads_addr = _address(lib.scipy_openblas_set_num_threads)
        i, p = ctypes.c_int32, ctypes.c_void_p
        self.sgemm = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, i, i, i, ctypes.c_float, p, i, p,
                                      i, ctypes.c_float, p, i)(self.sgemm_addr)
        self.dgemm = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, i, i, i, ctypes.c_double, p, i,
                                      p, i, ctypes.c_double, p, i)(self.dgemm_addr)
        self.set_threads = ctypes.CFUNCTYPE(None, ctypes.c_int)(self.set_threads_addr)
        self.now = np.zeros(1, np.int64)  # The thread count last given (0: never); shared with the driver.
        self.set_threads(1)
        self.now[0] = 1

    def prepare(self, macs: int) -> None:
        """Threads as `threads.prepare_blas` decides them (the driver applies the same rule)."""
        want = threads.get_num_threads() if macs >= threads.blas_par_min() else 1
        if self.now[0] != want:
            self.set_threads(want)
            self.now[0] = want


def _address(fn) -> int:
    return int(ctypes.cast(fn, ctypes.c_void_p).value or 0)


_BLAS_LOCK = threading.Lock()
_BLAS: list = []


def blas() -> _Blas | None:
    """The loaded BLAS, or None when ``scipy-openblas32`` is not installed (matmuls then run from Python)."""
    if _BLAS:
        return _BLAS[0]
    with _BLAS_LOCK:
        if not _BLAS:
            found = None
            try:
                spec = importlib.util.find_spec("scipy_openblas32")
                if spec is not None and spec.submodule_search_locations:
                    folder = os.path.join(list(spec.submodule_search_locations)[0], "lib")
                    names = sorted(n for n in os.listdir(folder) if n.startswith("libscipy_openblas")
                                   and (".so" in n or n.endswith(".dylib")))
                    if names:
                        found = _Blas(ctypes.CDLL(os.path.join(folder, names[0])))
            except (OSError, AttributeError, ImportError):
                found = None
            _BLAS.append(found)
    return _BLAS[0]


def _blas_operand(rows: int, cols: int, rs: int, cs: int) -> tuple[int, int] | None:
    """(transposed, leading dimension) for a row-major CBLAS operand with element strides rs, cs; None if
    no BLAS layout reads it."""
    if cs == 1 or cols == 1:
        ld = rs if rows > 1 else max(cols, 1)
        if ld >= max(cols, 1):
            return 0, ld
    if rs == 1 or rows == 1:
        ld = cs if cols > 1 else max(rows, 1)
        if ld >= max(rows, 1):
            return 1, ld
    return None


# ---------------------------------------------------------------- where values live

class _Loc:
    """A value's place: object `base` (0 the arena, then inputs, outputs, constants), byte `off`, strides."""

    __slots__ = ("base", "off", "shape", "strides", "dtype", "src", "node", "_ext")

    def __init__(self, base: int, off: int, shape, strides, dtype, src: int = -1, node: Any = None):
        self.base, self.off, self.shape, self.strides, self.dtype = base, off, tuple(shape), tuple(strides), dtype
        self.src = src      # For a view: the slot it is derived from (-1: owns its memory).
        self.node: Node = node  # For a view: the view node (its op and attrs re-derive it in NumPy).
        self._ext: tuple[int, int, int] | None = None  # (off, lo, hi): `_extent` at that offset.

    def extent(self) -> tuple[int, int]:
        """`_extent(self)`, kept until the offset moves (`NativeProgram._compact`)."""
        e = self._ext
        if e is None or e[0] != self.off:
            lo, hi = _extent(self)
            e = self._ext = (self.off, lo, hi)
        return e[1], e[2]


def _contiguous(shape, itemsize: int) -> tuple[int, ...]:
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def _pack(spans: list[tuple[int, int, int]], start: int, fixed=()) -> list[int]:
    """Offsets (from `start`, `_ALIGN`-aligned) for (first step, last step, bytes) regions: largest first, each
    at the lowest gap among the regions already there, `fixed` ones ((offset, end, first, last)) included,
    whose steps overlap its own."""
    offs = [0] * len(spans)
    placed: list[tuple[int, int, int, int]] = list(fixed)  # (offset, end, first, last)
    for k in sorted(range(len(spans)), key=lambda j: (-spans[j][2], j)):
        first, last, size = spans[k]
        size = -(-max(size, 1) // _ALIGN) * _ALIGN
        off = start
        for o, e, _, _ in sorted(p for p in placed if p[2] <= last and first <= p[3]):
            if off + size <= o:
                break
            off = max(off, e)
        offs[k] = off
        placed.append((off, off + size, first, last))
    return offs


def _view_of(node: Node, src: _Loc) -> _Loc | None:
    """The layout of view `node` of `src` without copying, or None if NumPy would need a copy."""
    base = np.zeros(1, src.dtype)
    fake = np.lib.stride_tricks.as_strided(base, src.shape, src.strides)
    try:
        if node.op == "reshape":
            out = np.reshape(fake, tuple(node.attrs["shape"]), copy=False)
        else:
            from loom.ir.ops import PRIMITIVES
            out = np.asarray(PRIMITIVES[node.op].impl(fake, node.attrs))
    except (ValueError, TypeError):
        return None
    if out.shape != tuple(node.shape):
        return None
    delta = out.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return _Loc(src.base, src.off + delta, out.shape, out.strides, src.dtype)


def _apply_view(node: Node, array: np.ndarray) -> np.ndarray:
    if node.op == "reshape":
        return np.reshape(array, tuple(node.attrs["shape"]), copy=False)
    from loom.ir.ops import PRIMITIVES
    return np.asarray(PRIMITIVES[node.op].impl(array, node.attrs))


def _copy_dims(shape, ss, ds) -> list[tuple[int, int, int]]:
    """(size, src stride, dst stride) per dim, with dims of size 1 dropped and contiguous runs merged."""
    dims: list[tuple[int, int, int]] = []
    for n, a, b in zip(shape, ss, ds):
        if n == 1:
            continue
        if dims and dims[-1][1] == n * a and dims[-1][2] == n * b:
            dims[-1] = (dims[-1][0] * n, a, b)
        else:
            dims.append((int(n), int(a), int(b)))
    return dims


# ---------------------------------------------------------------- the program

class _Step:
    """One table entry: what it is and how Python runs it when C does not."""

    __slots__ = ("kind", "st", "args", "dst", "gemm", "pre", "chain", "skip")

    def __init__(self, kind, st, args, dst, gemm=None, pre=None, chain=(), skip=0):
        self.kind, self.st, self.args, self.dst, self.gemm = kind, st, args, dst, gemm
        self.pre = pre  # For a GEMM epilogue's kernel: the whole GEMM Python reruns before it.
        self.chain = chain  # For a fused record of several steps: those steps, which Python runs in turn.
        # Records the walk skips after Python ran this one (an epilogue probe: its chain's blocks); -1: a
        # record that cannot fail (an epilogue block, after its probe passed).
        self.skip = skip


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def _arena_buffer(nbytes: int) -> np.ndarray:
    """`nbytes` of fresh memory for an arena, its pages mapped at once where the system can (Linux's
    MAP_POPULATE, small pages): faulting a fresh arena in page by page, as its first call did, cost more than
    the step itself, most of all where NumPy asks for huge pages and the kernel compacts memory to find them."""
    if _POPULATE and nbytes >= 1 << 20:
        try:
            m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)
            return np.frombuffer(m, np.uint8)
        except (OSError, ValueError):
            pass
    return np.empty(nbytes, np.uint8)


class _Ctx:
    """What one concurrent call owns: an arena, its views, and the driver's control block."""

    __slots__ = ("arena", "views", "ctl", "ctl_ptr", "buffer", "nbytes", "objects", "done")

    def __init__(self, nbytes: int, buffer: np.ndarray | None = None):
        self.nbytes = nbytes
        self.ctl = np.zeros(9, np.int64)
        self.done = np.zeros(0, np.int64)  # A team walk's per-step counts (`loom_run_team`).
        self.ctl_ptr = 0
        self.objects = False  # Whether kernels read data pointers straight from the objects (fixed offsets).
        self.buffer: Any = None
        self.bind(buffer if buffer is not None else _arena_buffer(max(nbytes, 1) + _ALIGN))

    def bind(self, buffer: np.ndarray) -> None:
        """Put the arena on `buffer`; views of the old one are forgotten."""
        self.views: dict[int, np.ndarray] = {}
        self.buffer = buffer
        shift = (-buffer.ctypes.data) % _ALIGN
        self.arena = buffer[shift:shift + max(self.nbytes, 1)]


class ArenaPool:
    """Arena buffers shared by the native programs of one traced function (one per specialisation, e.g. per
    batch size).

    A call takes the smallest free buffer its program fits in and gives it back when done, so a new
    specialisation runs on memory an earlier one has already touched (a fresh arena's page faults cost as
    much as the step itself) and the function keeps as many arenas as it has concurrent calls, not one per
    specialisation. Buffers too small for a request are let go when a larger one has to be made (an idle
    program whose context still points at one keeps it until its next call moves it to another).
    """

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.made = 0  # Buffers allocated (for tests and reports).

    def take(self, nbytes: int, prefer: np.ndarray | None = None) -> np.ndarray:
        """A buffer for an arena of `nbytes`: `prefer` (the one the caller used last) when it is free."""
        need = max(nbytes, 1) + _ALIGN
        with self._lock:
            free = self._free
            if free and free[-1] is prefer and prefer.nbytes >= need:  # The usual case: the one just given back.
                return free.pop()
            if prefer is not None:
                for k, b in enumerate(self._free):
                    if b is prefer and b.nbytes >= need:
                        return self._free.pop(k)
            best = None
            for k, b in enumerate(self._free):
                if b.nbytes >= need and (best is None or b.nbytes < self._free[best].nbytes):
                    best = k
            if best is not None:
                return self._free.pop(best)
            self._free = [b for b in self._free if b.nbytes >= need]
            self.made += 1
        return _arena_buffer(need)

    def give(self, buffer: np.ndarray) -> None:
        with self._lock:
            self._free.append(buffer)


class NativeProgram:
    """The native form of an `Executable` (see the module docstring); ``program(arrays)`` runs one call.

    Returns None from a call it hands back to the executor (inputs that are
    not C-contiguous and aligned).
    """

    def __init__(self, exe) -> None:
        self.exe = exe
        # Views' roots once every view is placed (from the epilogue chains on: hoisting moves only values that no
        # view reads), and the planned arena regions `_gap` places around (built at its first call).
        self._root_memo: dict[int, int] | None = None
        self._gap_regions: tuple[dict, dict] | None = None
        self._step_roots: list[list[int] | None] | None = None  # Per step: the roots of its value and arguments.
        self._view_sources: set[int] | None = None  # Slots some view is derived from.
        self._lock = threading.Lock()
        self._blas = blas()
        steps = exe._steps
        nin = len(exe._inputs)
        out_slots = exe._out_slots
        produced = {st.out for st in steps}
        self._out_base: dict[int, int] = {}
        self._out_specs: list[tuple[tuple[int, ...], np.dtype]] = []
        self._held: list[list | None] = []  # Per output: arrays handed out before, reused once unreferenced.
        node_of = {st.out: st.node for st in steps}
        for s in out_slots:
            if s in produced and s not in self._out_base:
                self._out_base[s] = 1 + nin + len(self._out_specs)
                self._out_specs.append((tuple(node_of[s].shape), node_of[s].dtype.np))
                nbytes = _numel(node_of[s].shape) * node_of[s].dtype.np.itemsize
                self._held.append([] if nbytes >= _RECYCLE_BYTES else None)
        locs: dict[int, _Loc] = {}
        for k, node in enumerate(exe._inputs):
            d = node.dtype.np
            locs[k] = _Loc(1 + k, 0, node.shape, _contiguous(node.shape, d.itemsize), d)
        nout = len(self._out_base)
        self._const_arrays = []
        for j, (s, value) in enumerate(exe._consts):
            locs[s] = _Loc(1 + nin + nout, 0, value.shape, value.strides, value.dtype)
            locs[s].base += j
            self._const_arrays.append(value)
        offsets = getattr(exe.plan, "offsets", {}) if exe.plan is not None else {}
        top = int(getattr(exe.plan, "arena_bytes", 0) or 0) if exe.plan is not None else 0
        top = plan_top = -(-top // _ALIGN) * _ALIGN
        own: dict[int, _Loc] = {}  # Each step's own memory (used unless the step is a free view).
        planned_top = top
        fresh: list[tuple[int, int, int]] = []  # (offset, bytes, slot) of values the plan did not place.
        for st in steps:
            node, d = st.node, st.node.dtype.np
            strides = _contiguous(node.shape, d.itemsize)
            if st.out in self._out_base:
                j = self._out_base[st.out]
                own[st.out] = _Loc(j, 0, node.shape, strides, d)
            elif node in offsets:
                own[st.out] = _Loc(0, int(offsets[node]), node.shape, strides, d)
            else:
                nbytes = _numel(node.shape) * d.itemsize
                own[st.out] = _Loc(0, top, node.shape, strides, d)
                fresh.append((top, -(-max(nbytes, 1) // _ALIGN) * _ALIGN, st.out))
                top += fresh[-1][1]
        # A value whose only reader is a reshape returned as an output (or a matmul whose only reader is a
        # transpose returned as one) is written straight into that output.
        readers: dict[int, int] = {}
        for st in steps:
            for a in st.args:
                readers[a] = readers.get(a, 0) + 1
        by_out = {st.out: st for st in steps}
        into_output = set()
        for st in steps:
            node, src = st.node, by_out.get(st.args[0]) if st.args else None
            if node.op == "reshape" and st.out in self._out_base and src is not None and \
                    src.node.op not in _VIEW_OPS and readers.get(src.out) == 1 and src.out not in self._out_base:
                v = own[st.out]
                own[src.out] = _Loc(v.base, 0, src.node.shape, _contiguous(src.node.shape, v.dtype.itemsize), v.dtype)
                into_output.add(st.out)
            elif node.op == "permute" and st.out in self._out_base and src is not None and src.node.op == "matmul" \
                    and readers.get(src.out) == 1 and src.out not in self._out_base and self._blas is not None:
                n = len(node.shape)
                if tuple(node.attrs["perm"]) == tuple(range(n - 2)) + (n - 1, n - 2):
                    v = own[st.out]
                    strides = v.strides[:-2] + (v.strides[-1], v.strides[-2])
                    own[src.out] = _Loc(v.base, 0, src.node.shape, strides, v.dtype)
                    into_output.add(st.out)
            elif node.op == "permute" and src is not None and readers.get(src.out) == 1 and \
                    src.node.op == "matmul" and \
                    src.out not in self._out_base and st.out not in self._out_base and own[src.out].base == 0:
                # The GEMM writes in the permuted layout, so the permute (a head split or merge) is a view of
                # contiguous memory, not a transpose copy. GEMMs only: a fused kernel's bits depend on the
                # layout it walks (vector and scalar paths, summation order), and a memory budget changes
                # which values a permute reads, while a step's bits must not depend on the plan.
                laid = _permuted(own[src.out], tuple(node.attrs["perm"]), True)
                if laid is not None:
                    own[src.out] = laid
        for st in steps:
            loc = own[st.out]
            if loc.base == 0:
                nbytes = _numel(loc.shape) * loc.dtype.itemsize
                top = max(top, loc.off + nbytes)
        self.arena_bytes = top
        # Which views cost nothing: a view of memory nobody writes while the view (or a view of it) is read.
        index = {st.out: k for k, st in enumerate(steps)}
        last = {}
        for k, st in enumerate(steps):
            for a in st.args:
                last[a] = k
        for s in out_slots:
            last[s] = len(steps)
        gemm_args = {a for st in steps if st.node.op == "matmul" for a in st.args}
        found = iter(exe.kernels)  # The executor made one kernel per fused step, in step order.
        self._kernels = [next(found) if st.node.op == "fused" else None for st in steps]
        kernel_reads: dict[int, list] = {}  # Slot -> (kernel, argument index) of the fused steps reading it.
        for st, kern in zip(steps, self._kernels):
            if kern is not None:
                for j, a in enumerate(st.args):
                    kernel_reads.setdefault(a, []).append((kern, j))
        writes = np.zeros((3, len(steps)), np.int64)  # Per step: whether it writes the arena, from, to.
        for j, st in enumerate(steps):
            loc = own[st.out]
            nbytes = _numel(loc.shape) * loc.dtype.itemsize
            writes[:, j] = (loc.base == 0, loc.off, loc.off + nbytes)
        # Start from every view free and take back those whose source memory is written while they are read,
        # counting only the writes of steps that still write; repeat until nothing changes.
        free = {st.out for st in steps if st.node.op in _VIEW_OPS and st.out not in self._out_base}
        while True:
            root: dict[int, int] = {}
            for st in steps:
                s = st.out
                locs[s] = own[s]
                if s in free and st.args[0] in locs:
                    view = _view_of(st.node, locs[st.args[0]])
                    if view is not None and (s not in gemm_args or self._gemm_ok(view)) and \
                            _kernels_read(view, kernel_reads.get(s, ())):
                        view.src, view.node = st.args[0], st.node
                        locs[s] = view
                        root[s] = root.get(st.args[0], st.args[0])
                        continue
                free.discard(s)
            writes[0] = [st.out not in free and own[st.out].base == 0 for st in steps]
            until = dict(last)  # A free view's source is read until the view's (or a free view of it's) last reader.
            for st in reversed(steps):
                if st.out in free:
                    until[st.args[0]] = max(until.get(st.args[0], -1), until.get(st.out, index[st.out]))
            unsafe = {s for s in free if not self._safe(root[s], index, until.get(s, index[s]), index[s], writes, own)}
            if not unsafe:
                break
            free -= unsafe
        # Views that stay copies got memory of their own above the planned arena, one region each (the memory
        # plan does not see them). Place them by lifetime instead: in the planned arena's gaps (bytes no planned
        # value holds while the copy lives), else above it, copies never live together sharing bytes.
        copied = [st for st in steps if st.out not in free and st.node not in offsets and st.out in own
                  and own[st.out].base == 0 and own[st.out].off >= plan_top]
        if copied:
            planned = []
            for st in steps:
                loc = own[st.out]
                if st.node in offsets and loc.base == 0:
                    end = loc.off + _numel(loc.shape) * loc.dtype.itemsize
                    planned.append((loc.off, end, index[st.out], until.get(st.out, index[st.out])))
            packed = _pack([(index[st.out], until.get(st.out, index[st.out]),
                             _numel(own[st.out].shape) * own[st.out].dtype.itemsize)
                            for st in copied], 0, planned)
            for st, off in zip(copied, packed):
                old = own[st.out]
                own[st.out] = _Loc(0, off, old.shape, old.strides, old.dtype)
            for st in steps:  # Free views re-derived from the moved copies.
                s = st.out
                locs[s] = own[s]
                if s in free:
                    view = _view_of(st.node, locs[st.args[0]])
                    view.src, view.node = st.args[0], st.node
                    locs[s] = view
            top = plan_top
            for st in steps:
                loc = own[st.out]
                if loc.base == 0 and st.out not in free:  # A free view's own region is never used.
                    nbytes = _numel(loc.shape) * loc.dtype.itemsize
                    top = max(top, loc.off + nbytes)
            self.arena_bytes = top
        self._virtual: set[int] = set(free)
        self._virtual |= into_output  # Written by their matmul: no step of their own.
        if not copied:  # Packed copies were placed anew (free views' memory dropped with them).
            self._compact(fresh, planned_top, locs, own)
        self._locs = locs
        self._steps = steps
        self._nin = nin
        self._table: tuple | None = None     # (prog, its address, steps, kept arrays) of the current encoding.
        self._encoded_for: tuple | None = None
        self._forced: set[int] = set()       # Exe step indices that stay in Python (a kernel refused C).
        self._index_records: dict[int, list[int] | None] = {}
        self._ctxs: list[_Ctx] = []
        self._pool: ArenaPool | None = None   # Arenas shared with other programs (`share_arenas`).
        self._tools = exe.tools
        self._fast: tuple | None = None      # (driver, table) once the driver and every kernel are built.
        self._results = [(s, self._out_base.get(s, -1)) for s in out_slots]
        self._alias: dict[int, int] = {}  # Output object -> the input object a call may donate as its memory.
        self._teams: dict[int, np.ndarray | None] = {}  # Thread count -> the team walk's schedule (`_team_plan`).
        self._donated: list[int] = []  # Outputs a call may be given memory for (`donatable`); the others:
        self._kept = list(range(len(self._out_specs)))
        # Where each result is in a call's objects, when every one is an output array of its own.
        self._result_objs = [j for _, j in self._results] if all(j >= 0 for _, j in self._results) else None
        self._epilogue = exe.tools.gemm_epilogue() if self._blas is not None else None
        self._index = index
        self._hoisted = {}
        self._chains = self._epilogue_chains(index) if self._epilogue is not None else {}
        self._spmm = self._spmm_triples(readers)
        # Float32 scratch for half-precision GEMMs (one at a time): A, B and C of the largest.
        scratch = 0
        for st in steps:
            g = self._gemm_plan(st) if st.node.op == "matmul" and st.node.dtype in _HALF else None
            if g is not None:
                M, N, K = g[3:6]
                scratch = max(scratch, 4 * (M * K + K * N + M * N))
        for _, ks in self._spmm.values():  # A sparse product's sums when its output shares x's memory.
            o = self._locs[self._steps[ks].out]
            scratch = max(scratch, _numel(o.shape) * o.dtype.itemsize)
        self._scratch_bytes = scratch
        self._scratch_off = -(-self.arena_bytes // _ALIGN) * _ALIGN
        if scratch:
            self.arena_bytes = self._scratch_off + scratch
        # Team sizes: calls run on one thread or on loom's count, whichever was faster lately, where results
        # do not depend on it (`_pick_team`).
        self._adapt = os.environ.get("LOOM_ADAPT_THREADS", "1") not in ("", "0")
        self._team_max = self._invariant_threads()
        self._team_time: dict[int, list[float]] = {}
        self._team_calls = 0
        self._last_walk: tuple[int, float, float] | None = None  # A team program's last walk: team, start, time.
        self._team_seen: set[int] = set()  # Team sizes whose first (cold) call was not counted.
        self._tools.driver()  # Load the driver now (or start its build), before the first call needs it.

    def _compact(self, fresh: list, planned_top: int, locs: dict, own: dict) -> None:
        """Drop the memory set aside for values the plan did not place (views, mostly) that turned out free:
        the others move down, each still in memory of its own, so which views are free does not change."""
        keep = [(off, size) for off, size, s in fresh if s not in self._virtual]
        if len(keep) == len(fresh):
            return
        starts = [off for off, _ in keep]
        shift, top = [], planned_top
        for off, size in keep:
            shift.append(top - off)
            top += size

        def region(loc: _Loc) -> int | None:
            """The kept region holding `loc` (-1: none, it is the own memory of a free view; None: not fresh)."""
            if loc.base != 0 or loc.off < planned_top:
                return None
            k = bisect.bisect_right(starts, loc.off) - 1
            return k if k >= 0 and loc.off < starts[k] + keep[k][1] else -1

        if any(region(loc) == -1 for loc in locs.values()):
            return  # A value placed in memory set aside for a free view (not expected): keep the layout.
        moved: set[int] = set()
        for loc in list(locs.values()) + list(own.values()):
            k = region(loc)
            if k is not None and k >= 0 and id(loc) not in moved:
                moved.add(id(loc))
                loc.off += shift[k]
        self.arena_bytes = max(planned_top, top)

    def _safe(self, r: int, index: dict, until: int, k: int, writes, own) -> bool:
        """Whether the memory of root slot `r` stays unwritten from step `k` through step `until`."""
        if r not in index:
            return True  # An input or a constant: never written.
        loc = own[r]
        if loc.base != 0:
            return True  # A fresh output: written once, by its own step.
        nbytes = _numel(loc.shape) * loc.dtype.itemsize
        lo, hi = loc.off, loc.off + nbytes
        arena, wlo, whi = writes[:, k:until + 1]
        hit = (arena != 0) & (wlo < hi) & (lo < whi)
        if k <= index[r] <= until:
            hit[index[r] - k] = False
        return not hit.any()

    @staticmethod
    def _gemm_ok(loc: _Loc) -> bool:
        isz = loc.dtype.itemsize
        if len(loc.shape) < 2 or any(s % isz for s in loc.strides[-2:]):
            return False
        return _blas_operand(loc.shape[-2], loc.shape[-1], loc.strides[-2] // isz, loc.strides[-1] // isz) is not None

    # ------------------------------------------------------------ donation
    def donatable(self, pairs: list[tuple[int, int]]) -> dict[int, int]:
        """Which outputs a call may write straight into memory the caller gives (`__call__`'s `into`).

        `pairs` holds (output position, input index or -1): the caller would hand output p the array of
        input i (a parameter's new value written over its old one), or, with -1, an array the program does
        not read (a ``.grad`` from the last step). Returns output position -> index in `into` for the pairs
        where that gives the same results: the output has one writer, and every step reading the input
        (through views too) runs before that writer, which reads it, if at all, element for element in a
        fused kernel. Outputs given out this way are no longer recycled (the caller owns their memory).
        """
        steps, locs, nin = self._steps, self._locs, self._nin
        pos = list(range(len(steps)))  # Where each step's reads happen in the walk.
        for k, chain in self._chains.items():
            for k2 in chain + self._hoisted.get(k, ()):
                pos[k2] = k  # An epilogue kernel runs on the row blocks of its GEMM (or right after it).
        chained = set()
        for kg, (km, ks) in self._spmm.items():
            pos[kg] = pos[km] = ks
            chained.update((kg, km, ks))
        out_slots = [s for s, _ in self._results]
        # A step that may stop the call with an error (an index or value check, an integer division, a step
        # left to Python) must run before any memory is overwritten: a failed call leaves the tensors as
        # they were, with or without donation.
        last_fallible = max((pos[k] for k, st in enumerate(steps) if st.out not in self._virtual and
                             _may_fail(st.node)), default=-1)
        # Indexes built once for all pairs (a training step has hundreds): the steps writing each buffer,
        # the steps reading each root value, and the roots outputs read after the walk.
        virtual, root = self._virtual, self._root
        writers_of: dict[int, list[int]] = {}
        readers_of: dict[int, list[int]] = {}
        for k, st in enumerate(steps):
            if st.out in virtual:
                continue
            writers_of.setdefault(locs[st.out].base, []).append(k)
            for r in {root(a) for a in st.args}:
                readers_of.setdefault(r, []).append(k)
        slot_count = Counter(out_slots)
        read_after = {root(s) for s in out_slots if self._out_base.get(s) is None}
        found: dict[int, int] = {}
        for p, i in pairs:
            s = out_slots[p]
            j = self._out_base.get(s)
            if j is None or slot_count[s] != 1 or not -1 <= i < nin:
                continue
            writers = writers_of.get(j, [])
            if len(writers) != 1 or writers[0] in chained:
                continue
            w = writers[0]
            if pos[w] <= last_fallible or (i >= 0 and not self._reads_before(w, i, pos, readers_of.get(i, []),
                                                                            read_after)):
                continue
            found[p] = j - 1 - nin
            if i >= 0:
                self._alias[j] = 1 + i
        with self._lock:
            self._teams = {}
            for idx in found.values():
                self._held[idx] = None
            self._donated = sorted(set(self._donated) | set(found.values()))
            self._kept = [j for j in range(len(self._out_specs)) if j not in self._donated]
        return found

    def _reads_before(self, w: int, i: int, pos: list[int], readers: list[int], read_after: set[int]) -> bool:
        """Whether input `i` is read only before step `w` runs, or by `w` itself element for element
        (`readers`: the steps reading `i`, through views too; `read_after`: what outputs read after the walk)."""
        steps = self._steps
        for k in readers:
            if k == w:
                # The kernel reads the input itself where it writes (the driver's kernels check that the
                # element-for-element read holds and refuse the call otherwise); an integer division could
                # stop it half done, and Python would rerun it on the half-written input.
                st = steps[k]
                body = st.node.attrs.get("body") if st.node.op == "fused" else None
                if body is None or any(a != i for a in st.args if self._root(a) == i) or \
                        any(m.op in ("div", "floordiv", "mod") and not m.dtype.is_floating_point for m in body):
                    return False
            elif pos[k] >= pos[w]:
                return False
        # An output that is the input itself (or a view of it) is read after the walk.
        return i not in read_after

    # ------------------------------------------------------------ describing
    def segments(self) -> int:
        """Native segments of the plan once every kernel is built (runs of steps C runs between Python steps)."""
        count, inside = 0, False
        for k, st in enumerate(self._steps):
            if st.out in self._virtual:
                continue
            native = self._planned_native(k, st)
            if native and not inside:
                count += 1
            inside = native
        return count

    def _planned_native(self, k: int, st) -> bool:
        if k in self._forced:
            return False
        op = st.node.op
        if op == "fused":
            kern = self._kernels[k]
            return kern is not None and kern._lib is not None and not kern.failed
        if op == "matmul":
            return self._gemm_plan(st) is not None
        if op in _INDEX_OPS:
            return self._index_record(k, st) is not None
        if op in LIBRARY_OPS:
            return self._library_record(st, []) is not None
        return op in _VIEW_OPS

    def _gemm_plan(self, st) -> tuple | None:
        """The CBLAS arguments of a matmul step, or None when it runs from Python."""
        if self._blas is None or (st.node.dtype.np not in (np.dtype(np.float32), np.dtype(np.float64)) and
                                  st.node.dtype not in _HALF):
            return None
        a, b, c = self._locs[st.args[0]], self._locs[st.args[1]], self._locs[st.out]
        if a.dtype != st.node.dtype.np or b.dtype != st.node.dtype.np:
            return None
        isz = c.dtype.itemsize
        M, K, N = int(a.shape[-2]), int(a.shape[-1]), int(b.shape[-1])
        if min(M, N, K) == 0 or max(M, N, K) > _INT32_MAX:
            return None
        la, lb = self._gemm_layout(a), self._gemm_layout(b)
        if la is None or lb is None:
            return None
        if self._overlaps(c, a) or self._overlaps(c, b) or any(x % isz for x in c.strides):
            return None
        macs = _numel(st.node.shape) * K
        rs, cs = c.strides[-2] // isz, c.strides[-1] // isz
        if cs == 1 or N == 1:
            ldc, swap = (rs if M > 1 else N), False
        elif rs == 1 or M == 1:  # C is stored transposed: compute C^T = B^T A^T.
            ldc, swap = (cs if N > 1 else M), True
        else:
            return None
        batch = []
        for n, sa, sb, sc in zip(c.shape[:-2], a.strides[:-2], b.strides[:-2], c.strides[:-2]):
            if n != 1:
                batch.append((int(n), int(sb), int(sa), int(sc)) if swap else (int(n), int(sa), int(sb), int(sc)))
        if swap:
            return (int(isz == 8), 1 - lb[0], 1 - la[0], N, M, K, lb[1], la[1], ldc, b, a, c, batch, macs)
        return (int(isz == 8), la[0], lb[0], M, N, K, la[1], lb[1], ldc, a, b, c, batch, macs)

    # ------------------------------------------------------------ GEMM epilogues
    def _epilogue_chains(self, index: dict) -> dict[int, tuple[int, ...]]:
        """Matmul step -> the fused steps that run on its row blocks (its epilogue chain), in step order.

        A member reads the GEMM's C or an earlier member's value only in the rows it writes (element for
        element, or along its own rows: checked against the kernel's plan when the table is encoded), into a
        C-contiguous output of as many elements as C; its other inputs are ready when the GEMM runs. So a
        layer's bias add, activation and mask, or a parameter's whole optimizer update (momentum buffer,
        then parameter) reading its weight gradient, runs on each block of rows while they are in cache
        instead of as passes over whole arrays. The members move up to the GEMM: no step in between touches
        their outputs' memory, no output shares bytes with the GEMM's operands, and two regions of the chain
        share bytes only as one C-contiguous region written in place (as the memory plan placed them).
        """
        steps, locs = self._steps, self._locs
        self._root_memo = {}
        readers_of: dict[int, list[int]] = {}  # Root slot -> steps reading it (through free views too).
        written_into: dict[int, list[int]] = {}  # Slot -> outputs its producer writes straight into (a reshape).
        for j, st in enumerate(steps):
            if st.out not in self._virtual:
                for r in {self._root(a) for a in st.args}:
                    readers_of.setdefault(r, []).append(j)
            elif locs[st.out].src < 0:
                written_into.setdefault(st.args[0], []).append(st.out)

        def also(slot: int, region: _Loc, produced: dict) -> list[int]:
            """`slot`'s value as an output it is written into, where that is C-contiguous; their readers."""
            found = []
            for v in written_into.get(slot, ()):
                if _same_region(locs[v], region, size):
                    produced[v] = region
                    found += readers_of.get(v, [])
            return found
        chains: dict[int, tuple[int, ...]] = {}
        taken: set[int] = set()
        self._chained_args: dict[int, set[int]] = {}  # Member step -> its arguments that read the chain's values.
        self._hoisted: dict[int, tuple[int, ...]] = {}  # Matmul step -> small steps run before it for its chain.
        self._relocated: list[tuple[int, int]] = []  # Arena bytes given to hoisted values (`_gap`).
        for k, st in enumerate(steps):
            if st.node.op != "matmul" or st.out in self._virtual:
                continue
            g = self._gemm_plan(st)
            if g is None or g[12] or st.node.dtype in _HALF or g[8] != g[4]:
                continue  # Batched, half precision, or C not M whole rows of N.
            c = locs[st.out]
            size = g[3] * g[4]
            produced = {st.out: _Loc(c.base, c.off, (size,), (c.dtype.itemsize,), c.dtype)}  # C as BLAS writes it.
            operands = [self._root_loc(a) for a in st.args]  # Read whole by every block's GEMM.
            members: list[int] = []
            hoisted: list[int] = []
            touched: list[_Loc] = list(produced.values())  # Every region the chain reads or writes.
            outs: list[_Loc] = []
            todo = sorted(set(readers_of.get(st.out, [])) | set(also(st.out, produced[st.out], produced)))
            while todo:
                j = todo.pop(0)
                fst = steps[j]
                out = self._member_out(j, size)
                if out is None or j <= k or j in taken:
                    continue
                chained, others = [], []
                for a in fst.args:
                    (chained if self._root(a) in produced else others).append(a)
                late = [index[self._root(a)] for a in others if index.get(self._root(a), -1) >= k]
                early = self._hoistable(late, k, members, hoisted, operands + touched, taken) if late else []
                if early is None:
                    continue  # Not ready when the GEMM runs.
                other_locs = [self._root_loc(a) for a in others]
                if any(self._overlaps(out, x) for x in operands) or \
                        any(self._overlaps(out, x) and not _same_region(out, x, size)
                            for x in touched + other_locs) or \
                        any(self._overlaps(o, x) and not _same_region(o, x, size) for o in outs for x in other_locs):
                    continue
                if self._touched_between(out, k + 1, j, set(members)):
                    continue  # A step in between reads or writes the memory the member now writes earlier.
                members.append(j)
                hoisted = sorted(set(hoisted) | set(early))
                touched += [locs[steps[h].out] for h in early]
                self._chained_args[j] = {i for i, a in enumerate(fst.args) if self._root(a) in produced}
                touched += [out] + other_locs
                outs.append(out)
                produced[fst.out] = out
                todo = sorted(set(todo) | {r for r in readers_of.get(fst.out, []) + also(fst.out, out, produced)
                                           if r > j})
            if members:
                chains[k] = tuple(members)
                taken.update(members)
                if hoisted:
                    self._hoisted[k] = tuple(hoisted)
                    taken.update(hoisted)
        return chains

    def _hoistable(self, late: list[int], k: int, members: list[int], hoisted: list[int], avoid: list[_Loc],
                   taken: set[int]) -> list[int] | None:
        """The steps (`late` and what they read that is made after step `k`) that may run before GEMM `k` so
        that a chain member's inputs are ready, or None. Only small kernels move (an optimizer's step count
        and bias corrections, read by Adam's update): their outputs share no bytes with what the GEMM, the
        chain or any step they move past reads or writes."""
        steps, locs = self._steps, self._locs
        found: list[int] = []
        todo = list(late)
        while todo:
            h = todo.pop()
            if h in hoisted or h in found:
                continue
            st = steps[h]
            if h <= k or h in members or h in taken or st.node.op != "fused" or self._kernels[h] is None or \
                    st.out in self._virtual or _may_fail(st.node) or \
                    _numel(st.node.shape) > _HOIST_ELEMS:
                return None
            out = locs[st.out]
            if any(self._overlaps(out, x) for x in avoid) or \
                    self._touched_between(out, k, h, set(hoisted) | set(found)):
                # The memory plan shares its bytes with values of the steps it moves past: a gap of the planned
                # arena free from the GEMM to its last reader (no view of it was derived).
                if self._view_sources is None:  # (Hoisting moves no view's source: the set holds.)
                    self._view_sources = {loc.src for loc in locs.values() if loc.src >= 0}
                if out.base != 0 or st.out in self._view_sources:
                    return None
                moved = self._gap(k, h, out, avoid)
                if moved is None:
                    return None
                locs[st.out] = moved
            found.append(h)
            todo += [self._index[self._root(a)] for a in st.args if self._index.get(self._root(a), -1) >= k]
        return sorted(found)

    def _touched_between(self, out: _Loc, first: int, end: int, skip: set[int]) -> bool:
        """Whether a step in first..end-1 (not in `skip`, not a free view) reads or writes memory `out` overlaps."""
        roots = self._step_roots
        if roots is None:
            roots = self._step_roots = [None if st.out in self._virtual else
                                        [self._root(x) for x in (st.out, *st.args)] for st in self._steps]
        locs, base = self._locs, out.base
        lo, hi = out.extent()
        for i in range(first, end):
            rs = roots[i]
            if rs is None or i in skip:
                continue
            for r in rs:
                x = locs[r]
                if x.base == base:
                    xlo, xhi = x.extent()
                    if xlo < hi and lo < xhi:
                        return True
        return False

    def _gap(self, k: int, h: int, out: _Loc, avoid: list[_Loc]) -> _Loc | None:
        """`out` (step `h`'s value) placed in a gap of the arena, free from step `k` until its last reader, or
        None when there is none below the arena's top."""
        steps, locs = self._steps, self._locs
        if self._gap_regions is None:
            last: dict[int, int] = {}
            for j, st in enumerate(steps):
                if st.out not in self._virtual:
                    for a in st.args:
                        last[self._root(a)] = j
            for r, _ in self._results:  # Results read from the arena after the walk.
                last[self._root(r)] = len(steps)
            regions: dict[int, tuple] = {}  # Step -> (lo, hi, first, last) of its value in the arena.
            for j, st in enumerate(steps):
                loc = locs[st.out]
                if loc.base == 0 and st.out not in self._virtual and loc.src < 0:
                    regions[j] = (*loc.extent(), j, last.get(st.out, j))
            self._gap_regions = (last, regions)
        last, regions = self._gap_regions
        fixed = [(lo, hi, 0, len(steps)) for lo, hi in self._relocated]
        fixed += [(*x.extent(), 0, len(steps)) for x in avoid if x.base == 0]
        fixed += [r for j, r in regions.items() if j != h]
        nbytes = _numel(out.shape) * out.dtype.itemsize
        (off,) = _pack([(k, last.get(steps[h].out, h), nbytes)], 0, fixed)
        if off + nbytes > self.arena_bytes:
            return None
        self._relocated.append((off, off + nbytes))
        moved = _Loc(0, off, out.shape, out.strides, out.dtype)
        regions[h] = (*moved.extent(), h, last.get(steps[h].out, h))  # The caller puts it there.
        return moved

    def _own_rows(self, st) -> bool:
        """Whether matmul step `st` writes C in the arena, row-major as its value is laid out (not an output,
        not transposed)."""
        g = self._gemm_plan(st)
        return g is not None and g[9] is self._locs[st.args[0]] and self._locs[st.out].base == 0

    def _member_out(self, j: int, size: int) -> _Loc | None:
        """The output of step `j` if it is a fused kernel that may join an epilogue chain over `size`
        elements (C-contiguous, that many elements, no integer division that could stop it half done)."""
        st = self._steps[j]
        if st.node.op != "fused" or self._kernels[j] is None or st.out in self._virtual or _may_fail(st.node):
            return None
        out = self._locs[st.out]
        if out.strides != _contiguous(out.shape, out.dtype.itemsize) or \
                _numel(out.shape) != size:
            return None
        return out

    def _root(self, s: int) -> int:
        memo = self._root_memo
        if memo is not None:
            r = memo.get(s)
            if r is not None:
                return r
        r, locs = s, self._locs
        while locs[r].src >= 0:
            r = locs[r].src
        if memo is not None:
            memo[s] = r
        return r

    def _root_loc(self, s: int) -> _Loc:
        """The memory a value is read from: a free view's root."""
        return self._locs[self._root(s)]

    def _epilogue_records(self, st, chain: tuple[int, ...], objs, ctx: _Ctx, keep) -> tuple[list, list] | None:
        """The records of a matmul and its epilogue chain as alternating row blocks, or None.

        With several blocks, first a probe per member (its kernel on no rows: the overlap and alignment
        checks of the whole call, which every block repeats with the same answer), so that a kernel that
        refuses the call does so before any block ran (a member may update its state in place); Python then
        runs the GEMM and the members whole and the walk skips the blocks. Then per block of rows: the GEMM's
        rows (the whole GEMM first for a chain of several members), then each member's. A chain of several
        members that fits one block returns None: the GEMM and each member run as records of their own.
        """
        g = self._gemm_plan(st)
        dbl, ta, tb, M, N, K, lda, ldb, ldc, a, b, c, batch, macs = g
        isz = c.dtype.itemsize
        metas, row_bytes = [], N * isz
        for j in chain:
            kern, fst = self._kernels[j], self._steps[j]
            if kern is None or not kern.ready:
                return None
            args = [self._value(x, objs, ctx) for x in fst.args]
            out = self._value(fst.out, objs, ctx)
            if not all(self._tools.kernel_usable(x) for x in args + [out]):
                return None
            plan = kern.plan(args, out)
            if plan.meta is None or plan.copies:
                return None
            meta = plan.meta.copy()
            meta[0] = meta[1] = 0  # The driver passes a table of pointers to data-pointer cells.
            if not self._epilogue.reads_within_rows(kern, meta, M * N, self._chained_args[j]):
                return None
            metas.append(meta)
            row_bytes += N * out.itemsize
        bm = self._epilogue.block_rows(M, N, isz) if len(chain) == 1 else \
            self._epilogue.block_rows(M, row_bytes, 1)
        rows = [(r0, min(M, r0 + bm)) for r0 in range(0, M, bm)]
        if len(chain) > 1 and len(rows) == 1:
            return None  # The GEMM, then each member as a record of its own.
        probing = len(rows) > 1  # A single block needs no probe: Python reruns the GEMM and its one kernel.
        whole = [_Step(_GEMM, st, st.args, st.out, gemm=g)] + [_Step(_PY, self._steps[j], self._steps[j].args,
                                                                      self._steps[j].out) for j in chain]
        probes, blocks = [], []
        for j, meta in zip(chain, metas):
            kern, fst = self._kernels[j], self._steps[j]
            ms = self._epilogue.row_blocks(kern, meta, M * N, N, [(0, 0)] + rows,
                                           self._locs[fst.out].dtype.itemsize)
            if ms is None:
                return None
            keep.extend(ms)
            fn = _address(kern._lib._handle.loom_call)
            cells = [self._locs[fst.out]] + [self._locs[x] for x in fst.args]
            head = [_KERNEL, fn, 0, len(cells)] + [v for loc in cells for v in (loc.base, loc.off)]
            probes.append((head, ms[0], fst))
            blocks.append((head, ms[1:], fst))
        # A chain of several kernels (a parameter's optimizer update after its weight gradient) runs them on
        # row blocks after the whole GEMM: cutting the GEMM packs its B operand again for every block, which
        # cost more than the blocks saved (mlp: the 256x784 weight gradient, 8 blocks of 32 rows).
        whole_gemm = len(chain) > 1
        records, steps = [], []
        for head, m, fst in (probes if probing else ()):
            records.append(head[:2] + [m.ctypes.data] + head[3:])
            steps.append(_Step(_KERNEL, fst, fst.args, fst.out, chain=tuple(whole),
                               skip=len(rows) * len(chain) + (1 if whole_gemm else len(rows)) + len(probes) - 1
                               - len(steps)))
        if whole_gemm:
            records.append([_GEMM, dbl, ta, tb, M, N, K, lda, ldb, ldc, a.base, a.off, b.base, b.off, c.base, c.off,
                            0, macs])
            steps.append(_Step(_GEMM, st, st.args, st.out, gemm=g))
        for i, (r0, r1) in enumerate(rows):
            ga = _Loc(a.base, a.off + r0 * (1 if ta else lda) * isz, a.shape, a.strides, a.dtype)
            gc = _Loc(c.base, c.off + r0 * ldc * isz, c.shape, c.strides, c.dtype)
            gb = (dbl, ta, tb, r1 - r0, N, K, lda, ldb, ldc, ga, b, gc, [], (r1 - r0) * N * K)
            if not whole_gemm:
                records.append([_GEMM, dbl, ta, tb, r1 - r0, N, K, lda, ldb, ldc, ga.base, ga.off, b.base, b.off,
                                gc.base, gc.off, 0, (r1 - r0) * N * K])
                steps.append(_Step(_GEMM, st, st.args, st.out, gemm=gb))
            for head, ms, fst in blocks:
                records.append(head[:2] + [ms[i].ctypes.data] + head[3:])
                steps.append(_Step(_KERNEL, fst, fst.args, fst.out, pre=g, skip=-1 if probing else 0))
        return records, steps

    # ------------------------------------------------------------ sparse-dense products
    def _spmm_triples(self, readers: dict) -> dict[int, tuple[int, int]]:
        """Gather step -> (product kernel step, scatter_add step) of a message-passing chain run as one record.

        ``scatter_add(base, 0, ri, gather(x, 0, ci) * w)`` on 2-D float values: the gather's value is read by
        the product alone, the product's by the scatter alone (as its source). The record runs at the
        scatter's place, so the steps in between must not write what it reads late (x, ci, w) nor the
        skipped values' memory (which Python's rerun of the three steps writes).
        """
        steps, virtual, outs, locs = self._steps, self._virtual, self._out_base, self._locs
        reader_of = {a: j for j, st in enumerate(steps) for a in st.args}
        triples = {}
        for kg, gst in enumerate(steps):
            g = gst.node
            if g.op != "gather" or int(g.attrs["axis"]) != 0 or len(g.shape) != 2 or \
                    g.dtype.np not in (np.dtype(np.float32), np.dtype(np.float64)) or \
                    gst.out in outs or gst.out in virtual or readers.get(gst.out) != 1:
                continue
            km = reader_of[gst.out]
            mst = steps[km]
            if mst.node.op != "fused" or mst.out in outs or mst.out in virtual or readers.get(mst.out) != 1 or \
                    not _is_product(mst.node, mst.args, gst.out):
                continue
            ks = reader_of[mst.out]
            sst = steps[ks]
            n = sst.node
            if n.op != "scatter_add" or int(n.attrs["axis"]) != 0 or len(n.shape) != 2 or \
                    list(sst.args).index(mst.out) != 2 or list(sst.args).count(mst.out) != 1 or \
                    n.dtype is not g.dtype or mst.node.dtype is not g.dtype:
                continue
            w = mst.args[1] if mst.args[0] == gst.out else mst.args[0]
            late = [self._root_loc(a) for a in (gst.args[0], gst.args[1], w)] + [locs[gst.out], locs[mst.out]]
            between = [steps[j] for j in range(kg + 1, ks) if j != km and steps[j].out not in virtual]
            if not any(self._overlaps(self._root_loc(b.out), v) for b in between for v in late):
                triples[kg] = (km, ks)
        return triples

    def _spmm_record(self, kg: int) -> tuple[list[int], _Step] | None:
        """The driver record of a gather-product-scatter chain (`_spmm_triples`), and its step, or None."""
        km, ks = self._spmm[kg]
        gst, mst, sst = self._steps[kg], self._steps[km], self._steps[ks]
        locs = self._locs
        x, ci = locs[gst.args[0]], locs[gst.args[1]]
        w = locs[mst.args[1] if mst.args[0] == gst.out else mst.args[0]]
        b, ri, o = locs[sst.args[0]], locs[sst.args[1]], locs[sst.out]
        E, F = (int(v) for v in gst.node.shape)
        isz = o.dtype.itemsize
        if not (_index_dtype(ci) and _index_dtype(ri)) or x.dtype != o.dtype or w.dtype != o.dtype or \
                b.dtype != o.dtype or tuple(ci.shape) != (E, F) or tuple(ri.shape) != (E, F) or \
                tuple(w.shape) != (E, F) or tuple(mst.node.shape) != (E, F) or \
                any(v % isz for v in (*x.strides, *w.strides, *o.strides)):
            return None
        final = []
        if any(self._overlaps(o, v) for v in (x, ci, w, ri)) or \
                ((b.base, b.off, b.strides) != (o.base, o.off, o.strides) and self._overlaps(o, b)):
            # The planned output reuses memory the chain reads (x, dead after the gather): sum in scratch.
            if _numel(o.shape) * isz > self._scratch_bytes:
                return None
            temp = _Loc(0, self._scratch_off, o.shape, _contiguous(o.shape, isz), o.dtype)
            fdims = _copy_dims(o.shape, temp.strides, o.strides)
            final = [len(fdims), o.base, o.off] + [v for d in fdims for v in d]
            o = temp
        cdims = _copy_dims(b.shape, b.strides, o.strides)
        rec = [_SPMM, int(isz == 8), E, F, int(x.shape[0]), int(o.shape[0]),
               x.base, x.off, x.strides[0], x.strides[1],
               ci.base, ci.off, ci.strides[0], ci.strides[1], ci.dtype.itemsize,
               w.base, w.off, w.strides[0], w.strides[1],
               ri.base, ri.off, ri.strides[0], ri.strides[1], ri.dtype.itemsize,
               b.base, b.off, o.base, o.off, o.strides[0], o.strides[1], len(cdims)] + \
            [v for d in cdims for v in d] + (final or [0, 0, 0])
        chain = tuple(_Step(_PY, st, st.args, st.out) for st in (gst, mst, sst))
        return rec, _Step(_SPMM, sst, sst.args, sst.out, chain=chain)

    # ------------------------------------------------------------ index steps
    def _index_record(self, k: int, st) -> list[int] | None:
        """The driver record of a gather, scatter_add, pad or check step, or None when it runs from Python."""
        if k not in self._index_records:
            make = {"gather": self._gather_record, "scatter_add": self._scatter_record,
                    "pad": self._pad_record, "check": self._check_record}[st.node.op]
            locs = [self._locs[a] for a in st.args]
            out = self._locs[st.out]
            ok = out.strides == _contiguous(out.shape, out.dtype.itemsize)  # (A matmul's output may not be.)
            self._index_records[k] = make(st.node, locs, out) if ok else None
        return self._index_records[k]

    def _gather_record(self, node: Node, locs, out: _Loc) -> list[int] | None:
        x, idx = locs
        nd, ax = len(x.shape), int(node.attrs["axis"])
        if nd == 0 or not _index_dtype(idx) or x.dtype.itemsize not in (1, 2, 4, 8) or \
                self._overlaps(out, x) or self._overlaps(out, idx):
            return None
        dims = [v for d in range(nd) for v in (out.shape[d], 0 if d == ax else x.strides[d], idx.strides[d],
                                               out.strides[d])]
        return [_GATHER, nd, x.dtype.itemsize, idx.dtype.itemsize, x.shape[ax], x.strides[ax], x.base, x.off,
                idx.base, idx.off, out.base, out.off] + dims

    def _scatter_record(self, node: Node, locs, out: _Loc) -> list[int] | None:
        base, idx, src = locs
        nd, ax = len(out.shape), int(node.attrs["axis"])
        code = _SCATTER_CODES.get(out.dtype)
        same = (base.base, base.off, base.strides) == (out.base, out.off, out.strides)
        if nd == 0 or code is None or not _index_dtype(idx) or self._overlaps(out, idx) or \
                self._overlaps(out, src) or (not same and self._overlaps(out, base)):
            return None
        dims = [v for d in range(nd) for v in (idx.shape[d], idx.strides[d], src.strides[d],
                                               0 if d == ax else out.strides[d])]
        cdims = _copy_dims(base.shape, base.strides, out.strides)
        return [_SCATTER, nd, code, idx.dtype.itemsize, out.shape[ax], out.strides[ax], base.base, base.off,
                idx.base, idx.off, src.base, src.off, out.base, out.off, len(cdims)] + dims + \
            [v for d in cdims for v in d]

    def _pad_record(self, node: Node, locs, out: _Loc) -> list[int] | None:
        (src,) = locs
        isz = out.dtype.itemsize
        if isz not in (1, 2, 4, 8) or out.strides != _contiguous(out.shape, isz) or self._overlaps(out, src):
            return None
        cell = np.zeros(1, out.dtype)
        try:
            cell[0] = node.attrs.get("value", 0)  # The value as np.pad writes it.
        except (ValueError, TypeError, OverflowError):
            return None
        bits = int(cell.view(f"u{isz}")[0])
        bits = bits - (1 << 64) if bits >= 1 << 63 else bits
        inner = sum(int(lo) * st for (lo, _), st in zip(node.attrs["pads"], out.strides))
        dims = _copy_dims(src.shape, src.strides, out.strides)
        count = _numel(out.shape)
        return [_PAD, len(dims), isz, bits, count, src.base, src.off, out.base, out.off, inner] + \
            [v for d in dims for v in d]

    def _check_record(self, node: Node, locs, out: _Loc) -> list[int] | None:
        (x,) = locs
        a = node.attrs
        code = _CHECK_CODES.get(x.dtype)
        if code is None or x.strides != _contiguous(x.shape, x.dtype.itemsize) or \
                ((x.base, x.off) != (out.base, out.off) and self._overlaps(out, x)):
            return None
        bounds = [a["low"], a["high"], a.get("ignore")]
        flags = int(bool(a.get("closed", False))) | (2 if bounds[2] is not None else 0)
        if a.get("positive_rows", False) and len(x.shape):
            if not a["low"] >= 0:  # Then "some element above 0" is "the row sums above 0" in any order.
                return None
            flags |= 4
        bounds = [0 if b is None else b for b in bounds]
        if x.dtype.kind in "iu" and all(isinstance(b, (int, np.integer)) for b in bounds):
            if not all(-2**63 <= int(b) < 2**63 for b in bounds):
                return None
            cmp, values = 0, [int(b) for b in bounds]
        else:  # NumPy compares float32 with Python numbers in float32, all else in float64.
            weak = all(isinstance(b, (int, float, np.float32)) and not isinstance(b, (np.float64, np.integer))
                       for b in bounds)
            cmp = 2 if x.dtype == np.float32 and weak else 1
            values = [int(np.array(float(b), np.float64).view(np.int64)) for b in bounds]
        count = _numel(x.shape)
        row = int(x.shape[-1]) if len(x.shape) else 1
        return [_CHECK, code, cmp, flags] + values + [count, row, x.base, x.off, out.base, out.off]

    @staticmethod
    def _gemm_layout(loc: _Loc) -> tuple[int, int] | None:
        isz = loc.dtype.itemsize
        if any(s % isz for s in loc.strides[-2:]):
            return None
        res = _blas_operand(int(loc.shape[-2]), int(loc.shape[-1]), loc.strides[-2] // isz, loc.strides[-1] // isz)
        if res is None or res[1] > _INT32_MAX:
            return None
        return res

    def _overlaps(self, c: _Loc, x: _Loc) -> bool:
        if c.base != x.base:
            return False
        lo_x, hi_x = x.extent()
        lo_c, hi_c = c.extent()
        return lo_x < hi_c and lo_c < hi_x

    # ------------------------------------------------------------ values for Python steps
    def _value(self, s: int, objs, ctx: _Ctx) -> np.ndarray:
        loc = self._locs[s]
        if loc.src >= 0:
            return _apply_view(loc.node, self._value(loc.src, objs, ctx))
        if loc.base != 0:
            arr = objs[loc.base]
            if arr.strides != loc.strides:  # A matmul writing a transposed output.
                arr = np.lib.stride_tricks.as_strided(arr, loc.shape, loc.strides)
            return arr
        view = ctx.views.get(s)
        if view is None:
            nbytes = _numel(loc.shape) * loc.dtype.itemsize
            view = ctx.arena[loc.off:loc.off + nbytes].view(loc.dtype).reshape(loc.shape)
            if view.strides != loc.strides:  # A producer writing in its permute reader's layout.
                view = np.lib.stride_tricks.as_strided(view, loc.shape, loc.strides)
            ctx.views[s] = view
        return view

    def _run_python(self, step: _Step, objs, ctx: _Ctx) -> None:
        for sub in step.chain:
            self._run_python(sub, objs, ctx)
        if step.chain:
            return
        st = step.st
        if step.pre is not None:
            self._gemm_python(step.pre, objs, ctx)
        dst = self._value(st.out, objs, ctx)
        if step.kind == _GEMM:
            self._gemm_python(step.gemm, objs, ctx)
        else:
            st.run([self._value(a, objs, ctx) for a in st.args], dst)

    def _gemm_python(self, g, objs, ctx: _Ctx) -> None:
        dbl, ta, tb, M, N, K, lda, ldb, ldc, a, b, c, batch, macs = g
        bl = self._blas
        if bl is None:  # A GEMM step is only planned with the library loaded.
            raise RuntimeError("loom internal: a GEMM step without a BLAS library")
        bl.prepare(macs)
        fn = bl.dgemm if dbl else bl.sgemm
        pa = _ptr(objs[a.base]) + a.off
        pb = _ptr(objs[b.base]) + b.off
        pc = _ptr(objs[c.base]) + c.off
        for idx in np.ndindex(*[n for n, *_ in batch]):
            oa = sum(i * d[1] for i, d in zip(idx, batch))
            ob = sum(i * d[2] for i, d in zip(idx, batch))
            oc = sum(i * d[3] for i, d in zip(idx, batch))
            fn(101, 112 if ta else 111, 112 if tb else 111, M, N, K, 1.0, pa + oa, lda, pb + ob, ldb, 0.0,
               pc + oc, ldc)

    # ------------------------------------------------------------ encoding
    def _state(self, driver) -> tuple:
        ready = tuple(k.ready if k is not None else False for k in self._kernels)
        return (driver is not None, ready, frozenset(self._forced), self._library_building())

    def _library_building(self) -> tuple[bool, ...]:
        """Per library step (attention, row ops): whether its native library is still being built."""
        return tuple(self._tools.library_pending(st.node) for st in self._steps if st.node.op in LIBRARY_OPS)

    def _encode(self, driver, objs, ctx: _Ctx) -> tuple:
        """The table for the kernels built now (a kernel not built yet is a Python step)."""
        steps: list[_Step] = []
        records: list[list[int]] = []
        keep: list[Any] = []
        fused_done: set[int] = set()  # Steps run as part of another record (a GEMM's epilogue, a sparse product).
        spmm_at: dict[int, tuple] = {}  # Scatter step -> the record of its whole gather-product-scatter chain.
        for kg, (km, ks) in self._spmm.items():
            spmm = self._spmm_record(kg) if driver is not None and not self._forced.intersection((kg, km, ks)) \
                else None
            if spmm is not None:
                spmm_at[ks] = spmm
                fused_done.update((kg, km))
        for k, st in enumerate(self._steps):
            s = st.out
            if s in self._virtual or k in fused_done:
                continue
            if k in spmm_at:
                records.append(spmm_at[k][0])
                steps.append(spmm_at[k][1])
                continue
            chain = self._chains.get(k)
            if chain:
                # Its members run right after the GEMM in every tier: `donatable` counted on it.
                early = self._hoisted.get(k, ())
                fused_done.update(chain + early)
                for j in early:  # Small steps a member reads, moved before the GEMM.
                    rec, step = self._record(j, self._steps[j], driver, objs, ctx, keep)
                    records.append(rec)
                    steps.append(step)
                # On row blocks: the whole chain, or (several kernels, `_CHAIN_BLOCKS` off) its first kernel where
                # the GEMM writes memory of its own in row-major order (a bias add), the others after.
                cut = chain if len(chain) == 1 or _CHAIN_BLOCKS else chain[:1] if self._own_rows(st) else ()
                blocked = self._epilogue_records(st, cut, objs, ctx, keep) \
                    if cut and driver is not None and not self._forced.intersection((k, *chain)) else None
                if blocked is not None:
                    records += blocked[0]
                    steps += blocked[1]
                    for j in chain[len(cut):]:
                        rec, step = self._record(j, self._steps[j], driver, objs, ctx, keep)
                        records.append(rec)
                        steps.append(step)
                    continue
                for j in (k, *chain):
                    rec, step = self._record(j, self._steps[j], driver, objs, ctx, keep)
                    records.append(rec)
                    steps.append(step)
                continue
            rec, step = self._record(k, st, driver, objs, ctx, keep)
            steps.append(step)
            records.append(rec)
        bl = self._blas
        head = [len(records), bl.sgemm_addr if bl else 0, bl.dgemm_addr if bl else 0, bl.set_threads_addr if bl else 0]
        offs, pos = [], len(head) + len(records)
        for rec in records:
            offs.append(pos)
            pos += len(rec)
        prog = np.array(head + offs + [v for rec in records for v in rec], np.int64)
        return (prog, prog.ctypes.data, steps, keep)

    def _record(self, k: int, st, driver, objs, ctx: _Ctx, keep) -> tuple[list[int], _Step]:
        """The record of step `k` on its own, and how Python runs it."""
        tools = self._tools
        s = st.out
        op = st.node.op
        step = _Step(_PY, st, st.args, s)
        rec = [_PY]
        if k in self._forced:
            pass
        elif op == "fused":
            kern = self._kernels[k]
            if kern is not None and kern.ready and driver is not None:
                krec = self._kernel_record(kern, st, objs, ctx, keep, tools)
                if krec is not None:
                    rec, step = krec, _Step(_KERNEL, st, st.args, s)
        elif op == "matmul":
            g = self._gemm_plan(st)
            if g is not None and st.node.dtype in _HALF:
                dbl, ta, tb, M, N, K, lda, ldb, ldc, a, b, c, batch, macs = g
                rec = [_HGEMM, int(st.node.dtype is _dt.bfloat16), ta, tb, M, N, K, lda, ldb, ldc, a.base, a.off,
                       b.base, b.off, c.base, c.off, len(batch), macs, 0, self._scratch_off] + \
                    [v for d in batch for v in d]
                step = _Step(_HGEMM, st, st.args, s)  # (Python runs it as the reference does.)
            elif g is not None:
                dbl, ta, tb, M, N, K, lda, ldb, ldc, a, b, c, batch, macs = g
                rec = [_GEMM, dbl, ta, tb, M, N, K, lda, ldb, ldc, a.base, a.off, b.base, b.off, c.base, c.off,
                       len(batch), macs] + [v for d in batch for v in d]
                step = _Step(_GEMM, st, st.args, s, gemm=g)
        elif op in LIBRARY_OPS and driver is not None:
            lrec = self._library_record(st, keep)
            if lrec is not None:
                rec, step = lrec, _Step(_KERNEL, st, st.args, s)
        elif op in _INDEX_OPS:
            irec = self._index_record(k, st) if driver is not None else None
            if irec is not None:
                rec, step = irec, _Step(_INDEX_OPS[op], st, st.args, s)
        elif op in _VIEW_OPS:
            view = _view_of(st.node, self._locs[st.args[0]])
            dl = self._locs[s]
            if view is None and op == "reshape":  # Not a view: copy the source in C order.
                sl = self._locs[st.args[0]]
                view = _Loc(sl.base, sl.off, sl.shape, sl.strides, sl.dtype)
                dl = _Loc(dl.base, dl.off, sl.shape, _contiguous(sl.shape, dl.dtype.itemsize), dl.dtype)
            if view is not None and not self._overlaps(dl, view):  # (NumPy copes with overlap.)
                dims = _copy_dims(view.shape, view.strides, dl.strides)
                rec = [_COPY, len(dims), dl.dtype.itemsize, view.base, view.off, dl.base, dl.off] + \
                    [v for d in dims for v in d]
                step = _Step(_COPY, st, st.args, s)
        return rec, step

    def _kernel_record(self, kern, st, objs, ctx, keep, tools) -> list[int] | None:
        args = [self._value(a, objs, ctx) for a in st.args]
        out = self._value(st.out, objs, ctx)
        if not all(tools.kernel_usable(a) for a in args + [out]):
            return None
        plan = kern.plan(args, out)
        if plan.meta is None or plan.copies:
            return None
        meta = plan.meta.copy()
        meta[0] = meta[1] = 0  # The driver passes a table of pointers to data-pointer cells.
        keep.append(meta)
        fn = _address(kern._lib._handle.loom_call)
        locs = [self._locs[st.out]] + [self._locs[a] for a in st.args]
        rec = [_KERNEL, fn, meta.ctypes.data, len(locs)]
        for loc in locs:
            rec += [loc.base, loc.off]
        return rec

    def _library_record(self, st, keep) -> list[int] | None:
        """A kernel record for a library op the toolchain has a native kernel for (attention, row ops)."""
        out = self._locs[st.out]
        ins = [self._locs[a] for a in st.args]
        if out.strides != _contiguous(out.shape, out.dtype.itemsize) or any(self._overlaps(out, x) for x in ins):
            return None
        found = self._tools.library_step(st.node, [out] + ins)
        if found is None:
            return None
        fn, meta = found
        keep.append(meta)
        rec = [_KERNEL, fn, meta.ctypes.data, 1 + len(ins)]
        for loc in [out] + ins:
            rec += [loc.base, loc.off]
        return rec

    # ------------------------------------------------------------ running
    def lend(self, buffer: np.ndarray | None) -> None:
        """Run later calls on `buffer` (uint8, at least ``arena_bytes + 64``) instead of an arena of its own;
        None: own arenas again. The compiled eager backend lends one buffer to all its plans, which it runs
        one at a time; a concurrent call of this program still gets an arena of its own. Lending ends
        `share_arenas`."""
        self._pool = None
        self._ctxs[:] = [self._new_ctx(buffer)] if buffer is not None else []

    def share_arenas(self, pool: ArenaPool | None) -> None:
        """Take each call's arena from `pool` (shared with other programs run by the same owner); None: arenas
        of its own again."""
        self._pool = pool
        self._ctxs[:] = []

    def _new_ctx(self, buffer: np.ndarray | None = None) -> _Ctx:
        abi = self._tools.kernel_abi()
        ctx = _Ctx(self.arena_bytes) if buffer is None else _Ctx(self.arena_bytes, buffer)
        ctl = ctx.ctl
        ctl[0], ctl[1] = abi if abi is not None else (0, 0)
        ctl[2] = 1 + self._nin + len(self._out_specs) + len(self._const_arrays)
        ctl[4] = threads.gemm_par_min()  # Products the driver splits across loom's team.
        ctl[6] = self._blas.now.ctypes.data if self._blas is not None else 0
        ctx.ctl_ptr = ctl.ctypes.data
        ctx.objects = bool(ctl[0] or ctl[1])
        return ctx

    def _prepare(self, objs, ctx: _Ctx) -> tuple | None:
        """(driver, table) for this call, encoding the table again when a kernel or the driver got built."""
        driver = self._tools.driver()
        if driver is None and self._tools.driver_done():  # It cannot be built here: the executor's own loop serves.
            return None
        with self._lock:
            state = self._state(driver)
            if self._table is None or self._encoded_for != state:
                self._table = self._encode(driver, objs, ctx)
                self._encoded_for = state
                self._teams = {}
            pending = any(k is not None and k._lib is not None and not k._lib.done.is_set() for k in self._kernels) \
                or any(state[3])
            current = (driver, self._table)
            if driver is not None and not pending:
                self._fast = current
        return current

    def __call__(self, arrays: list[np.ndarray], into: list | None = None,
                 fresh: int = 0) -> tuple[np.ndarray, ...] | None:
        """Run one call on `arrays`; `into` (per output, as `donatable` numbered them: an array or None) gives
        memory some outputs are written into instead of fresh arrays. The last `fresh` arrays are the caller's
        own C-contiguous, aligned ones (made by NumPy for this call): not checked again."""
        for a in (arrays[:len(arrays) - fresh] if fresh else arrays):
            f = a.flags
            if not (f.c_contiguous and f.aligned):
                return None
        outs = self._outputs(into)
        ctxs = self._ctxs
        pool = self._pool
        try:
            ctx = ctxs.pop()  # One arena per concurrent call (list.pop and append are atomic).
        except IndexError:
            ctx = self._new_ctx(pool.take(self.arena_bytes) if pool is not None else None)
        else:
            if pool is not None:  # Its buffer went back to the pool after its last call: take it (or another).
                buffer = pool.take(self.arena_bytes, ctx.buffer)
                if buffer is not ctx.buffer:
                    ctx.bind(buffer)
        objs = (ctx.arena, *arrays, *outs, *self._const_arrays)
        try:
            fast = self._fast if self._fast is not None else self._prepare(objs, ctx)
            if fast is None:
                return None
            driver, table = fast
            if driver is not None:
                self._run_native(table, driver, objs, ctx)
            else:
                for step in table[2]:
                    self._run_python(step, objs, ctx)
            if self._result_objs is not None:
                return tuple(map(objs.__getitem__, self._result_objs))
            return tuple([objs[j] if j >= 0 else np.array(self._value(s, objs, ctx)) for s, j in self._results])
        finally:
            if pool is not None:
                pool.give(ctx.buffer)  # The context stays bound to it: the next call takes it back if it is free.
            ctxs.append(ctx)

    def _outputs(self, into: list | None = None) -> list[np.ndarray]:
        """Fresh output arrays, recycling large ones that only this program still references.

        A large new array comes from mmap and costs a page fault per 4 KiB on first touch (hundreds per
        training step); an output whose caller has dropped it (a parameter's value two steps ago) is
        unreachable from outside, and every output step writes all of its elements.
        """
        held = self._held
        specs = self._out_specs
        if into is not None:  # Donated memory where given (`donatable` checked that this is safe).
            outs = list(into) + [None] * (len(specs) - len(into))
            for j in self._donated:
                if outs[j] is None:
                    outs[j] = np.empty(*specs[j])
            todo = self._kept
        else:
            outs = [None] * len(specs)
            todo = range(len(specs))
        with self._lock:
            for j in todo:
                shape, d = specs[j]
                pool = held[j]
                if pool is None:
                    outs[j] = np.empty(shape, d)
                    continue
                for a in pool:
                    # References: the pool, the loop variable and getrefcount's argument.
                    if sys.getrefcount(a) == 3:
                        outs[j] = a
                        break
                else:
                    a = np.empty(shape, d)
                    if len(pool) >= _RECYCLE_DEPTH:
                        pool.pop(0)
                    pool.append(a)
                    outs[j] = a
        return outs

    def _invariant_threads(self) -> int:
        """The most threads up to which every step gives the same bits on any number of them: kernels whose
        reductions never split one output's sum across threads (enough outputs, or too little work to split),
        GEMMs (cut in whole rows), copies, index steps and row library kernels; 0 when a step may differ."""
        par_min = self._tools.kernel_par_min()
        most = 1 << 30
        for k, st in enumerate(self._steps):
            op = st.node.op
            if op in LIBRARY_OPS and op not in _ROW_LIBRARY_OPS:
                return 0
            if op == "fused":
                spec = getattr(self._kernels[k], "spec", None)
                if spec is None:
                    return 0
                if spec.accs and _numel(spec.loop_sizes) >= par_min:
                    most = min(most, _numel(st.node.shape))
        return most

    def _pick_team(self, n: int, teamed: bool = False) -> int:
        """The thread count of this call: loom's `n`, or 1 where the last calls on one thread were faster.

        On a machine whose other core is busy, every parallel region waits for a thread that is not running
        (docs/threads.md); whichever count gave the shorter walks lately wins, and the other is tried again
        every `_TEAM_EXPLORE` calls, so the choice follows the machine's load. Only programs whose results do
        not depend on the count adapt (`_invariant_threads`, or `teamed`: the walk runs as a team walk, whose
        bits are those of one thread); ``LOOM_ADAPT_THREADS=0`` turns it off.
        """
        if n <= 1 or not self._adapt or (n > self._team_max and not teamed):
            return n
        tn, t1 = self._team_time.get(n, ()), self._team_time.get(1, ())
        if len(tn) < 3 or len(t1) < 3:  # First three calls of each, alternating.
            return n if len(tn) <= len(t1) else 1
        self._team_calls += 1
        best, other = (1, n) if sorted(t1)[1] < sorted(tn)[1] else (n, 1)
        return other if self._team_calls % _TEAM_EXPLORE == 0 else best

    def _run_native(self, table, driver, objs, ctx: _Ctx) -> None:
        n_all = threads.get_num_threads()
        teamed = n_all > 1 and self._team_plan(table, n_all) is not None
        team = self._pick_team(n_all, teamed)
        if team == n_all and (n_all <= 1 or not self._adapt or (n_all > self._team_max and not teamed)):
            self._walk(table, driver, objs, ctx, team)
            return
        t0 = time.perf_counter()
        last, self._last_walk = self._last_walk, None
        if last is not None and teamed:
            # A team walk's cost can fall outside it (a woken worker taking the caller's core on a loaded
            # machine): the team sizes are judged by their whole calls, from one walk's start to the next,
            # unless the caller did other work in between (over 4 walks' time).
            prev_team, prev_t0, prev_dt = last
            period = t0 - prev_t0
            self._record_team_time(prev_team, period if period <= 4 * prev_dt else prev_dt, True)
        self._walk(table, driver, objs, ctx, team)
        dt = time.perf_counter() - t0
        if teamed:
            self._last_walk = (team, t0, dt)
        else:
            self._record_team_time(team, dt)

    def _record_team_time(self, team: int, dt: float, teamed: bool = False) -> None:
        if teamed and team not in self._team_seen:  # A first call is cold (a team walk starts loom's workers).
            self._team_seen.add(team)
            return
        recent = self._team_time.setdefault(team, [])  # The last three calls: their median judges.
        recent.append(dt)
        if len(recent) > 3:
            del recent[0]

    def _walk(self, table, driver, objs, ctx: _Ctx, team: int) -> None:
        prog, prog_ptr, steps, _ = table
        n = len(steps)
        ctl = ctx.ctl
        ctl[3] = team
        if ctx.objects:
            call, arg, team_call = driver.run_objects, objs, driver.team_objects
        else:  # No fixed struct offsets: a table of pointers to data-pointer cells.
            cells = np.array([_ptr(o) for o in objs], np.uintp)
            refs = cells.ctypes.data + cells.itemsize * np.arange(len(objs), dtype=np.uintp)
            call, arg, team_call = driver.run_pointers, refs.ctypes.data, driver.team_pointers
        if _profiler.ACTIVE is not None:
            call = _profiled(call, n)
        sched = self._team_plan(table, team) if team > 1 else None
        done = None
        if sched is not None:
            if len(ctx.done) < 2 * n:  # Per step: pieces done, then pieces claimed.
                ctx.done = np.zeros(2 * n, np.int64)
            done = ctx.done
            t0 = _profiler.now_us() if _profiler.ACTIVE is not None else 0.0
            k = team_call(prog_ptr, arg, ctx.ctl_ptr, sched.array.ctypes.data, done.ctypes.data)
            if _profiler.ACTIVE is not None:
                _profiler.record(f"native team of {team}: steps 0-{n - 1}", "native", t0, _profiler.now_us(),
                                 steps=n)
            if k >= n:
                return
            # A step stopped the team: Python runs it, then the driver the steps not done yet, in order, on one
            # thread (the team walk's bits).
            ctl[_CTL_DONE] = done.ctypes.data
            ctl[3] = 1
        else:
            k = call(prog_ptr, arg, ctx.ctl_ptr, 0)
        try:
            while k < n:
                step = steps[k]
                if step.kind == _KERNEL:  # It returned an error code: Python reruns it (and raises, or uses copies).
                    if step.skip < 0:
                        raise RuntimeError(f"loom internal: an epilogue block of step {step.st.node.op} failed "
                                           f"(code {int(ctl[_CTL_RC])}) after its probe passed")
                    if ctl[_CTL_RC] < 0:  # Overlap or misalignment: the step stays in Python from now on.
                        with self._lock:
                            self._forced.add(self._steps.index(step.st))
                            self._fast = None
                    step = _Step(_PY, step.st, step.args, step.dst, pre=step.pre, chain=step.chain, skip=step.skip)
                if _profiler.ACTIVE is not None:
                    t0 = _profiler.now_us()
                    self._run_python(step, objs, ctx)
                    node = step.st.node
                    _profiler.record(node.op, "op", t0, _profiler.now_us(), shape=tuple(node.shape))
                else:
                    self._run_python(step, objs, ctx)
                after = k + 1 + max(step.skip, 0)
                if done is not None:
                    done[k:after] = 1
                    k = call(prog_ptr, arg, ctx.ctl_ptr, 0)
                else:
                    k = call(prog_ptr, arg, ctx.ctl_ptr, after)
        finally:
            ctl[_CTL_DONE] = 0

    def _team_plan(self, table, team: int) -> _team.Schedule | None:
        """The team walk's schedule of `table` on `team` threads (`loom.runtime.team`), or None: the sequential
        walk (``LOOM_TEAM_WALK=0``, not Linux, a Python step, an attention kernel, or nothing to gain)."""
        teams = self._teams
        if team in teams:
            return teams[team]
        sched = None
        always = _TEAM_WALK == "always"
        # Library kernels other than the row ones (attention and its gradient, layer_norm's gradient) keep the
        # sequential walk: they split their work across threads themselves, and the team's dependencies would
        # see only their outputs and inputs (a GPT step ran 3x slower as a team).
        own_team = any(s.st.node.op in LIBRARY_OPS and s.st.node.op not in _ROW_LIBRARY_OPS for s in table[2])
        if _TEAM_WALK not in ("", "0") and sys.platform.startswith("linux") and not own_team:
            sched = _team.plan(self._team_records(table, team), team, self._tools.kernel_par_min(), always=always)
        teams[team] = sched
        return sched

    def _team_records(self, table, team: int = 2) -> list:
        """What `loom.runtime.team` needs of each record of `table`: kind, memory read and written, size, and a
        large exact kernel's argument blocks for `team` row blocks."""
        prog, _, steps, keep = table
        out = []
        metas = {int(m.ctypes.data): m for m in keep if isinstance(m, np.ndarray)}
        scratch = (0, self._scratch_off, self._scratch_off + max(self._scratch_bytes, 1))

        def region(loc: _Loc) -> tuple[int, int, int]:
            lo, hi = _extent(loc)
            return self._alias.get(loc.base, loc.base), lo, hi

        for k, step in enumerate(steps):
            kind = int(prog[int(prog[4 + k])])
            st = step.st
            if kind == _PY:
                out.append(_team.Record(kind, [], [], True))
                continue
            if kind == _GEMM:
                dbl, ta, tb, M, N, K, lda, ldb, ldc, a, b, c, batch, macs = step.gemm
                items = int(np.prod([d[0] for d in batch], dtype=np.int64)) if batch else 1
                out.append(_team.Record(kind, [region(a), region(b)], [region(c)], False,
                                        gemm=(int(M), int(macs), int(dbl), items)))
                continue
            reads = [region(self._locs[a]) for a in st.args]
            writes = [region(self._locs[st.out])]
            if kind == _HGEMM:
                writes.append(scratch)
                rec = prog[int(prog[4 + k]):]
                out.append(_team.Record(kind, reads, writes, False, gemm=(int(rec[4]), int(rec[17]), 0, 1)))
                continue
            if kind == _SPMM:
                writes += [scratch] + [region(self._locs[c.st.out]) for c in step.chain]
            fallible = kind in (_GATHER, _SCATTER, _CHECK, _SPMM) or (kind == _KERNEL and _may_fail(st.node))
            work = int(np.prod(st.node.shape, dtype=np.int64)) if kind == _KERNEL else 0
            blocks = None
            if kind == _KERNEL and not fallible and work >= self._tools.kernel_par_min():
                blocks = self._kernel_blocks(step, metas.get(int(prog[int(prog[4 + k]) + 2])), team)
            out.append(_team.Record(kind, reads, writes, fallible, work=work, blocks=blocks))
        return out

    def _kernel_blocks(self, step, meta, team: int) -> list | None:
        """A fused kernel record's argument block cut into `team` blocks of its output rows, or None when it is
        not cut: a GEMM epilogue's block or probe, a reduction, a body with an op that may round differently
        in another block (a vectorised exp), or rows that do not divide."""
        st = step.st
        if meta is None or step.chain or step.pre is not None or step.skip or st.node.op != "fused" or \
                self._epilogue is None:
            return None
        kern = self._kernels[self._index[st.out]]
        spec = getattr(kern, "spec", None)
        out = self._locs[st.out]
        if spec is None or spec.accs or len(out.shape) < 1 or \
                out.strides != _contiguous(out.shape, out.dtype.itemsize) or \
                any(m.op not in _EXACT_OPS for m in st.node.attrs["body"]):
            return None
        elems = int(np.prod(out.shape, dtype=np.int64))
        row = int(out.shape[-1])
        nrows = elems // max(row, 1)
        if nrows < team:
            return None
        rows = [(nrows * p // team, nrows * (p + 1) // team) for p in range(team)]
        return self._epilogue.row_blocks(kern, meta, elems, row, rows, out.dtype.itemsize)

    def wait(self, timeout: float | None = None) -> bool:
        return self._tools.wait_driver(timeout)


def _profiled(call, n: int):
    """`call` that records each native segment (the steps from `start` up to where it returned) as an event."""
    def run(prog_ptr, arg, ctl_ptr, start):
        t0 = _profiler.now_us()
        k = call(prog_ptr, arg, ctl_ptr, start)
        _profiler.record(f"native steps {start}-{min(k, n) - 1}", "native", t0, _profiler.now_us(), steps=k - start)
        return k
    return run


def _may_fail(node: Node) -> bool:
    """Whether a step can end a call with an error: index and value checks, integer division in a kernel, and
    ops that run from Python (not a kernel, GEMM, free view or library kernel)."""
    op = node.op
    if op == "fused":
        return any(m.op in ("div", "floordiv", "mod") and not m.dtype.is_floating_point
                   for m in node.attrs["body"])
    return op not in ("matmul",) and op not in _VIEW_OPS and op not in LIBRARY_OPS


def _permuted(loc: _Loc, perm: tuple, gemm: bool) -> _Loc | None:
    """`loc`'s memory holding its value laid out so that permuting it by `perm` gives a C-contiguous array; None
    when a GEMM could not write it as row-major C (its last dim would not have unit stride)."""
    shape = tuple(loc.shape)
    dense = _contiguous([shape[p] for p in perm], loc.dtype.itemsize)
    strides = [0] * len(shape)
    for k, p in enumerate(perm):
        strides[p] = dense[k]
    # A GEMM writes rows of C with unit stride only: C stored transposed would run as the swapped product
    # (B^T A^T), whose sums OpenBLAS rounds differently, and a step's bits must not depend on the plan (a
    # memory budget changes which values a permute reads).
    if gemm and (len(shape) < 2 or strides[-1] != loc.dtype.itemsize):
        return None
    return _Loc(loc.base, loc.off, shape, strides, loc.dtype)


def _is_product(node: Node, args, slot: int) -> bool:
    """Whether fused `node` computes only ``a * b`` of its two same-shaped arguments, one of them `slot`."""
    body = node.attrs.get("body")
    if body is None or len(args) != 2 or args.count(slot) != 1:
        return False
    ops = [m for m in body.topological_order() if m.op != "input"]
    ins = [m for m in body.topological_order() if m.op == "input"]
    return len(ops) == 1 and ops[0].op == "mul" and list(body.outputs) == ops and len(ins) == 2 and \
        set(ops[0].inputs) == set(ins) and all(tuple(m.shape) == tuple(node.shape) and m.dtype is node.dtype
                                               for m in ins)


def _kernels_read(view: _Loc, reads) -> bool:
    """Whether every kernel reading `view` walks it through strides as it would a contiguous array: a view
    that a kernel's movement chain would have to copy is better made once by a copy step."""
    for kern, j in reads:
        spec = getattr(kern, "spec", None)
        if spec is None:
            continue
        for lf in spec.leaves:
            if lf.input == j and _chain_copies(view, lf.chain) and \
                    not _chain_copies(_Loc(0, 0, view.shape, _contiguous(view.shape, view.dtype.itemsize),
                                           view.dtype), lf.chain):
                return False
    return True


def _chain_copies(loc: _Loc, chain) -> bool:
    """Whether NumPy copies when it applies the movement nodes `chain` to an array laid out as `loc`."""
    base = np.zeros(1, loc.dtype)
    array = np.lib.stride_tricks.as_strided(base, loc.shape, loc.strides)
    for m in chain:
        if m.op == "pad":
            return True
        try:
            array = _apply_view(m, array)
        except ValueError:  # A reshape that needs a copy.
            return True
        if array.size and not np.may_share_memory(array, base):
            return True
    return False


def _index_dtype(loc: _Loc) -> bool:
    return loc.dtype.kind == "i" and loc.dtype.itemsize in (4, 8)


def _same_region(x: _Loc, y: _Loc, size: int) -> bool:
    """Whether `x` and `y` are the same C-contiguous `size` elements of one object (a value written in place)."""
    return (x.base, x.off, x.dtype.itemsize) == (y.base, y.off, y.dtype.itemsize) and \
        all(_numel(v.shape) == size and v.strides == _contiguous(v.shape, v.dtype.itemsize)
            for v in (x, y))


def _numel(shape) -> int:
    """Elements of a shape (`math.prod`: a NumPy reduction costs more than the product of a few ints)."""
    return int(math.prod(shape))


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _extent(loc: _Loc) -> tuple[int, int]:
    lo = loc.off + sum((n - 1) * s for n, s in zip(loc.shape, loc.strides) if s < 0)
    hi = loc.off + sum((n - 1) * s for n, s in zip(loc.shape, loc.strides) if s > 0) + loc.dtype.itemsize
    return lo, hi


def build(exe) -> NativeProgram | None:
    """The native program for `exe`, or None (``LOOM_NATIVE=0``, no compiled kernels, or empty values)."""
    if not enabled() or os.environ.get("LOOM_CODEGEN", "1") == "0" or not exe.tools.native:
        return None
    for st in exe._steps:
        if 0 in st.node.shape:
            return None
    for n in exe._inputs:
        if 0 in n.shape:
            return None
    return NativeProgram(exe)
