"""`loom.function` (alias `loom.jit`): trace a Python step into one graph, compile it once, replay it.

Tracing needs no special tensors: loom is lazy, so running the function on
placeholder inputs records every op — forward, `loss.backward()` and
`optimizer.step()` alike — as pending nodes. The trace then collects what the
function returned and what it changed (tensors updated in place, `.grad`
attributes), turns the nodes between them and the placeholders into one
`loom.ir.Graph`, compiles that graph through the pass pipeline, and on later
calls only feeds the new inputs to the compiled graph and writes the results
back: no per-op Python work.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import operator
import sys
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from loom import _structure
from loom import dtypes as dt
from loom.alias import live_views, rederive_all
from loom.functional import library_ops as _library_ops
from loom.autograd.grad_mode import is_grad_enabled, no_grad
from loom.errors import LoomError, LoomValueError, fmt_shape
from loom import profiler as _profiler
from loom.ir.graph import Graph, _canon_attrs
from loom.ir.node import Node
from loom.ir.ops import PRIMITIVES
from loom.runtime import realize as _realize
from loom.runtime import reference
from loom.runtime.native import ArenaPool
from loom.tensor import Tensor, apply, default_generator

if TYPE_CHECKING:
    from loom.compiler.partition import StageTag


def _undo_trace_effects(tr) -> None:
    """Give tensors the trace mutated (and .grads it set) their values from before the trace."""
    for t, old in tr.mutated.values():
        t._node = old
        if t._views:
            rederive_all(t)  # Aliases derived from traced values take the real one again.
    for t, prev in tr.grads.values():
        t._grad = prev


class _Trace:
    """Bookkeeping while a function is traced (installed as `loom.runtime.realize.active_trace`)."""

    def __init__(self) -> None:
        probe = Node("const", (), {}, (), dt.float32)
        self.start_id = probe.id  # Nodes with smaller ids existed before the trace.
        self.external: dict[int, tuple[Node, Any]] = {}   # node id -> (node, weakref to its tensor)
        self.mutated: dict[int, tuple[Tensor, Node]] = {}  # id(tensor) -> (tensor, node before)
        self.grads: dict[int, tuple] = {}                  # id(tensor) -> (tensor, .grad before)
        self.grad_reads: set[int] = set()                  # ids of tensors whose entry .grad matters
        self.scalars: list[tuple[Node, Callable[[], Any]]] = []
        self.guards: list[tuple[Callable[[], Any], Any]] = []
        # (first node id, end node id, stage, visit), inner first: the forward nodes of each `loom.stage` block;
        # the visit counts the blocks of that stage before it (micro-batch v of a loop over micro-batches).
        self.stages: list[tuple[int, int, int, int]] = []
        self.backward: list[tuple[int, int, int, int]] = []   # The same for the backward of each staged op.
        self.structures: dict[int, Any] = {}  # Modules and optimizers the step went through (`loom._structure`).
        self.loop_part: str | None = None  # "body"/"condition" while a traced while_loop's part is traced.
        # (first node id, end node id) of each recomputation a checkpointed segment's backward traced.
        self.recomputed: list[tuple[int, int]] = []

    @contextlib.contextmanager
    def recomputing(self) -> Iterator[None]:
        """Mark the nodes traced inside as a recomputation (`loom.utils.checkpoint`), kept apart from the forward's."""
        lo = _next_node_id()
        try:
            yield
        finally:
            self.recomputed.append((lo, _next_node_id()))

    def recompute_groups(self, node_map: dict[int, Node]) -> dict[Node, int]:
        """Graph node -> the recomputation (1, 2, ...) that traced it, for ``graph.meta["recompute"]``."""
        groups: dict[Node, int] = {}
        if self.recomputed:
            for traced, new in node_map.items():
                for k, (lo, hi) in enumerate(self.recomputed):
                    if lo <= traced < hi and new.op not in ("input", "const", "buffer"):
                        groups[new] = k + 1
                        break
        return groups

    def stage_of(self, node_id: int) -> "StageTag | None":
        """The stage (and visit, and whether it is backward) of a traced node, or None if unmarked."""
        from loom.compiler.partition import StageTag
        for lo, hi, k, v in self.backward:   # First: a backward run inside a later stage's block is still its own.
            if lo <= node_id < hi:
                return StageTag(k, True, v)
        for lo, hi, k, v in self.stages:
            if lo <= node_id < hi:
                return StageTag(k, False, v)
        return None

    def on_backward(self, t: Tensor) -> Callable[[], None] | None:
        """Called by autograd before it runs the backward rule of `t`'s op; the returned call closes its nodes."""
        node_id = t._node.id
        where = next(((k, v) for lo, hi, k, v in self.stages if lo <= node_id < hi), None)
        if where is None:
            return None
        lo = _next_node_id()

        def done() -> None:
            self.backward.append((lo, _next_node_id()) + where)
        return done

    def on_read(self, inputs) -> None:
        """Bind values from before the trace to the variables that hold them."""
        for t in inputs:
            node = t._node
            if node.id < self.start_id and node.id not in self.external:
                if node.buffer is None and self.loop_part is not None:
                    raise LoomError(f"loom.while_loop: the loop {self.loop_part} reads a tensor "
                                    f"({node.dtype.name}{fmt_shape(node.shape)}) computed in the enclosing traced "
                                    "function; pass it in as a loop variable (returned unchanged by the body)")
                if node.buffer is None:
                    _realize._run([node])  # Work queued before the trace runs now.
                # A detached copy or an in-place snapshot stands for the tensor it came from.
                ref = t.__dict__.get("_owner")
                owner = ref() if ref is not None else None
                owner = owner if owner is not None else t
                self.external[node.id] = (node, weakref.ref(owner))

    def on_mutate(self, t: Tensor, old: Node) -> None:
        if id(t) not in self.mutated:
            self.mutated[id(t)] = (t, old)

    def on_grad(self, t: Tensor, previous: Tensor | None, value: Tensor | None) -> None:
        # The first .grad seen keeps its identity across calls: results are written into it.
        if id(t) not in self.grads:
            self.grads[id(t)] = (t, previous)
            # Unless the step first resets it (zero_grad), the result depends on the .grad it found.
            if value is not None:
                self.grad_reads.add(id(t))


def tracing() -> bool:
    """True while a `loom.function` is being traced."""
    return _realize.active_trace is not None


def static_value(getter: Callable[[], Any]):
    """`getter()`, fixed into a trace: a later call where it differs traces again.

    For Python values that decide the structure of the computation (a flag, a
    zero weight decay that skips a term).
    """
    value = getter()
    tr = _realize.active_trace
    if tr is not None:
        tr.guards.append((getter, value))
    return value


def dynamic_scalar(getter: Callable[[], Any], dtype=None):
    """A Python number read afresh on every call of a traced function (e.g. a learning rate).

    Outside a trace this just returns `getter()`.
    """
    tr = _realize.active_trace
    if tr is None:
        return getter()
    value = getter()
    d = dt.as_dtype(dtype) if dtype is not None else dt.scalar_dtype(value)
    node = Node("input", (), {"shape": (), "dtype": d}, (), d)
    tr.scalars.append((node, getter))
    return Tensor._wrap(node)


# ---------------------------------------------------------------- pytrees of results

def _flatten(obj, leaves: list) -> Any:
    if isinstance(obj, Tensor):
        leaves.append(obj)
        return ("T", len(leaves) - 1)
    if isinstance(obj, (list, tuple)):
        spec = [_flatten(v, leaves) for v in obj]
        return ("tuple" if isinstance(obj, tuple) else "list", type(obj), spec)
    if isinstance(obj, dict):
        return ("dict", [(k, _flatten(v, leaves)) for k, v in obj.items()])
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return ("C", obj)
    raise LoomError(f"loom.function: the traced function returned a {type(obj).__name__}; return "
                    "tensors, numbers, None or lists/tuples/dicts of them")


def _unflatten(spec, values: list) -> Any:
    kind = spec[0]
    if kind == "T":
        return values[spec[1]]
    if kind == "C":
        return spec[1]
    if kind == "dict":
        return {k: _unflatten(v, values) for k, v in spec[1]}
    items = [_unflatten(v, values) for v in spec[2]]
    cls = spec[1]
    if kind == "tuple" and cls is not tuple:
        return cls(*items)  # Named tuples.
    return cls(items) if kind == "tuple" else items


# ---------------------------------------------------------------- the compiled entry

class _Entry:
    """One traced specialisation: the graph, its executable and how to bind and write back."""

    def __init__(self) -> None:
        self.graph: Graph | None = None
        self.exe: Callable | None = None
        self.n_args = 0
        self.externals: list[tuple[Any, tuple, dt.DType]] = []   # (weakref tensor, shape, dtype)
        self.scalars: list[tuple[Callable[[], Any], dt.DType]] = []
        self.rands: list[dict] = []                               # attrs of random sources
        self.out_spec: Any = None
        self.n_returned = 0
        self.mutated: list[Any] = []   # weakrefs of tensors written in place, in output order
        # ((("arg", position) or ("ref", weakref tensor)), weakref earlier .grad, has value)
        self.grads: list[tuple[Any, Any, bool]] = []
        self.grad_args: list[int] = []  # Tensor arguments whose existing .grad is fed as an input
        self.kernel_count = 0
        self.guards: list[tuple[Callable[[], Any], Any]] = []
        self.remat: Any = None  # The rematerialisation report when compiled under a memory budget.
        self.node_map: dict[int, Node] = {}  # Traced node id -> its node in `graph`.
        # The replay's call path (see `Function._replay`).
        self.ext_grad: list[bool] = []     # Each external's requires_grad when traced.
        self.structures: list[tuple[Any, int]] = []  # (weakref container, its structure version)
        self.structure_seen = -1            # The last `loom._structure` stamp the structures were checked at.
        self.run: Callable | None = None   # The executable's entry for checked arrays (`run_checked`).
        # Outputs written into the memory of the tensor they update (donation): (output position, index in
        # `into`, how to find the tensor, input index of its old value or -1, stored shape, NumPy dtype).
        self.donors: list[tuple] = []
        self.n_into = 0
        # Per external: (weakref, shape, dtype, requires_grad, index in `into` or -1, output position); the
        # donors that are not the new value of an external (.grads, mutated arguments) stay in `other_donors`.
        self.ext_plan: list[tuple] = []
        self.other_donors: list[tuple] = []
        # Runtime scalars: the distinct getters (many parameters read one group's lr), each scalar's getter,
        # and the last (values, arrays) fed, reused while the values are the same numbers.
        self.scalar_getters: list[tuple[Callable[[], Any], dt.DType]] = []
        self.scalar_index: list[int] = []
        self.scalar_last: tuple | None = None
        self.out_dtypes: list[dt.DType] = []


def _node_attrs(node: Node) -> dict:
    return dict(node.attrs)


def _capture(tr: _Trace, arg_nodes: list[Node], returned: list[Tensor], mutated: list[Tensor],
             grads: list[Tensor]) -> tuple[Graph, _Entry]:
    """Build the Graph from the trace's pending nodes back to placeholders, externals and constants."""
    entry = _Entry()
    g = Graph()
    mapping: dict[int, Node] = {}
    for k, n in enumerate(arg_nodes):
        mapping[n.id] = g.add_input(n.shape, n.dtype, name=f"arg{k}")
    entry.n_args = len(arg_nodes)
    roots = [t._node for t in returned] + [t._node for t in mutated] + \
        [t.grad._node for t in grads if t.grad is not None]
    _ = entry
    # External tensors and runtime scalars become the next inputs, in a fixed order.
    for t in returned + mutated:
        if t._node.id < tr.start_id:
            tr.on_read([t])  # Returned as it was before the call.
    order = _topo(roots)
    for n in order:
        if n.id < tr.start_id:
            if n.id not in tr.external:
                raise LoomError("loom.function: internal error: a value from before the trace was not "
                                "recorded as an input")
            tensor = tr.external[n.id][1]()
            if tensor is None:
                raise LoomError("loom.function: a tensor read by the trace no longer exists")
            mapping[n.id] = _add_input(g, n, f"ext{len(entry.externals)}")
            entry.externals.append((weakref.ref(tensor), tuple(n.shape), n.dtype))
            entry.ext_grad.append(bool(tensor.requires_grad))
    scalar_ids = {n.id: getter for n, getter in tr.scalars}
    for n in order:
        if n.id in scalar_ids:
            mapping[n.id] = g.add_input((), n.dtype, name=f"scalar{len(entry.scalars)}")
            entry.scalars.append((scalar_ids[n.id], n.dtype))
    # Fresh random numbers every call, drawn at replay in the order the program drew them.
    for n in sorted((n for n in order if n.op == "rand" and n.id not in mapping), key=lambda n: n.id):
        mapping[n.id] = _add_input(g, n, f"rand{len(entry.rands)}")
        entry.rands.append(_node_attrs(n))
    for n in order:
        if n.id in mapping:
            continue
        if n.op == "input":
            raise LoomError("loom.function: the traced function used a placeholder from another trace")
        if n.op == "buffer":
            mapping[n.id] = g.add_constant(n.buffer, dtype=n.dtype)
            continue
        mapping[n.id] = _add_traced(g, n, tuple([mapping[i.id] for i in n.inputs]))
    g.outputs = [mapping[r.id] for r in roots]
    entry.graph = g
    entry.node_map = mapping
    return g, entry


def _add_input(g: Graph, n: Node, name: str) -> Node:
    """`g.add_input(n.shape, n.dtype, name=name)` for a traced node, whose shape and dtype `apply` checked
    (a step captures hundreds: parameters, optimizer state)."""
    shape, d = n.shape, n.dtype
    if type(shape) is not tuple or type(d) is not dt.DType or not all(type(x) is int and x >= 0 for x in shape):
        return g.add_input(shape, d, name=name)  # (Raises, naming what is wrong.)
    node = g._insert(Node("input", (), {"shape": shape, "dtype": d}, shape, d, "cpu", name))
    g._inputs.append(node)
    return node


def _recompute_late(g: Graph, recompute: dict[Node, int]) -> None:
    """Schedule each recomputed node just before the first other node that needs it.

    The capture's depth-first order may put a checkpointed segment's recomputation early in the backward
    (even before the backward of the segments after it), where its values would be as long-lived as the
    forward activations they replace; the schedule is the graph's insertion order.
    """
    out: dict[Node, None] = {}

    def pull(n: Node) -> None:
        stack = [(n, False)]
        while stack:
            m, ready = stack.pop()
            if m in out:
                continue
            if ready:
                out[m] = None
                continue
            stack.append((m, True))
            stack.extend((i, False) for i in reversed(m.inputs) if i in recompute and i not in out)

    for n in g.topological_order():
        if n not in recompute:
            for i in n.inputs:
                if i in recompute and i not in out:
                    pull(i)
            out[n] = None
    for n in recompute:   # Read by nothing outside its recomputation: the end (pruning removes it).
        if n not in out:
            pull(n)
    g._nodes = out


def _add_traced(g: Graph, n: Node, inputs: tuple[Node, ...]) -> Node:
    """`g.add_node(n.op, inputs, n.attrs)` for a traced node: `apply` checked its attrs and inferred its shape
    and dtype from inputs of the same shapes and dtypes when it was recorded, so they are not inferred again."""
    if n.op not in PRIMITIVES or n.op in ("input", "buffer"):
        return g.add_node(n.op, inputs, _node_attrs(n))  # (Raises, naming what is wrong.)
    attrs = _plain_attrs(n.attrs)
    node = Node(n.op, inputs, attrs if attrs is not None else _canon_attrs(n.attrs, "add_node"),
                tuple(map(int, n.shape)), dt.as_dtype(n.dtype), inputs[0].device if inputs else "cpu")
    return g._insert(node)


_PLAIN = frozenset({int, float, bool, str, type(None), dt.DType})


def _plain_attrs(attrs: dict) -> dict | None:
    """A copy of `attrs` when it is in the Graph's canonical form already (Python scalars, dtypes, tuples of
    ints: almost every traced op's), else None (`_canon_attrs` converts it). A retrace meets thousands."""
    for k, v in attrs.items():
        t = type(v)
        if type(k) is not str:
            return None
        if t in _PLAIN:
            if k == "dtype" and t is not dt.DType:
                return None
            continue
        if t is tuple and k != "dtype":
            for x in v:
                if type(x) is not int:
                    return None
            continue
        return None
    return dict(attrs)


def _topo(roots: list[Node]) -> list[Node]:
    order: list[Node] = []
    seen: set[int] = set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if node.id in seen:
                continue
            seen.add(node.id)
            stack.append((node, True))
            for i in node.inputs:
                if i.id not in seen:
                    stack.append((i, False))
    return order


def _compile(graph: Graph, level: int, backend: str, earlier: list[tuple[Graph, Graph, Any]] | None = None):
    """Hand the graph to the pass pipeline (or a plugin); fall back to the reference runner.

    `earlier`: (trace, optimised graph, executable) of the same function at other sizes; one that differs from
    `graph` only in sizes is re-specialised instead of running the pipeline (`loom.compiler.respecialize`)."""
    if backend == "reference":
        return functools.partial(_run_reference, graph)
    if backend != "c":
        from loom.compiler.plugins import get_plugin  # Third-party compilers, e.g. "xla".
        return get_plugin(backend)(graph)
    try:
        from loom.compiler import compile as compile_graph
    except ImportError:
        compile_graph = None
    if compile_graph is None:
        return functools.partial(_run_reference, graph)
    if earlier:
        from loom.compiler.pipeline import respecialized
        exe = respecialized(graph, earlier, level)
        if exe is not None:
            return exe
    return compile_graph(graph, level=level, backend=backend, checked=True)  # Built by add_node: checked.


def _run_reference(graph: Graph, *arrays):
    """Run a traced graph on the reference interpreter, taking and giving stored-form arrays."""
    feeds = [_buffer_tensor(a, p.dtype) for a, p in zip(arrays, graph.inputs)]
    return tuple(t._array() for t in graph.run(*feeds))


@contextlib.contextmanager
def _no_gc():
    """No cyclic garbage collection while a call traces and compiles: those build tens of thousands of
    objects, and the collections that triggers (each walking the whole heap) cost a large part of a
    retrace. Collection resumes after, as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ---------------------------------------------------------------- the decorator

class Function:
    """A traced, compiled Python function. Create it with `loom.function` (or `loom.jit`)."""

    def __init__(self, fn: Callable, level: int = 3, backend: str = "c", warmup: int = 1,
                 memory_budget: int | str | None = None, strict: bool = False, runtime: str = "native",
                 track: bool = False, offload: str = "auto",
                 placement: dict | None = None, transport: Any = None) -> None:
        functools.update_wrapper(self, fn)
        if runtime not in ("native", "actors"):
            raise LoomValueError(f"loom.function: runtime must be 'native' (one compiled step) or 'actors' (the "
                                 f"graph partitioned into tasks run by actors), got {runtime!r}")
        self.runtime = runtime
        self.track = bool(track)
        self.placement, self.transport = placement, transport  # Stage -> rank, over a runtime transport.
        self.fn = fn
        self.level = level
        self.backend = backend
        self.warmup = warmup
        self.memory_budget: int | None = None
        self.strict = bool(strict)
        if offload not in ("never", "disk", "auto"):
            raise LoomValueError(f"loom.function: offload must be 'never' (recompute only), 'disk' (offload to the "
                                 f"disk tier) or 'auto' (the cost model chooses per value), got {offload!r}")
        self.offload = offload
        if memory_budget is not None:
            from loom.compiler.remat import parse_budget

            self.memory_budget = parse_budget(memory_budget)
            if backend != "c" or level != 3:
                raise LoomValueError(f"loom.function: memory_budget needs the static memory plan of the 'c' "
                                     f"backend at level 3, got backend={backend!r}, level={level!r}")
        self._calls = 0
        self._cache: dict[Any, _Entry] = {}
        self._arenas: ArenaPool | None = None
        self.trace_count = 0
        # Counts of the call path, for tests and reports: calls that replayed a cached trace, and the
        # outputs those wrote into the tensors they update (donated) or handed over as new arrays.
        self.call_stats = {"replays": 0, "donated": 0, "written_back": 0}

    def _key(self, args, kwargs) -> Any:
        parts = []
        for a in (args + tuple(kwargs[k] for k in sorted(kwargs)) if kwargs else args):
            if isinstance(a, Tensor):
                # Whether an argument already holds a .grad decides if backward accumulates into it.
                node = a._node
                parts.append(("T", node.dtype.name, tuple(node.shape), a.requires_grad, a._grad is not None))
            elif isinstance(a, (np.ndarray,)):
                raise LoomError("loom.function: pass loom tensors, not NumPy arrays "
                                "(loom.from_numpy wraps one without copying)")
            else:
                try:
                    hash(a)
                except TypeError:
                    raise LoomError(f"loom.function: argument of type {type(a).__name__} is neither a "
                                    "tensor nor hashable; Python values are traced by value and must "
                                    "be hashable") from None
                parts.append(("V", type(a).__name__, a))
        return (tuple(parts), tuple(sorted(kwargs)), is_grad_enabled())

    def __call__(self, *args, **kwargs):
        self._calls += 1
        if self._calls <= self.warmup:
            # Warm-up calls run eagerly: optimizer state and lazily built members get created
            # outside the trace, so the trace sees the steady state.
            return self.fn(*args, **kwargs)
        key = self._key(args, kwargs)
        entry = self._cache.get(key)
        if entry is not None and not _structure_holds(entry):
            # A module or optimizer changed what it holds (a parameter assigned, a parameter group added):
            # one eager call creates what the new members need (optimizer state), as the warm-up did, and
            # the next call traces.
            del self._cache[key]
            return self.fn(*args, **kwargs)
        if _profiler.ACTIVE is None:
            if entry is not None and self._guards_hold(entry):
                out = self._replay(entry, args, kwargs)  # Checks the captured tensors as it reads them.
                if out is not _STALE:
                    return out
            with _no_gc():
                entry = self._trace(args, kwargs)
                self._cache[key] = entry
                return self._replay(entry, args, kwargs)
        name = getattr(self.fn, "__name__", "fn")
        t0 = _profiler.now_us()
        out = _STALE
        if entry is not None and self._guards_hold(entry):
            out = self._replay(entry, args, kwargs)
        if out is _STALE:
            with _no_gc():
                entry = self._trace(args, kwargs)
            self._cache[key] = entry
            _profiler.record(f"loom.function trace {name}", "compile", t0, _profiler.now_us())
            t0 = _profiler.now_us()
            out = self._replay(entry, args, kwargs)
        _profiler.record(f"loom.function step {name}", "function", t0, _profiler.now_us())
        return out

    @staticmethod
    def _guards_hold(entry: _Entry) -> bool:
        """The trace's Python guards (`static_value`, .grad identities) still hold."""
        for getter, value in entry.guards:
            if getter() != value:
                return False
        return True

    def _guard_ok(self, entry: _Entry) -> bool:
        if not (_structure_holds(entry) and self._guards_hold(entry)):
            return False
        for (ref, shape, dtype), rg in zip(entry.externals, entry.ext_grad):
            t = ref()
            if t is None or tuple(t.shape) != shape or t.dtype is not dtype or t.requires_grad != rg:
                return False
        return True

    def _trace(self, args, kwargs) -> _Entry:
        if _realize.active_trace is not None:
            raise LoomError("loom.function: nested traced functions are not supported yet; call the "
                            "inner function's Python body instead")
        rng_state = (default_generator._seed, default_generator._counter)
        tr = _Trace()
        placeholders = []
        arg_nodes = []

        def placeholder(a):
            node = Node("input", (), {"shape": tuple(a.shape), "dtype": a.dtype}, tuple(a.shape), a.dtype)
            t = Tensor._wrap(node, None, a.requires_grad)
            placeholders.append(t)
            arg_nodes.append(node)
            return t
        targs = [placeholder(a) if isinstance(a, Tensor) else a for a in args]
        tkwargs = {k: placeholder(v) if isinstance(v, Tensor) else v for k, v in sorted(kwargs.items())}
        # An argument's existing .grad is an input too: backward accumulates into it as eagerly.
        grad_args = []
        for k, (p, a) in enumerate(zip(placeholders, [a for a in list(args) + [kwargs[n] for n in sorted(kwargs)]
                                                         if isinstance(a, Tensor)])):
            if a._grad is not None:
                g = a._grad
                node = Node("input", (), {"shape": tuple(g.shape), "dtype": g.dtype}, tuple(g.shape), g.dtype)
                p._grad = Tensor._wrap(node)
                arg_nodes.append(node)
                grad_args.append(k)
        _realize.active_trace = tr
        # ONNX Runtime gets the decomposition of attention, layer_norm and cross_entropy (ONNX has no op
        # for loom's fused library primitives).
        plain = _library_ops.decomposed() if self.backend == "onnxruntime" else contextlib.nullcontext()
        try:
            with plain:
                result = self.fn(*targs, **tkwargs)
        except BaseException:
            _undo_trace_effects(tr)  # A failed trace must not leave traced values in the caller's tensors.
            raise
        finally:
            _realize.active_trace = None
            default_generator._seed, default_generator._counter = rng_state
        returned: list[Tensor] = []
        spec = _flatten(result, returned)
        mutated = [t for t, _ in tr.mutated.values() if t._node.id >= tr.start_id]
        grads = [t for t, _ in tr.grads.values()]
        graph, entry = _capture(tr, arg_nodes, returned, mutated, grads)
        entry.out_spec = spec
        entry.guards = _distinct_guards(tr.guards)
        entry.structures = [(weakref.ref(o), _structure.version(o)) for o in tr.structures.values()]
        entry.n_returned = len(returned)
        # A mutated argument is written back to the caller's tensor of that position.
        arg_pos = {id(p): k for k, p in enumerate(placeholders)}
        entry.mutated = [("arg", arg_pos[id(t)]) if id(t) in arg_pos else ("ref", weakref.ref(t))
                         for t in mutated]
        entry.grad_args = grad_args
        entry.grads = [(("arg", arg_pos[id(t)]) if id(t) in arg_pos else ("ref", weakref.ref(t)),
                        weakref.ref(prev) if prev is not None and id(t) not in arg_pos else None,
                        t.grad is not None)
                       for t, prev in tr.grads.values()]
        # A captured tensor's .grad read by the trace is bound by identity: replaced or set to None
        # between calls (zero_grad outside the step), the trace no longer describes the program.
        for t, prev in tr.grads.values():
            if id(t) not in arg_pos and id(t) in tr.grad_reads:
                entry.guards.append((_grad_identity(weakref.ref(t), prev), True))
        # Undo the trace's effects: the replay that follows computes them for real.
        _undo_trace_effects(tr)
        recompute = tr.recompute_groups(entry.node_map)
        if recompute:
            graph.meta["recompute"] = recompute   # Checkpointed segments: CSE keeps their recomputation apart.
            _recompute_late(graph, recompute)
        if self.memory_budget is not None:
            graph.meta["memory_budget"] = (self.memory_budget, self.strict)
            graph.meta["offload"] = self.offload
        if self.runtime == "actors":
            from loom.compiler.partition import compile_partitioned

            tags: dict[Node, StageTag] = {}
            if tr.stages:
                for traced, new in entry.node_map.items():
                    tag = tr.stage_of(traced)
                    if tag is not None:
                        tags[new] = tag
            entry.exe = compile_partitioned(graph, tags, lambda g: _compile(g, self.level, self.backend),
                                            name=f"loom.function:{getattr(self.fn, '__name__', 'fn')}",
                                            track=self.track, placement=self.placement,
                                            transport=self.transport)
        else:
            entry.exe = _compile(graph, self.level, self.backend, self._earlier(graph))
            share = getattr(entry.exe, "share_arenas", None)
            if share is not None:  # Specialisations (batch sizes) reuse each other's arenas.
                if self._arenas is None:
                    self._arenas = ArenaPool()
                share(self._arenas)
        optimized = getattr(entry.exe, "graph", None)
        entry.remat = optimized.meta.get("remat") if isinstance(optimized, Graph) else \
            getattr(entry.exe, "memory", None)   # The actor runtime's: a RematReport, or a PlanMemory over tasks.
        entry.kernel_count = sum(1 for n in graph if n.op == "fused")
        entry.out_dtypes = [n.dtype for n in graph.outputs]
        _plan_scalars(entry)
        entry.run = getattr(entry.exe, "run_checked", None)
        if entry.run is not None:
            _plan_donation(entry, [a for a in list(args) + [kwargs[k] for k in sorted(kwargs)]
                                   if isinstance(a, Tensor)])
        donor_of = {d[3] - len(arg_nodes): d for d in entry.donors if d[3] >= len(arg_nodes)}
        entry.ext_plan = [(ref, shape, dtype, rg) + ((donor_of[e][1], donor_of[e][0]) if e in donor_of else (-1, -1))
                          for e, ((ref, shape, dtype), rg) in enumerate(zip(entry.externals, entry.ext_grad))]
        entry.other_donors = [d for d in entry.donors if d[3] < len(arg_nodes)]
        self.trace_count += 1
        return entry

    def _earlier(self, graph: Graph) -> list[tuple[Graph, Graph, Any]]:
        """(trace, optimised graph, executable) of the compiled specialisations a new trace may be re-specialised from:
        those of as many nodes, newest first."""
        from loom.runtime.executor import Executable

        return [(e.graph, e.exe.graph, e.exe) for e in reversed(self._cache.values())
                if e.graph is not None and type(e.exe) is Executable and len(e.graph) == len(graph)]

    def _inputs(self, entry: _Entry, args, kwargs, donate: bool = False) -> tuple[list, list | None, dict]:
        """The arrays one call feeds the compiled graph: arguments, .grads, captured tensors, scalars, random.

        None instead of the arrays when a captured tensor is gone or no longer has the shape, dtype or
        requires_grad it was traced with: the call then traces again. With `donate`, also the memory the
        outputs may be written into (`_Entry.donors`): output position -> the tensor it updates, and under
        -1 the `into` list for the executable. A tensor's memory is given only when nothing but the tensor
        sees it: it owns its array (no NumPy view of it can exist without referencing it), no NumPy array,
        other loom value or pending op holds that array or its node (reference counts say so), it is not a
        view and has none; otherwise its update is written back as a new value, as without donation.
        """
        tensor_args = [a for a in (args + tuple(kwargs[k] for k in sorted(kwargs)) if kwargs else args)
                       if isinstance(a, Tensor)]
        arrays = [a._node.buffer if a._node.buffer is not None else a._array() for a in tensor_args]
        for k in entry.grad_args:
            arrays.append(tensor_args[k]._grad._array())
        given: dict = {}
        into = None
        refcount = sys.getrefcount
        append = arrays.append
        for ref, shape, dtype, rg, j, p in entry.ext_plan:
            t = ref()
            if t is None:
                return tensor_args, None, given
            node = t._node
            if node.dtype is not dtype or t.requires_grad != rg or (node.shape != shape and
                                                                  tuple(node.shape) != shape):
                return tensor_args, None, given
            a = node.buffer
            if a is None:
                a = t._array()
            # References to the node: t._node, `node`, getrefcount's argument; to the array: node.buffer, `a`
            # and the argument. An array that owns its memory got it from NumPy's allocator: writable memory,
            # whatever its flag says (read-only graph constants are referenced by their graph too).
            elif j >= 0 and donate and a.base is None and refcount(node) == 3 and refcount(a) == 3 and \
                    t._root is None and t._alias is None and (not t._views or not live_views(t)):
                if into is None:
                    into = [None] * entry.n_into
                into[j] = a
                given[p] = t
            append(a)
        if entry.scalars:
            arrays += _scalar_arrays(entry)
        rand_impl = PRIMITIVES["rand"].impl
        for attrs in entry.rands:
            a = dict(attrs)
            a["seed"] = default_generator.next_key()
            arrays.append(rand_impl(a))
        if donate and entry.other_donors:
            into = _donations(entry, tensor_args, arrays, into, given)
        if into is not None:
            given[-1] = into
        return tensor_args, arrays, given

    def _replay(self, entry: _Entry, args, kwargs):
        """Run the compiled step on this call's values and give the results back (`_STALE`: trace again)."""
        run = entry.run
        tensor_args, arrays, given = self._inputs(entry, args, kwargs, run is not None)
        if arrays is None:
            return _STALE
        self.call_stats["replays"] += 1
        if run is None:
            return self._results(entry, tensor_args, entry.exe(*arrays), None)
        for a in arrays:
            if a.__class__ is not np.ndarray:  # A NumPy scalar or array subclass: the executable's checks.
                return self._results(entry, tensor_args, entry.exe(*arrays), None)
        into = given.pop(-1, None)
        # Scalars and random draws (the tail) are NumPy's own fresh arrays.
        return self._results(entry, tensor_args, run(arrays, into, len(entry.scalars) + len(entry.rands)), given)

    def _results(self, entry: _Entry, tensor_args: list, outs, given: dict | None) -> Any:
        """Write the outputs back (updated tensors, .grads) and build the returned structure.

        `given`: output position -> the tensor whose memory the call was asked to write it into; where the
        output is that memory, the tensor already holds its new value.
        """
        dtypes = entry.out_dtypes
        k = entry.n_returned
        if given:
            # The native program writes every output it was given memory for, or (when the executor's own
            # loop served the call) none: one output tells.
            p = next(iter(given))
            if outs[p] is not given[p]._node.buffer:
                given = None
        donated = 0
        for kind, ref in entry.mutated:
            t = tensor_args[ref] if kind == "arg" else ref()
            if t is not None:
                if given and k in given:
                    t._vc.value += 1  # It holds its new value already.
                    donated += 1
                else:
                    _write_back(t, _buffer_tensor(outs[k], dtypes[k]))
            k += 1
        for (kind, ref), prev_ref, has in entry.grads:
            t = tensor_args[ref] if kind == "arg" else ref()
            if t is None:
                k += int(has)
                continue
            if has:
                # Write into the gradient tensor the call started from, so it stays the same object.
                target = t._grad if kind == "arg" else (prev_ref() if prev_ref is not None else None)
                if given and k in given and given[k] is target:
                    target._vc.value += 1
                    donated += 1
                elif target is None:
                    target = _buffer_tensor(outs[k], dtypes[k])
                else:
                    _write_back(target, _buffer_tensor(outs[k], dtypes[k]))
                t._grad = target
                k += 1
            else:
                t._grad = None
        stats = self.call_stats
        stats["donated"] += donated
        stats["written_back"] += k - entry.n_returned - donated
        return _unflatten(entry.out_spec, [_buffer_tensor(outs[j], dtypes[j]) for j in range(entry.n_returned)])

    def map(self, items: Any):
        """Call the function once per item (a tuple of arguments), streaming the calls through the runtime.

        With ``runtime="actors"`` and stages marked by `loom.stage`, the stages
        of consecutive calls overlap (a pipeline over micro-batches): stage 0
        of item i+1 runs while stage 1 of item i does. Results are those of
        calling the function on each item in turn. The function must not
        update tensors in place (a forward pass, not a training step), and
        every item must have the same signature (shapes, dtypes).

        Examples
        --------
        >>> w = loom.ones(4, 4)
        >>> @loom.function(runtime="actors", warmup=0)
        ... def two_stages(x):
        ...     with loom.stage(0):
        ...         h = (x @ w).relu()
        ...     with loom.stage(1):
        ...         return (h @ w).sum(1)
        >>> [y.tolist() for y in two_stages.map((loom.ones(2, 4) * k,) for k in range(3))]
        [[0.0, 0.0], [64.0, 64.0], [128.0, 128.0]]
        >>> two_stages.close()
        """
        it = iter(items)
        entry, key = None, None
        for item in it:  # Warm-up and tracing happen on plain calls.
            args = tuple(item) if isinstance(item, (tuple, list)) else (item,)
            if self._calls >= self.warmup:
                key = self._key(args, {})
                entry = self._cache.get(key)
            if entry is not None and self._guard_ok(entry):
                break
            entry = None
            yield self(*args)
        else:
            return
        if entry.mutated or entry.grads:
            raise LoomError("loom.function.map: the function updates tensors in place (parameters, .grad), so "
                            "its calls cannot overlap; call it in a loop")
        map_fn = getattr(entry.exe, "map", None)

        def arrays_of(a):
            arrays = self._inputs(entry, a, {})[1]
            if arrays is None:
                raise LoomError("loom.function.map: a tensor the function reads changed its shape, dtype or "
                                "requires_grad (or was freed) during the map; call the function per item instead")
            return arrays

        def feeds():
            yield arrays_of(args)
            for nxt in it:
                a = tuple(nxt) if isinstance(nxt, (tuple, list)) else (nxt,)
                if self._key(a, {}) != key:
                    raise LoomError("loom.function.map: every item must have the same signature (shapes, dtypes, "
                                    "requires_grad) as the first; call the function per item instead")
                self._calls += 1
                yield arrays_of(a)
        self._calls += 1
        outs = map_fn(feeds()) if map_fn is not None else (entry.exe(*arrays) for arrays in feeds())
        for out in outs:
            yield self._results(entry, [], out, None)

    def close(self) -> None:
        """Stop the actors of every compiled specialisation (``runtime="actors"``); later calls restart them."""
        for e in self._cache.values():
            close = getattr(e.exe, "close", None)
            if close is not None:
                close()

    def explain(self) -> str:
        """The traced graphs of this function, one per specialisation (with its memory budget report)."""
        return "\n\n".join(str(e.graph) + (f"\n{e.remat}" if e.remat is not None else "")
                           for e in self._cache.values())

    @property
    def memory_reports(self) -> list:
        """One `loom.compiler.remat.RematReport` per specialisation compiled under `memory_budget` (with
        ``runtime="actors"`` and several tasks: a `loom.compiler.partition.PlanMemory` over the tasks)."""
        return [e.remat for e in self._cache.values() if e.remat is not None]


_STALE = object()  # A replay found a captured tensor changed: the call traces again.


def _structure_holds(entry: _Entry) -> bool:
    """The modules and optimizers the trace went through hold the same members (`loom._structure`)."""
    stamp = _structure.latest
    if entry.structure_seen == stamp:  # Nothing anywhere changed since they last held.
        return True
    for ref, version in entry.structures:
        obj = ref()
        # A container that is gone (a module made inside the step) cannot be changed any more.
        if obj is not None and obj.__dict__.get("_loom_structure", 0) != version:
            return False
    entry.structure_seen = stamp
    return True
_IMMUTABLE = (float, int, bool)


def _distinct_guards(guards: list) -> list:
    """The trace's guards without repeats: one getter per (code, closure values), such as the flag of one
    parameter group that every parameter's update read."""
    out, seen = [], set()
    for getter, value in guards:
        key = _getter_key(getter, type(value), value)
        if key is not None:
            if key in seen:
                continue
            seen.add(key)
        out.append((getter, value))
    return out


def _plan_donation(entry: _Entry, tensor_args: list) -> None:
    """Which outputs may be written into the memory of the tensor they update (`_Entry.donors`).

    The candidates are the updated tensors (parameters, optimizer state, mutated arguments) and the
    .grads a step writes; the executable says which of them it can write in place without changing a
    result (`NativeProgram.donatable`). Each call then checks that nothing else sees that memory
    (`_donations`).
    """
    n_t, n_g = len(tensor_args), len(entry.grad_args)
    where: dict[int, int | None] = {}  # id(tensor) -> its input index (None: fed more than once)
    for k, t in enumerate(tensor_args):
        where[id(t)] = None if id(t) in where else k
    for j, k in enumerate(entry.grad_args):
        g = tensor_args[k]._grad
        where[id(g)] = None if id(g) in where else n_t + j
    for e, (ref, _, _) in enumerate(entry.externals):
        t = ref()
        if t is not None:
            where[id(t)] = None if id(t) in where else n_t + n_g + e
    found = []  # (output position, how to find the tensor, input index)
    p = entry.n_returned
    for kind, ref in entry.mutated:
        t = tensor_args[ref] if kind == "arg" else ref()
        found.append((p, ("arg", ref) if kind == "arg" else ("ref", ref), where.get(id(t), -1)))
        p += 1
    for (kind, ref), prev_ref, has in entry.grads:
        if not has:
            continue
        if kind == "arg":
            g = tensor_args[ref]._grad
            if g is not None:
                found.append((p, ("grad", ref), where.get(id(g), -1)))
        elif prev_ref is not None and prev_ref() is not None:
            found.append((p, ("ref", prev_ref), where.get(id(prev_ref()), -1)))
        p += 1
    found = [f for f in found if f[2] is not None]
    allowed = entry.exe.donatable([(p, i) for p, _, i in found])
    outs = entry.graph.outputs
    entry.donors = [(p, allowed[p], how, i, tuple(outs[p].shape), outs[p].dtype.np)
                    for p, how, i in found if p in allowed]
    entry.n_into = max(allowed.values()) + 1 if allowed else 0


def _donations(entry: _Entry, tensor_args: list, arrays: list, into: list | None, given: dict) -> list | None:
    """`Function._inputs`'s donation checks for the donors that are not externals' new values (.grads,
    mutated arguments); returns `into`, filled in further (`given` too)."""
    refcount = sys.getrefcount
    for p, j, (kind, ref), i, shape, npd in entry.other_donors:
        if kind == "arg":
            t = tensor_args[ref]
        elif kind == "grad":
            t = tensor_args[ref]._grad
        else:
            t = ref()
        if t is None or t._alias is not None or t._root is not None or (t._views and live_views(t)):
            continue
        node = t._node
        a = node.buffer
        # References to the node: t._node, `node`, getrefcount's argument.
        if a is None or a.base is not None or refcount(node) != 3:
            continue
        if i >= 0:
            # To the array: node.buffer, `arrays`, `a`, getrefcount's argument.
            if arrays[i] is not a or refcount(a) != 4:
                continue
        else:  # Not an input, so the program does not check it: a C-contiguous array of the output's own kind.
            if refcount(a) != 3 or a.__class__ is not np.ndarray or a.shape != shape or \
                    (a.dtype is not npd and a.dtype != npd):
                continue
            f = a.flags
            if not (f.c_contiguous and f.aligned):
                continue
        if into is None:
            into = [None] * entry.n_into
        into[j] = a
        given[p] = t
    return into


def _getter_key(getter: Callable, *extra) -> tuple | None:
    """What decides a getter's value: its code and the objects it closes over (None: not a plain function)."""
    code = getattr(getter, "__code__", None)
    if code is None:
        return None
    try:
        key = (code, tuple(id(c.cell_contents) for c in getter.__closure__ or ()), getter.__defaults__) + extra
        hash(key)
    except (TypeError, ValueError, AttributeError):  # Unhashable values, empty cells.
        return None
    return key


def _plan_scalars(entry: _Entry) -> None:
    """One getter per distinct runtime scalar (`_Entry.scalar_getters`)."""
    seen: dict = {}
    entry.scalar_getters, entry.scalar_index = [], []
    for getter, d in entry.scalars:
        key = _getter_key(getter, d)
        k = seen.get(key) if key is not None else None
        if k is None:
            k = len(entry.scalar_getters)
            entry.scalar_getters.append((getter, d))
            if key is not None:
                seen[key] = k
        entry.scalar_index.append(k)
    entry.scalar_last = None


def _scalar_arrays(entry: _Entry) -> list:
    """The runtime scalars' arrays for this call, in input order: the last call's while every getter gives the
    very same number (an immutable Python number: the same object is the same value)."""
    values = [g() for g, _ in entry.scalar_getters]
    last = entry.scalar_last
    if last is not None and all(map(operator.is_, values, last[0])):
        return last[1]
    made = []
    for v, (_, d) in zip(values, entry.scalar_getters):
        if d is dt.bfloat16:  # Stored form: the upper 16 bits of a float32.
            made.append(dt.f32_to_bf16(np.asarray(v, dtype=np.float32)))
        else:
            made.append(np.asarray(v, dtype=d.np))
    arrays = [made[k] for k in entry.scalar_index]
    if all(type(v) in _IMMUTABLE for v in values):
        entry.scalar_last = (values, arrays)  # One tuple: a concurrent call sees the old pair or the new one.
    return arrays


def _grad_identity(ref, grad) -> Callable[[], bool]:
    """A guard: the tensor behind `ref` still holds the very `.grad` object (or None) the trace read."""
    gref = weakref.ref(grad) if grad is not None else None

    def check() -> bool:
        t = ref()
        if t is None:
            return False
        return t._grad is None if gref is None else t._grad is gref()
    return check


def _write_back(t: Tensor, value: Tensor) -> None:
    """Give `t` its new value, through the user's array when it shares memory with NumPy.

    A tensor that shares storage with others (a view, or a root with live views) is written
    like an in-place copy, so every alias sees the value.
    """
    if t._root is not None or t._views:
        with no_grad():
            t._assign(value, "copy_")
        return
    if t._alias is not None and t._alias.shape == value._node.buffer.shape:
        np.copyto(t._alias, value._node.buffer)
        t._node = Node("buffer", (), {}, tuple(t._alias.shape), t.dtype, buffer=t._alias)
    else:
        t._node = value._node
    t._vc.value += 1


def _buffer_tensor(array: np.ndarray, dtype: dt.DType) -> Tensor:
    return Tensor._wrap(Node("buffer", (), {}, tuple(array.shape), dtype, buffer=array))


def function(fn: Callable | None = None, *, level: int = 3, backend: str = "c", warmup: int = 1,
             memory_budget: int | str | None = None, strict: bool = False, runtime: str = "native",
             track: bool = False, offload: str = "auto",
             placement: dict | None = None, transport: Any = None):
    """Trace `fn` into one static graph, compile it once and replay it on later calls.

    The first `warmup` calls run eagerly (so optimizer state and lazily created
    members exist); the next call traces `fn` on placeholder inputs — including
    any `loss.backward()` and `optimizer.step()` inside — compiles the graph and
    runs it; later calls with the same input signature (dtypes, shapes,
    requires_grad, and the values of non-tensor arguments) only replay it.
    Parameters, optimizer state and `.grad` attributes that `fn` updates are
    written back, so eager code sees them: with the native runtime, straight
    into their own memory (no copy, no new array) whenever nothing else can
    see that memory (no NumPy array or view of it, no alias, no pending op
    reading the old value); otherwise as new values. A tensor the function
    reads that is replaced, freed, or changes shape, dtype or requires_grad,
    and a module or optimizer that gains or swaps parameters (assignment,
    ``add_param_group``, ``load_state_dict``), make the next call trace again
    (after the latter, one eager call first, as the warm-up did).

    Python control flow is traced by value: an `if` on a Python number is fixed
    at trace time (a different value is a different signature and retraces),
    and reading a computed tensor's value inside `fn` (`.item()`, `bool(t)`)
    raises; use `loom.cond` and `loom.while_loop` for data-dependent control
    flow. Tensors created inside `fn` from Python data are constants of the
    graph; pass changing data as arguments. A new input shape traces again;
    kernels are specialised by structure, not size, so it compiles no new
    kernel, and a trace that differs from an earlier one only in sizes
    reuses that one's optimised graph with the new sizes instead of running
    the pass pipeline (`loom.compiler.respecialize`; same results, bit for
    bit).

    Parameters
    ----------
    fn : the function to trace
    level : optimisation level of the pass pipeline (0-3, default 3)
    backend : "c" (generated C kernels), "reference" (NumPy interpreter) or a plugin name such as "xla"
    warmup : number of eager calls before tracing
    memory_budget : int or str, optional
        Fit the compiled step's memory (its planned arena of intermediates
        plus the arrays it returns: new parameters, optimizer state, grads)
        under this many bytes (an int, or a string such as ``"256MB"``) by
        recomputing activations in the backward instead of keeping them or
        offloading them to disk, as the cost model chooses (`offload`,
        `loom.compiler.remat`); results stay bit-identical. A budget that
        cannot be met warns (`loom.LoomWarning`) and runs with the smallest
        plan found; `memory_reports` and `explain()` say what was done.
        With ``runtime="actors"`` the budget covers every task's arena and
        the values in flight in the output registers; it is split among the
        tasks, each fitted to its share (`loom.compiler.partition.fit_budget`).
    strict : bool
        With `memory_budget`: raise `loom.MemoryBudgetError` instead of warning.
    offload : str
        With `memory_budget`, the storage tiers a saved activation may go to:
        ``"auto"`` (default: per value, whichever the cost model says is
        cheaper: recompute FLOPs at the measured rate, or bytes at the
        measured disk bandwidth), ``"never"`` (recompute only) or ``"disk"``
        (offload to a memory-mapped file and prefetch it back before the
        backward reads it). Without `memory_budget` it has no effect: nothing
        is recomputed or offloaded. Results stay bit-identical; see
        docs/memory-budget.md.
    runtime : str
        ``"native"`` (default): the whole step is one compiled program.
        ``"actors"``: the graph is partitioned into tasks — pipeline stages
        marked with `loom.stage` and independent branches — each compiled
        and run by its own actor (`loom.runtime.actors`); branches run in
        parallel and `Function.map` pipelines stages over micro-batches.
        Results are identical to the native runtime; a graph that is one
        task runs exactly as the native step does.
    track : bool
        With ``runtime="actors"``: keep every actor's state transitions.
    placement, transport : dict, loom.runtime.transport.Transport
        With ``runtime="actors"``: run stage k's tasks on rank ``placement[k]``
        of `transport` (`MpiTransport`); every rank calls the function with
        the same arguments and gets every output (docs/runtime.md).

    Examples
    --------
    >>> w = loom.ones(3, requires_grad=True)
    >>> opt = loom.optim.SGD([w], lr=0.1)
    >>> @loom.function
    ... def step(x):
    ...     opt.zero_grad()
    ...     loss = (w * x).sum()
    ...     loss.backward()
    ...     opt.step()
    ...     return loss
    >>> for _ in range(3):
    ...     loss = step(loom.ones(3))
    >>> [round(v, 4) for v in w.tolist()]
    [0.7, 0.7, 0.7]
    """
    options: dict[str, Any] = dict(level=level, backend=backend, warmup=warmup, memory_budget=memory_budget,
                                  strict=strict, runtime=runtime, track=track, offload=offload,
                                  placement=placement, transport=transport)
    if fn is None:
        return lambda f: Function(f, **options)
    return Function(fn, **options)


jit = function


class stage:
    """Mark the ops run inside this block as pipeline stage `k` of a ``loom.function(runtime="actors")``.

    While a function is traced, every node created inside ``with
    loom.stage(k):`` belongs to stage k; the actor runtime runs each stage as
    its own task, so with `Function.map` stage k of one micro-batch overlaps
    stage k+1 of the previous one. The backward of a stage's ops is a task of
    its own, placed with the stage (``placement``). A loop over micro-batches
    inside one traced step enters each stage once per micro-batch; each
    micro-batch's stages (forward and backward) are tasks of their own, so
    they pipeline within the step. Other unmarked ops (the loss, an optimizer
    update) join the latest stage they read from. Outside a trace, and with
    the native runtime, the marker does nothing.

    Parameters
    ----------
    k : int
        The stage number (>= 0); later stages may read earlier ones' values.

    Examples
    --------
    >>> with loom.stage(1):
    ...     y = loom.ones(2) * 3     # eager: no effect
    >>> y.tolist()
    [3.0, 3.0]
    """

    def __init__(self, k: int) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise LoomValueError(f"loom.stage: the stage must be an int >= 0, got {k!r}")
        self.k = k
        self._lo: int | None = None

    def __enter__(self) -> "stage":
        if _realize.active_trace is not None:
            self._lo = _next_node_id()
        return self

    def __exit__(self, *exc) -> None:
        tr = _realize.active_trace
        if tr is not None and self._lo is not None:
            visit = sum(1 for _, _, k, _ in tr.stages if k == self.k)
            tr.stages.append((self._lo, _next_node_id(), self.k, visit))
        self._lo = None


def _next_node_id() -> int:
    return Node("const", (), {}, (), dt.float32).id


# ---------------------------------------------------------------- control flow

def cond(pred, true_fn: Callable, false_fn: Callable, *operands):
    """`true_fn(*operands)` if `pred` else `false_fn(*operands)`, usable inside traced functions.

    Eagerly only the chosen branch runs. Inside a trace both branches are
    traced and the results are selected elementwise by `pred` (so both must
    return tensors of the same structure and shapes); gradients flow through
    the selected branch.
    """
    if not isinstance(pred, Tensor):
        return true_fn(*operands) if pred else false_fn(*operands)
    if pred.numel() != 1:
        raise LoomError(f"loom.cond: pred must hold one element, got shape {fmt_shape(pred.shape)}")
    if not tracing():
        return true_fn(*operands) if bool(pred) else false_fn(*operands)
    a_leaves: list[Tensor] = []
    b_leaves: list[Tensor] = []
    a_spec = _flatten(true_fn(*operands), a_leaves)
    b_spec = _flatten(false_fn(*operands), b_leaves)
    if _strip(a_spec) != _strip(b_spec):
        raise LoomError("loom.cond: both branches must return the same structure of tensors")
    from loom.functional.math import where
    p = pred.reshape(()).to(dt.bool_)
    out = []
    for a, b in zip(a_leaves, b_leaves):
        if tuple(a.shape) != tuple(b.shape):
            raise LoomError(f"loom.cond: branch results differ in shape: {fmt_shape(a.shape)} and "
                            f"{fmt_shape(b.shape)}")
        out.append(where(p, a, b))
    return _unflatten(a_spec, out)


def _strip(spec):
    if spec[0] == "T":
        return "T"
    if spec[0] == "C":
        return spec
    if spec[0] == "dict":
        return ("dict", [(k, _strip(v)) for k, v in spec[1]])
    return (spec[0], [_strip(v) for v in spec[2]])


def while_loop(cond_fn: Callable, body_fn: Callable, loop_vars):
    """Run `loop_vars = body_fn(*loop_vars)` while `cond_fn(*loop_vars)` holds; returns the final vars.

    Eagerly this is a Python loop. Inside a trace the loop becomes one graph
    node per carried value, holding the traced condition and body as
    subgraphs, so the number of iterations may depend on data. Traced loops
    are not differentiable.
    """
    single = isinstance(loop_vars, Tensor)
    vars_ = [loop_vars] if single else list(loop_vars)
    if not tracing():
        while bool(cond_fn(*vars_)):
            out = body_fn(*vars_)
            vars_ = [out] if isinstance(out, Tensor) else list(out)
        return vars_[0] if single else tuple(vars_)
    for v in vars_:
        if not isinstance(v, Tensor):
            raise LoomError("loom.while_loop: inside a traced function every loop variable must be a tensor")
        if v.requires_grad and is_grad_enabled():
            raise LoomError("loom.while_loop: gradients through a traced while_loop are not supported; "
                            "detach the loop variables or compute the loop outside loom.function")
    cond_graph = _subgraph(cond_fn, vars_, "condition")
    body_graph = _subgraph(body_fn, vars_, "body")
    if len(body_graph.outputs) != len(vars_):
        raise LoomError(f"loom.while_loop: body returned {len(body_graph.outputs)} values for "
                        f"{len(vars_)} loop variables")
    for v, o in zip(vars_, body_graph.outputs):
        if tuple(v.shape) != tuple(o.shape) or v.dtype is not o.dtype:
            raise LoomError(f"loom.while_loop: the body changes a loop variable from "
                            f"{v.dtype.name}{fmt_shape(v.shape)} to {o.dtype.name}{fmt_shape(o.shape)}")
    outs = tuple(apply("while_loop", tuple(vars_), {"cond": cond_graph, "body": body_graph, "index": i})
                 for i in range(len(vars_)))
    return outs[0] if single else outs


def _subgraph(fn: Callable, vars_: list[Tensor], what: str) -> Graph:
    """Trace `fn` over fresh placeholders shaped like `vars_` into a standalone Graph."""
    g = Graph()
    inner = _Trace()
    inner.loop_part = what if _realize.active_trace is not None else None
    holders = [Tensor._wrap(Node("input", (), {"shape": tuple(v.shape), "dtype": v.dtype},
                                 tuple(v.shape), v.dtype)) for v in vars_]
    saved = _realize.active_trace
    _realize.active_trace = inner
    try:
        from loom.autograd.grad_mode import no_grad
        with no_grad():
            out = fn(*holders)
    finally:
        _realize.active_trace = saved
    outs = [out] if isinstance(out, Tensor) else list(out)
    if inner.external:
        raise LoomError(f"loom.while_loop: the loop {what} reads tensors from outside the loop; pass "
                        "them as loop variables")
    mapping: dict[int, Node] = {}
    for h in holders:
        mapping[h._node.id] = g.add_input(h.shape, h.dtype)
    for n in _topo([o._node for o in outs]):
        if n.id in mapping:
            continue
        if n.op == "buffer":
            mapping[n.id] = g.add_constant(n.buffer, dtype=n.dtype)
        elif n.op == "input":
            raise LoomError(f"loom.while_loop: the loop {what} uses a value from outside the loop")
        else:
            mapping[n.id] = g.add_node(n.op, [mapping[i.id] for i in n.inputs], dict(n.attrs))
    g.outputs = [mapping[o._node.id] for o in outs]
    if what == "condition" and (len(outs) != 1 or math_prod(outs[0].shape) != 1):
        raise LoomError("loom.while_loop: the condition must return one single-element tensor")
    return g


def math_prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _infer_while(inputs, attrs):
    o = attrs["body"].outputs[attrs["index"]]
    return tuple(o.shape), o.dtype


# id(body) -> (weakref to body, copies of the loop's inputs, results): the nodes of one loop (one
# per variable) share one run. A hit needs the same body and the same input values: array ids
# are recycled once arrays are freed, and the executor reuses buffers in place.
_LOOP_CACHE: dict[int, tuple] = {}


def _same_values(kept: list[np.ndarray], arrays) -> bool:
    if len(kept) != len(arrays):
        return False
    for k, a in zip(kept, arrays):
        a = np.asarray(a)
        if k.dtype != a.dtype or k.shape != a.shape or k.tobytes() != a.tobytes():
            return False
    return True


def _while_impl(*arrays_and_attrs):
    *arrays, attrs = arrays_and_attrs
    cond_g, body_g = attrs["cond"], attrs["body"]
    hit = _LOOP_CACHE.get(id(body_g))
    if hit is not None and hit[0]() is body_g and _same_values(hit[1], arrays):
        return hit[2][attrs["index"]]
    # The interpreter hands primitives half-precision values in float32; the subgraphs
    # take and give stored values, so convert at the loop's edges.
    dtypes = [p.dtype for p in body_g.inputs]
    values = [reference.from_compute(np.asarray(a), d) for a, d in zip(arrays, dtypes)]
    while bool(_run_reference(cond_g, *values)[0].reshape(())):
        values = list(_run_reference(body_g, *values))
    values = [reference.to_compute(v, d) for v, d in zip(values, dtypes)]
    _LOOP_CACHE[id(body_g)] = (weakref.ref(body_g), [np.array(a) for a in arrays], values)
    return values[attrs["index"]]


def _while_attrs(inputs, attrs):
    from loom.ir import ops

    ops._attr_names("while_loop", attrs, ("cond", "body", "index"))
    for name in ("cond", "body"):
        if not isinstance(attrs[name], Graph):
            raise ops._bad_attr("while_loop", name, attrs[name], "a loom.ir.Graph", LoomError)
    n = len(attrs["body"].outputs)
    ops._int_attr("while_loop", "index", attrs["index"], 0, n, f" (one of the body's {n} outputs)")


if "while_loop" not in PRIMITIVES:
    from loom.ir.ops import register
    register("while_loop", "control", -1, _infer_while, _while_impl, check_attrs=_while_attrs)
