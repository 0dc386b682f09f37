"""Run a compiled graph: fused nodes through generated kernels, matmul and conv2d through libraries, the rest
by reference.

An `Executable` is built once per optimised graph (and its memory plan) and
called many times. Everything decidable up front is decided at construction:
the schedule, each step's function, constant values, kernels (compiled in
the background; until they are ready their bodies run on the reference
path), and where every intermediate lives. Calls then validate the inputs,
run the steps and return the outputs.

Memory: with a `MemoryPlan` (``plan.offsets``, ``plan.arena_bytes``) every
placed intermediate is a view into one arena (reused across calls, one per
concurrent call); without one each intermediate gets its own array, freed
after its last use. Outputs always get fresh arrays, never arena views.

Native: unless ``LOOM_NATIVE=0``, the steps also become one native program
(`loom.runtime.native`) that C runs with one crossing per native segment;
calls go through it, and through the loop here only for inputs it hands back.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import numpy as np

from loom import dtypes as dt
from loom import profiler as _profiler
from loom.errors import DTypeError, GraphError, LoomError, ShapeError, fmt_shape
from loom.ir import ops
from loom.ir.graph import CONSTANT_OPS, Graph
from loom.ir.node import Node
from loom.runtime import native, reference, storage, threads, toolchain

_BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_CONV_OPS = frozenset({"conv2d", "conv2d_input_grad", "conv2d_weight_grad", "max_pool2d_index"})


class _Step:
    """One node's work: `run(args, out)` returns the value (written into `out` when given)."""

    __slots__ = ("node", "args", "out", "run", "free")

    def __init__(self, node: Node, args: list[int], out: int, run: Callable, free: list[int]):
        self.node = node
        self.args = args
        self.out = out
        self.run = run
        self.free = free


def _matmul(node: Node) -> Callable:
    a, b = node.inputs
    if a.dtype.np in _BLAS_DTYPES:
        macs = int(np.prod(node.shape, dtype=np.int64)) * int(a.shape[-1])

        def run(args, out):
            threads.prepare_blas(macs)
            if out is None:
                return np.matmul(args[0], args[1])
            np.matmul(args[0], args[1], out=out)  # OpenBLAS sgemm/dgemm.
            return out
        return run
    return _reference(node)


def _conv(node: Node, tools: toolchain.Toolchain) -> Callable:
    """A conv2d primitive (or an adjoint, or max_pool2d_index): through the native library, straight into `out`."""
    if node.inputs[0].dtype.np not in _BLAS_DTYPES or (node.op != "max_pool2d_index" and node.dtype.np != np.float32):
        return _reference(node)
    native = tools.conv()
    fallback = _reference(node)
    if native is None:
        return fallback
    op, attrs, shape = node.op, node.attrs, tuple(node.shape)

    def run(args, out):
        if op == "max_pool2d_index":
            done = native.max_pool2d_index(args[0], attrs, shape, out)
        else:
            done = native.run(op, args[0], args[1], attrs, out)
        return done if done is not None else fallback(args, out)
    return run


def _library(node: Node, tools: toolchain.Toolchain) -> Callable:
    """attention or a row op: the native library kernel the step driver runs, so every tier computes the same
    bits (the reference where the toolchain has none for the node or its layout)."""
    fallback = _reference(node)
    shape, npd = tuple(node.shape), node.dtype.np

    def run(args, out):
        dst = np.empty(shape, npd) if out is None else out
        return dst if tools.library_call(node, args, dst) else fallback(args, out)
    return run


def _reference(node: Node) -> Callable:
    def run(args, out):
        with np.errstate(all="ignore"):
            value = reference.evaluate(node, args)
        if out is None:
            return value
        np.copyto(out, value)
        return out
    return run


def _fused(node: Node, tools: toolchain.Toolchain, known: dict | None = None) -> tuple[Callable, Any]:
    body = node.attrs["body"]
    kernel = known.get(id(body)) if known else None
    if kernel is None:
        kernel = tools.kernel(body)
    if kernel is None:
        return _reference(node), None
    shape, npd = tuple(node.shape), node.dtype.np

    def run(args, out):
        if out is None:
            out = np.empty(shape, npd)
        kernel.run(args, out)
        return out
    return run, kernel


class Executable:
    """A graph made ready to run many times.

    Parameters
    ----------
    graph : loom.ir.Graph
        Its nodes are primitives and ``fused`` nodes (from the compiler's
        fuse pass). It is not modified.
    plan : loom.compiler.MemoryPlan, optional
        Arena offsets for intermediates; None gives each its own array.
    tools : loom.runtime.toolchain.Toolchain, optional
        Where kernels for fused nodes, native convolution and the step
        driver come from; `loom.compiler.compile` passes the code
        generator's. Default: the registered one (`toolchain.current()`).
    verify : bool
        Check the graph's invariants first (default). The compiler passes
        False for the output of its own pipeline.
    like : Executable, optional
        An executable of the same tools whose graph shares fused bodies
        with `graph` (the same body objects: a batch-size specialisation
        re-specialised from it); those bodies take its kernels as they are.

    Examples
    --------
    >>> import numpy as np, loom
    >>> from loom.runtime.executor import Executable
    >>> g = loom.ir.Graph()
    >>> a, b = g.add_input((2, 3), "float32"), g.add_input((3, 2), "float32")
    >>> g.outputs = [g.add_node("exp", [g.add_node("matmul", [a, b])])]
    >>> run = Executable(g)
    >>> run(np.zeros((2, 3), np.float32), np.ones((3, 2), np.float32))[0].tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """

    def __init__(self, graph: Graph, plan=None, tools: toolchain.Toolchain | None = None, *, verify: bool = True,
                 like: Executable | None = None):
        if not isinstance(graph, Graph):
            raise LoomError(f"loom.Executable: expected a loom.ir.Graph, got {type(graph).__name__}")
        if verify:  # The compiler's pipeline checked its input and (under LOOM_VERIFY_PASSES) every pass.
            graph.verify()
        self.graph = graph
        self.plan = plan
        self.tools = tools if tools is not None else toolchain.current()
        order = graph.topological_order()
        self._inputs = list(graph.inputs)
        self._specs = [(tuple(n.shape), n.dtype.np) for n in self._inputs]
        outputs = list(graph.outputs)
        slot: dict[Node, int] = {}
        for n in self._inputs:
            slot[n] = len(slot)
        self._consts: list[tuple[int, np.ndarray]] = []
        self.kernels = []
        known = like._body_kernels if like is not None and like.tools is self.tools else None
        self._body_kernels: dict[int, Any] = {}  # id(fused body) -> its kernel (bodies live with the graph).
        steps: list[_Step] = []
        for n in order:
            if n in slot:
                continue
            if n.op == "input":
                raise GraphError(f"loom.Executable: placeholder %{n.id} is not listed in graph.inputs")
            slot[n] = len(slot)
            if n.op in CONSTANT_OPS:
                value = n.buffer if n.op == "buffer" else reference.evaluate(n, [])
                value = np.array(value)  # A private, contiguous copy: read-only for the graph's life.
                value.flags.writeable = False
                self._consts.append((slot[n], value))
                continue
            if n.op == "fused":
                fn, kernel = _fused(n, self.tools, known)
                if kernel is not None:
                    self.kernels.append(kernel)
                    self._body_kernels[id(n.attrs["body"])] = kernel
            elif n.op == "matmul":
                fn = _matmul(n)
            elif n.op in _CONV_OPS:
                fn = _conv(n, self.tools)
            elif n.op == "storage":
                fn = storage.step(n)  # Disk tier: offload, prefetch, reload straight into the arena.
            elif n.op in native.LIBRARY_OPS:
                fn = _library(n, self.tools)
            elif n.op in ops.PRIMITIVES:
                fn = _reference(n)
            else:
                raise GraphError(f"loom.Executable: unknown op {n.op!r}")
            steps.append(_Step(n, [slot[i] for i in n.inputs], slot[n], fn, []))
        self._n_slots = len(slot)
        self._out_slots = [slot[o] for o in outputs]
        self._outputs = outputs
        # Free each intermediate after its last reader (only matters without a plan).
        last: dict[int, int] = {}
        for k, st in enumerate(steps):
            for a in st.args:
                last[a] = k
        keep = set(self._out_slots) | {s for s, _ in self._consts} | set(range(len(self._inputs)))
        for s, k in last.items():
            if s not in keep:
                steps[k].free.append(s)
        self._steps = steps
        # Where each step writes: an arena view (plan), a fresh output array, or wherever it likes.
        self._placed: dict[int, Node] = {}
        if plan is not None:
            offsets = getattr(plan, "offsets", {})
            for st in steps:
                if st.node in offsets and st.out not in self._out_slots:
                    self._placed[st.out] = st.node
        self._arena_bytes = int(getattr(plan, "arena_bytes", 0) or 0) if plan is not None else 0
        self._arenas: list[tuple[np.ndarray, dict[int, np.ndarray]]] = []
        self._lock = threading.Lock()
        self._native = native.build(self)  # The steps as one native program (None: LOOM_NATIVE=0).

    def share_arenas(self, pool) -> None:
        """Run the native program's calls on arenas from `pool` (a `native.ArenaPool` shared with other
        executables of one owner, such as the batch-size specialisations of a traced function)."""
        if self._native is not None:
            self._native.share_arenas(pool)

    # ------------------------------------------------------------ memory
    def _acquire(self) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        with self._lock:
            if self._arenas:
                return self._arenas.pop()
        arena = np.empty(max(self._arena_bytes, 1), np.uint8)
        views = {}
        for s, node in self._placed.items():
            views[s] = self._view(arena, node)
        return arena, views

    def _view(self, arena: np.ndarray, node: Node) -> np.ndarray:
        off = int(self.plan.offsets[node])
        size = int(np.prod(node.shape, dtype=np.int64)) * node.dtype.np.itemsize
        if off < 0 or off + size > arena.nbytes or off % node.dtype.np.itemsize:
            raise LoomError(f"loom.Executable: the memory plan puts %{node.id} ({size} B) at offset {off}, "
                            f"outside the {arena.nbytes} B arena or misaligned")
        return arena[off:off + size].view(node.dtype.np).reshape(node.shape)

    def _release(self, arena) -> None:
        with self._lock:
            self._arenas.append(arena)

    # ------------------------------------------------------------ running
    def check_inputs(self, values) -> list[np.ndarray]:
        """The input arrays, each checked against its placeholder; raises before anything runs."""
        if len(values) != len(self._inputs):
            raise LoomError(f"loom.Executable: the graph takes {len(self._inputs)} inputs "
                            f"({', '.join(_desc(n) for n in self._inputs) or 'none'}), got {len(values)}")
        arrays = []
        for k, (node, (shape, want), v) in enumerate(zip(self._inputs, self._specs, values)):
            if type(v) is np.ndarray and v.dtype == want and v.shape == shape:
                arrays.append(v)
                continue
            if not isinstance(v, np.ndarray):
                try:
                    v = np.asarray(v, want) if node.dtype is not dt.bfloat16 else dt.f32_to_bf16(
                        np.asarray(v, np.float32))
                except (TypeError, ValueError) as e:
                    raise LoomError(f"loom.Executable: input {k} expects {_desc(node)}: {e}") from None
            if v.dtype != want:
                raise DTypeError(f"loom.Executable: input {k} expects {_desc(node)}, got an array of "
                                 f"{v.dtype}{fmt_shape(v.shape)}")
            if v.shape != shape:
                raise ShapeError(f"loom.Executable: input {k} expects {_desc(node)}, got shape "
                                 f"{fmt_shape(v.shape)}")
            arrays.append(v)
        return arrays

    def __call__(self, *values) -> tuple[np.ndarray, ...]:
        return self.run_checked(self.check_inputs(values))

    def donatable(self, pairs: list[tuple[int, int]]) -> dict[int, int]:
        """Outputs that `run_checked` may write into memory the caller gives (`NativeProgram.donatable`);
        none without a native program."""
        return self._native.donatable(pairs) if self._native is not None else {}

    def run_checked(self, arrays: list[np.ndarray], into: list | None = None,
                    fresh: int = 0) -> tuple[np.ndarray, ...]:
        """A call on arrays that already match the inputs (as `check_inputs` gives them): a traced function's
        replay, which checked them itself. `into`: memory for outputs `donatable` allowed; the native program
        writes there (the executor's own loop, when it serves instead, gives fresh arrays). The last `fresh`
        arrays are C-contiguous and aligned, made by NumPy for this call."""
        if self._native is not None:
            native_results = self._native(arrays, into, fresh)
            if native_results is not None:
                return native_results
        env: list[Any] = [None] * self._n_slots
        env[:len(arrays)] = arrays
        for s, value in self._consts:
            env[s] = value
        out_set = self._out_slots
        fresh: dict[int, np.ndarray] = {}
        arena = None
        if self._placed:
            arena, views = self._acquire()
        try:
            for st in self._steps:
                if st.out in self._placed:
                    dst = views[st.out]
                elif st.out in out_set:
                    dst = fresh[st.out] = np.empty(st.node.shape, st.node.dtype.np)
                else:
                    dst = None
                if _profiler.ACTIVE is None:
                    env[st.out] = st.run([env[a] for a in st.args], dst)
                else:
                    t0 = _profiler.now_us()
                    env[st.out] = st.run([env[a] for a in st.args], dst)
                    _profiler.record(_step_name(st.node), _STEP_CATEGORY.get(st.node.op, "op"), t0,
                                     _profiler.now_us(), shape=tuple(st.node.shape))
                for s in st.free:
                    env[s] = None
            results = []
            for s in out_set:
                value = env[s]
                if s not in fresh or value is not fresh[s]:
                    value = np.array(value)  # Inputs, constants, or a value that may alias them.
                results.append(value)
            return tuple(results)
        finally:
            if arena is not None:
                self._release((arena, views))

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every kernel has finished building; True if all compiled."""
        built = all([k.wait(timeout) for k in self.kernels])
        return (self._native.wait(timeout) if self._native is not None else True) and built

    def __repr__(self) -> str:
        ready = sum(k.ready for k in self.kernels)
        where = f"{self._native.segments()} native segments" if self._native is not None else "native off"
        return (f"<loom.Executable: {len(self._steps)} steps, {len(self.kernels)} kernels ({ready} compiled), "
                f"{where}, arena {self._arena_bytes} B>")


_STEP_CATEGORY = {"fused": "kernel", "matmul": "gemm"}


def _step_name(node: Node) -> str:
    """A step's name in profiles: the op, or for a fused kernel the ops of its body."""
    if node.op != "fused":
        return node.op
    body = node.attrs.get("body")
    ops_ = [n.op for n in body.topological_order() if n.op != "input"] if body is not None else []
    return "fused[" + ",".join(ops_[:6]) + (",..." if len(ops_) > 6 else "") + "]"


def _desc(node: Node) -> str:
    return f"{node.dtype.name}{fmt_shape(node.shape)}"


_RUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def run_graph(graph: Graph, *inputs, plan=None) -> tuple[np.ndarray, ...]:
    """Run `graph` on NumPy inputs through an `Executable` (built once per graph and kept while it lives).

    Examples
    --------
    >>> import numpy as np, loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((3,), "float32")
    >>> g.outputs = [g.add_node("neg", [x])]
    >>> run_graph(g, np.array([1, 2, 3], np.float32))[0].tolist()
    [-1.0, -2.0, -3.0]
    """
    exe = _RUNS.get(graph)
    if exe is None or exe.plan is not plan:
        exe = _RUNS[graph] = Executable(graph, plan)
    return exe(*inputs)
