"""A compiled fused kernel: checks its arguments, packs them and calls the C code (or the reference path)."""
from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from loom.errors import DTypeError, LoomError, ShapeError, fmt_shape
from loom.ir import ops
from loom.ir.graph import Graph
from loom.runtime import reference, threads

from .c import KernelSpec, bcast_masks

PAR_MIN_DEFAULT = 32768  # Loop iterations below which a kernel runs on one thread (no OpenMP start-up).


def par_min() -> int:
    """Work (loop iterations) from which kernels use ``loom.get_num_threads()`` threads (``LOOM_PAR_MIN``)."""
    try:
        return max(1, int(os.environ.get("LOOM_PAR_MIN", PAR_MIN_DEFAULT)))
    except ValueError:
        return PAR_MIN_DEFAULT


def run_reference(body: Graph, arrays: list[np.ndarray]) -> np.ndarray:
    """Evaluate `body` on the NumPy reference interpreter (the semantics every kernel matches)."""
    return reference.run_subgraph(body, arrays)


def apply_chain(array: np.ndarray, chain) -> tuple[np.ndarray, bool]:
    """Apply movement nodes (bottom first) with NumPy; also say whether a copy was made."""
    copied = array.size == 0
    for m in chain:
        new = np.asarray(ops.PRIMITIVES[m.op].impl(array, m.attrs))
        if m.op == "pad" or (new.size and not np.may_share_memory(new, array)):
            copied = True
        array = new
    return array, copied


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _collapse(sizes: np.ndarray, M: np.ndarray, cols: range) -> None:
    """Merge adjacent loop dims in `cols` that every operand walks as one (in place, rank kept).

    M has one row per operand (strides or guard coefficients over the loop
    dims). Dims of size 1 move to the front of the group with zero strides.
    """
    if len(cols) < 2 or np.any(sizes[list(cols)] == 0):
        return
    merged: list[tuple[int, np.ndarray]] = []
    for c in cols:
        n = int(sizes[c])
        if n == 1:
            continue
        if merged and np.array_equal(merged[-1][1], M[:, c] * n):
            merged[-1] = (merged[-1][0] * n, M[:, c].copy())
        else:
            merged.append((n, M[:, c].copy()))
    lo, hi = cols[0], cols[-1] + 1
    pad = (hi - lo) - len(merged)
    for j, c in enumerate(range(lo, hi)):
        if j < pad:
            sizes[c] = 1
            M[:, c] = 0
        else:
            sizes[c], M[:, c] = merged[j - pad]


class _Plan:
    """Arguments for one layout (strides) of the inputs and output, reused while the layout repeats."""

    __slots__ = ("meta", "meta_ptr", "copies")

    def __init__(self, meta, copies):
        self.meta = meta                # None: strides that are not whole elements (copies are used).
        self.meta_ptr = meta.ctypes.data if meta is not None else None
        self.copies = copies            # (input, movement chain) of leaves NumPy had to copy, per call.


class Kernel:
    """One fused body, callable on NumPy arrays: ``kernel(inputs, out)`` writes the body's result into `out`.

    Until its shared object is built (in the background unless
    ``LOOM_CODEGEN_SYNC=1``) and whenever the body cannot be compiled, calls
    run the body on the NumPy reference path; both paths give the same result.

    Attributes
    ----------
    key : str or None
        The cache key (hash of the source, flags and compiler); None when the
        body is not compiled.
    source : str or None
        The generated C.
    ready : bool
        Whether calls run the compiled code.
    fallback_reason : str or None
        Why the body runs on the reference path for good (None if it compiles).

    Examples
    --------
    >>> import numpy as np, loom
    >>> from loom.codegen import get_kernel
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((2, 3), loom.float32)
    >>> g.outputs = [g.add_node("sum", [g.add_node("exp", [x])], {"axes": (1,), "keepdim": False})]
    >>> k = get_kernel(g)
    >>> out = np.empty(2, np.float32)
    >>> k([np.zeros((2, 3), np.float32)], out)
    >>> out.tolist()
    [3.0, 3.0]
    """

    def __init__(self, body: Graph, spec: KernelSpec | None, lib, reason: str | None = None):
        self.body = body
        self.spec = spec
        self._lib = lib
        self.fallback_reason = reason
        self._params = [(tuple(p.shape), p.dtype) for p in body.inputs]
        out = body.outputs[0]
        self._out = (tuple(out.shape), out.dtype)
        self._plans: dict[tuple, _Plan] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ state
    @property
    def key(self) -> str | None:
        return self._lib.key if self._lib is not None else None

    @property
    def source(self) -> str | None:
        return self.spec.source if self.spec is not None else None

    @property
    def ready(self) -> bool:
        return self._lib is not None and self._lib.ready

    @property
    def failed(self) -> bool:
        """True when the build failed (the kernel stays on the reference path)."""
        return self._lib is not None and self._lib.state == "failed"

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the build finishes (or `timeout` seconds pass); return `ready`."""
        if self._lib is not None:
            self._lib.done.wait(timeout)
        return self.ready

    def __repr__(self) -> str:
        state = ("ready" if self.ready else "failed" if self.failed else "compiling") if self._lib else \
            f"reference ({self.fallback_reason})"
        return f"<loom.codegen.Kernel {self.key[:12] if self.key else '-'} {state}>"

    # ------------------------------------------------------------ calling
    def check(self, inputs, out) -> None:
        """Raise a loom error unless `inputs` and `out` are arrays of exactly the body's shapes and dtypes."""
        if len(inputs) != len(self._params):
            raise LoomError(f"loom.kernel: the body takes {len(self._params)} inputs, got {len(inputs)}")
        for k, (a, (shape, d)) in enumerate(zip(inputs, self._params)):
            if not isinstance(a, np.ndarray):
                raise LoomError(f"loom.kernel: input {k} must be a NumPy array, got {type(a).__name__}")
            if a.dtype != d.np:
                raise DTypeError(f"loom.kernel: input {k} must be {d.name} (stored as {d.np}), got {a.dtype}")
            if a.shape != shape:
                raise ShapeError(f"loom.kernel: input {k} must have shape {fmt_shape(shape)}, got "
                                 f"{fmt_shape(a.shape)}")
        shape, d = self._out
        if not isinstance(out, np.ndarray) or out.dtype != d.np or out.shape != shape:
            got = f"{out.dtype}{fmt_shape(out.shape)}" if isinstance(out, np.ndarray) else type(out).__name__
            raise LoomError(f"loom.kernel: out must be a {d.np}{fmt_shape(shape)} array, got {got}")
        if not out.flags.writeable:
            raise LoomError("loom.kernel: out is read-only")

    def __call__(self, inputs, out: np.ndarray) -> None:
        inputs = list(inputs)
        self.check(inputs, out)
        self.run(inputs, out)

    def run(self, inputs: list[np.ndarray], out: np.ndarray) -> None:
        """`__call__` without the argument checks, for callers that produced the arrays themselves."""
        lib = self._lib
        if lib is None or lib.state != "ready":
            np.copyto(out, run_reference(self.body, inputs))
            return
        plan = self.plan(inputs, out)
        if plan.meta is None:  # Strides that are not whole elements: work on copies.
            self._run_copied(inputs, out)
            return
        objs = (out, *inputs)
        if plan.copies:
            objs += tuple(apply_chain(inputs[k], chain)[0] for k, chain in plan.copies)
        rc = lib.call(objs, plan.meta_ptr, threads.get_num_threads())
        if rc > 0:
            # An integer division met a zero divisor: the reference path raises the same error.
            np.copyto(out, run_reference(self.body, inputs))
        elif rc < 0:  # -1: out overlaps an input; -2: misaligned data.
            self._run_copied(inputs, out)

    def _run_copied(self, inputs: list[np.ndarray], out: np.ndarray) -> None:
        arrays = [a if _usable(a) else np.array(a, copy=True) for a in inputs]
        tmp = np.empty(out.shape, out.dtype)
        self.run(arrays, tmp)
        np.copyto(out, tmp)

    # ------------------------------------------------------------ argument planning
    def plan(self, arrays: list[np.ndarray], out: np.ndarray) -> _Plan:
        """The call arguments for these strides (shapes are the body's), planned once per layout."""
        key = (out.strides, *[a.strides for a in arrays])
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(arrays, out)
            with self._lock:
                self._plans[key] = plan
        return plan

    def _plan(self, arrays: list[np.ndarray], out: np.ndarray) -> _Plan:
        spec = self.spec
        if not all(_whole_strides(a) for a in arrays + [out]):
            return _Plan(None, [])
        NO, L = spec.n_o, spec.n_o + spec.n_r
        sizes = np.array(spec.loop_sizes, np.int64)
        views: dict = {}
        copies: list = []
        rows, offsets, slots = [], [], []
        for lf in spec.leaves:
            ck = (lf.input, lf.chain)
            if ck not in views:
                V, copied = apply_chain(arrays[lf.input], lf.chain)
                if copied:
                    copies.append(ck)
                    views[ck] = (V, (len(arrays) + len(copies), 0))
                else:
                    views[ck] = (V, (1 + lf.input, _ptr(V) - _ptr(arrays[lf.input])))
            V, slot = views[ck]
            s = np.array(V.strides, np.int64) // V.itemsize
            rows.append(s @ lf.A if V.ndim else np.zeros(L, np.int64))
            offsets.append(int(s @ lf.b) if V.ndim else 0)
            slots.append(slot)
        osv = np.zeros(L, np.int64)
        if out.ndim:
            osv[:NO] = np.array(out.strides, np.int64) // out.itemsize
        grows, gbase, gsize = [], [], []
        for g in spec.guards:
            for r in range(len(g.sizes)):
                if g.padded and not g.padded[r]:  # Always in range: no test (gn -1), and it merges with any dim.
                    grows.append(np.zeros(L, np.int64))
                    gbase.append(0)
                    gsize.append(-1)
                    continue
                grows.append(g.A[r])
                gbase.append(int(g.b[r]))
                gsize.append(int(g.sizes[r]))
        M = np.array(rows + [osv] + grows, np.int64).reshape(-1, L)
        _collapse(sizes, M, range(0, NO))
        _collapse(sizes, M, range(NO, L))
        nl = len(spec.leaves)
        LS, OS, GC = M[:nl], M[nl], M[nl + 1:]

        def classify(phase: str, col: int) -> tuple[bool, int]:
            fast, bm = True, 0
            for k, lf in enumerate(spec.leaves):
                if lf.phase != phase:
                    continue
                st = LS[k, col]
                if st == 1:
                    continue
                if st == 0 and lf.slot >= 0:
                    bm |= 1 << lf.slot
                    continue
                fast = False
            slots = sum(1 for lf in spec.leaves if lf.phase == phase and lf.slot >= 0)
            return fast and bm in bcast_masks(slots), bm

        fast_post, bm_post = classify("post", NO - 1)
        fast_post = fast_post and OS[NO - 1] == 1
        fast_a, bm_a = classify("pre", L - 1)
        fast_b, bm_b = classify("pre", NO - 1)
        mode = 0
        if spec.accs and fast_b and sizes[NO - 1] >= 4 and (not fast_a or sizes[L - 1] < 16):
            mode = 1
        if spec.row and sizes[NO - 1] > 1:
            # Rows: valid when nothing the reduction reads moves with the innermost output index.
            pre_leaves = [k for k, lf in enumerate(spec.leaves) if lf.phase == "pre"]
            pre_rows = [i for g in spec.guards if g.phase == "pre"
                        for i in range(g.first_dim, g.first_dim + len(g.sizes))]
            if not LS[pre_leaves, NO - 1].any() and not GC[pre_rows, NO - 1].any():
                mode = 2
        fields = {"par_min": [par_min()], "mode": [mode], "fast_a": [int(fast_a)], "bm_a": [bm_a],
                  "fast_b": [int(fast_b)], "bm_b": [bm_b], "fast_post": [int(fast_post)], "bm_post": [bm_post],
                  "n": sizes, "lo": offsets, "ls": LS.reshape(-1), "os": OS[:NO], "gn": gsize, "gb": gbase,
                  "gc": GC.reshape(-1), "cb": spec.consts}
        lay = spec.layout
        kmeta = np.zeros(lay.size, np.int64)
        for name, (pos, _) in lay.offsets().items():
            vals = np.asarray(fields[name], np.int64).reshape(-1)
            kmeta[pos:pos + len(vals)] = vals
        # Per object (out, inputs, copies): byte extent around its data pointer, whether every leaf reading
        # it reads exactly the element written at the same place (so out may be that input), alignment.
        info = [_extent(out) + (0, out.dtype.alignment)]
        for k, a in enumerate(arrays):
            mine = [j for j, lf in enumerate(spec.leaves) if lf.input == k]
            same = not spec.accs and all(slots[j] == (1 + k, 0) and offsets[j] == 0 and np.array_equal(LS[j], OS)
                                         and spec.leaves[j].dtype.np.itemsize == out.itemsize for j in mine)
            info.append(_extent(a) + (int(same), a.dtype.alignment))
        info += [(0, 0, 0, 1)] * len(copies)
        item_off, data_off = _ABI or (0, 0)
        slots = [(0, 0)] + slots  # Pointer 0 is the output.
        head = [item_off, data_off, len(slots), len(info)] + [v for sl in slots for v in sl]
        meta = np.concatenate([np.array(head, np.int64), np.array(info, np.int64).reshape(-1), kmeta])
        return _Plan(meta, copies)


def _extent(a: np.ndarray) -> tuple[int, int]:
    """Bytes [lo, hi) around the data pointer that `a` can touch."""
    if a.size == 0:
        return (0, 0)
    lo = sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s > 0) + a.itemsize
    return (int(lo), int(hi))


def _whole_strides(a: np.ndarray) -> bool:
    return all(s % a.itemsize == 0 for s in a.strides)


def _abi_offsets() -> tuple[int, int] | None:
    """Offsets of a tuple's items and an ndarray's data pointer in their C structs, if they check out."""
    item_off, data_off = tuple.__basicsize__, object.__basicsize__
    a = np.zeros(3)
    t = (a,)
    try:
        ok = (ctypes.c_void_p.from_address(id(t) + item_off).value == id(a)
              and ctypes.c_void_p.from_address(id(a) + data_off).value == _ptr(a))
    except (ValueError, OSError):
        ok = False
    return (item_off, data_off) if ok else None


_ABI = _abi_offsets()


def make_call(lib: ctypes.CDLL):
    """The Python callable for a kernel library's ``loom_call(objects, meta, threads) -> int32``."""
    if _ABI is not None:
        proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.py_object, ctypes.c_void_p, ctypes.c_int64)
        return proto(("loom_call", lib))
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    fn = proto(("loom_call", lib))

    def call(objs, meta_ptr, nthreads):  # Portable path: a table of data pointers stands in for the tuple.
        cells = np.array([_ptr(a) for a in objs], np.uintp)
        refs = cells.ctypes.data + cells.itemsize * np.arange(len(objs), dtype=np.uintp)
        return fn(refs.ctypes.data, meta_ptr, nthreads)
    return call


def _usable(a: np.ndarray) -> bool:
    """Aligned, with strides in whole elements: the layout the C code indexes."""
    return a.flags.aligned and _whole_strides(a)
