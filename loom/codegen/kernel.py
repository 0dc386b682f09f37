"""A compiled fused kernel: checks its arguments, packs them and calls the C code (or the reference path)."""
from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from loom.errors import DTypeError, LoomError, ShapeError, fmt_shape
from loom.ir import ops
from loom.ir.graph import Graph
from loom.ir.node import Node
from loom.runtime import reference

from .c import KernelSpec

PAR_MIN_DEFAULT = 32768  # Loop iterations below which a kernel runs on one thread (no OpenMP start-up).


def par_min() -> int:
    """Work (loop iterations) from which kernels use all OpenMP threads (``LOOM_PAR_MIN``)."""
    try:
        return max(1, int(os.environ.get("LOOM_PAR_MIN", PAR_MIN_DEFAULT)))
    except ValueError:
        return PAR_MIN_DEFAULT


def run_reference(body: Graph, arrays: list[np.ndarray]) -> np.ndarray:
    """Evaluate `body` on the NumPy reference interpreter (the semantics every kernel matches)."""
    env: dict[Node, np.ndarray] = dict(zip(body.inputs, arrays))
    with np.errstate(all="ignore"):
        for node in body.topological_order():
            if node not in env:
                env[node] = node.buffer if node.op == "buffer" else reference.evaluate(
                    node, [env[i] for i in node.inputs])
    return env[body.outputs[0]]


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
    """Arguments for one layout of the inputs and output (strides), reused while the layout repeats."""

    __slots__ = ("meta", "meta_ptr", "sources", "out_rows", "identity")

    def __init__(self, meta, sources, out_rows, identity):
        self.meta = meta
        self.meta_ptr = meta.ctypes.data
        self.sources = sources          # Per leaf: (input, byte delta) for a view, (input, chain) for a copy.
        self.out_rows = out_rows
        self.identity = identity        # Inputs every leaf of which reads exactly the element written.


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
        if not self.ready:
            np.copyto(out, run_reference(self.body, inputs))
            return
        arrays = [a if _usable(a) else np.ascontiguousarray(a) for a in inputs]
        target = out if _usable(out) else np.empty(out.shape, out.dtype)
        sig = tuple(a.strides for a in arrays) + (target.strides,)
        plan = self._plans.get(sig)
        if plan is None:
            plan = self._plan(arrays, target)
            with self._lock:
                self._plans[sig] = plan
        if target is out:
            for k, a in enumerate(arrays):
                if a.size and np.may_share_memory(a, out) and not (k in plan.identity and _ptr(a) == _ptr(out)):
                    target = np.empty(out.shape, out.dtype)  # Overlap that is not element-for-element.
                    break
        ptrs = [_ptr(target)]
        views: dict = {}
        for src in plan.sources:
            k, what = src
            if isinstance(what, int):
                ptrs.append(_ptr(arrays[k]) + what)
            else:
                v = views.get((k, what))
                if v is None:
                    v = views[(k, what)] = apply_chain(arrays[k], what)[0]
                ptrs.append(_ptr(v))
        err = ctypes.c_int32(0)
        self._lib.fn((ctypes.c_void_p * len(ptrs))(*ptrs), plan.meta_ptr, ctypes.byref(err))
        if err.value:
            # An integer division met a zero divisor: the reference path raises the same error.
            np.copyto(out, run_reference(self.body, inputs))
            return
        if target is not out:
            np.copyto(out, target)

    # ------------------------------------------------------------ argument planning
    def _plan(self, arrays: list[np.ndarray], out: np.ndarray) -> _Plan:
        spec = self.spec
        lay = spec.layout
        NO, L = spec.n_o, spec.n_o + spec.n_r
        sizes = np.array(spec.loop_sizes, np.int64)
        views: dict = {}
        rows, offsets, sources = [], [], []
        for lf in spec.leaves:
            ck = (lf.input, lf.chain)
            if ck not in views:
                views[ck] = apply_chain(arrays[lf.input], lf.chain)
            V, copied = views[ck]
            s = np.array(V.strides, np.int64) // V.itemsize
            rows.append(s @ lf.A if V.ndim else np.zeros(L, np.int64))
            offsets.append(int(s @ lf.b) if V.ndim else 0)
            sources.append((lf.input, lf.chain) if copied else (lf.input, _ptr(V) - _ptr(arrays[lf.input])))
        osv = np.zeros(L, np.int64)
        if out.ndim:
            osv[:NO] = np.array(out.strides, np.int64) // out.itemsize
        grows, gbase, gsize = [], [], []
        for g in spec.guards:
            for r in range(len(g.sizes)):
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
            return fast, bm

        fast_post, bm_post = classify("post", NO - 1)
        fast_post = fast_post and OS[NO - 1] == 1
        fast_a, bm_a = classify("pre", L - 1)
        fast_b, bm_b = classify("pre", NO - 1)
        mode = 0
        if spec.accs and fast_b and sizes[NO - 1] >= 4 and (not fast_a or sizes[L - 1] < 16):
            mode = 1
        fields = {"par_min": [par_min()], "mode": [mode], "fast_a": [int(fast_a)], "bm_a": [bm_a],
                  "fast_b": [int(fast_b)], "bm_b": [bm_b], "fast_post": [int(fast_post)], "bm_post": [bm_post],
                  "n": sizes, "lo": offsets, "ls": LS.reshape(-1), "os": OS[:NO], "gn": gsize, "gb": gbase,
                  "gc": GC.reshape(-1), "cb": spec.consts}
        meta = np.zeros(lay.size, np.int64)
        for name, (pos, _) in lay.offsets().items():
            vals = np.asarray(fields[name], np.int64).reshape(-1)
            meta[pos:pos + len(vals)] = vals
        identity = set()
        if not spec.accs:
            for k in range(len(arrays)):
                mine = [j for j, lf in enumerate(spec.leaves) if lf.input == k]
                if all(isinstance(sources[j][1], int) and sources[j][1] == 0 and offsets[j] == 0
                       and spec.leaves[j].dtype.np.itemsize == out.itemsize and np.array_equal(LS[j], OS)
                       for j in mine):
                    identity.add(k)
        return _Plan(meta, sources, OS, identity)


def _usable(a: np.ndarray) -> bool:
    """Aligned, with strides in whole elements: the layout the C code indexes."""
    return a.flags.aligned and all(s % a.itemsize == 0 for s in a.strides)
