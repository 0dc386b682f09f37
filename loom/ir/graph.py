"""The Graph: a DAG of IR nodes with a verifier and an editing/query API.

A `Graph` owns its nodes: `placeholder` inputs (op ``"input"``), constants
(op ``"buffer"`` holding an array, or the source primitives ``const``,
``arange``, ``rand``) and primitive applications. Users and compiler passes
edit it only through its methods, and every method checks the whole edit
before touching anything: an edit that would leave a cycle, a shape or dtype
mismatch, a dangling input or an unknown op raises `GraphError` and leaves the
graph exactly as it was.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from loom import dtypes as dt
from loom.errors import DTypeError, GraphError, LoomError, LoomIndexError, ShapeError, fmt_shape
from loom.ir import ops
from loom.ir.node import Node

# Sources that compute their value from attrs alone: extract() may copy them freely.
CONSTANT_OPS = frozenset({"buffer", "const", "arange", "rand"})


class _GraphShapeError(GraphError, ShapeError):
    """A graph edit rejected because shapes do not fit."""


class _GraphDTypeError(GraphError, DTypeError):
    """A graph edit rejected because dtypes do not fit."""


class _GraphIndexError(GraphError, LoomIndexError):
    """A graph edit rejected because an axis or index is out of range."""


def _graph_error(msg: str, cause: BaseException | type | None = None) -> GraphError:
    """A GraphError that is also the kind of error that caused it, so both `except`s catch it."""
    kind = cause if isinstance(cause, type) else type(cause)
    for base, cls in ((ShapeError, _GraphShapeError), (DTypeError, _GraphDTypeError),
                      (LoomIndexError, _GraphIndexError)):
        if issubclass(kind, base):
            return cls(msg)
    return GraphError(msg)


# ---------------------------------------------------------------- the "input" primitive

def _infer_input(inputs, attrs):
    shape = attrs["shape"]
    if not isinstance(shape, (tuple, list)) or not all(
            isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise ShapeError(f"loom.input: shape must be a sequence of non-negative ints, got {shape!r}")
    return tuple(int(s) for s in shape), dt.as_dtype(attrs["dtype"])


def _input_impl(attrs):
    raise GraphError("loom.input: a graph input has no value of its own; pass one to Graph.run")


def _input_attrs(inputs, attrs):
    ops._attr_names("input", attrs, ("shape", "dtype"))
    ops._shape_attr("input", "shape", attrs["shape"])
    ops._dtype_attr("input", "dtype", attrs["dtype"])


if "input" not in ops.PRIMITIVES:
    ops.register("input", "placeholder", 0, _infer_input, _input_impl, check_attrs=_input_attrs)


# ---------------------------------------------------------------- helpers

def _desc(node: Node) -> str:
    label = f" {node.name!r}" if node.name else ""
    return f"%{node.id}{label} ({node.op}: {node.dtype.name}{fmt_shape(node.shape)})"


def _canon(value: Any, key: str, api: str) -> Any:
    """One canonical Python form per attr value, so copies, loads and originals compare equal."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if value is None or isinstance(value, (str, dt.DType, Graph)):
        return value  # A Graph attr is the body of a compiler "fused" node.
    if isinstance(value, (list, tuple)):
        items = tuple(_canon(v, key, api) for v in value)
        # A tuple already canonical stays the same object (`loom.compiler.respecialize` follows it by identity).
        return value if type(value) is tuple and all(a is b for a, b in zip(items, value)) else items
    raise GraphError(f"loom.Graph.{api}: attr {key!r} holds a {type(value).__name__}; attrs hold only "
                     "None, bool, int, float, str, loom dtypes and tuples/lists of these")


def _canon_attrs(attrs: dict | None, api: str) -> dict[str, Any]:
    if attrs is None:
        return {}
    if not isinstance(attrs, dict):
        raise GraphError(f"loom.Graph.{api}: attrs must be a dict, got {type(attrs).__name__}")
    out = {}
    for key, value in attrs.items():
        if not isinstance(key, str):
            raise GraphError(f"loom.Graph.{api}: attr names must be strings, got {key!r}")
        if key == "dtype" and not isinstance(value, dt.DType):
            try:
                value = dt.as_dtype(value)
            except (TypeError, LoomError) as e:
                raise GraphError(f"loom.Graph.{api}: attr 'dtype': {e}") from None
        out[key] = _canon(value, key, api)
    return out


def _frozen(array: np.ndarray) -> np.ndarray:
    """A private read-only copy: graph constants never change under the graph's feet."""
    out = np.array(array, copy=True)
    out.flags.writeable = False
    return out


def _check_name(name, api: str) -> None:
    if name is not None and not isinstance(name, str):
        raise GraphError(f"loom.Graph.{api}: name must be a str or None, got {type(name).__name__}")


def _dfs_order(roots: Iterable[Node], expand: Callable[[Node], Iterable[Node]]) -> list[Node]:
    """Nodes reachable from `roots` through `expand`, inputs before consumers; iterative.

    Raises GraphError naming the nodes of a cycle if it meets one.
    """
    order: list[Node] = []
    state: dict[Node, int] = {}  # 1: on the current path, 2: done.
    for root in roots:
        if root in state:
            continue
        state[root] = 1
        stack: list[tuple[Node, Iterator[Node]]] = [(root, iter(expand(root)))]
        while stack:
            node, pending = stack[-1]
            for i in pending:
                s = state.get(i)
                if s is None:
                    state[i] = 1
                    stack.append((i, iter(expand(i))))
                    break
                if s == 1:
                    path = [n for n, _ in stack]
                    cycle = path[path.index(i):] + [i]
                    raise GraphError("loom.Graph: cycle " + " -> ".join(f"%{n.id} ({n.op})" for n in cycle)
                                     + " (each node consumes the next)")
            else:
                stack.pop()
                state[node] = 2
                order.append(node)
    return order


def _remap_meta(value: Any, mapping: dict[Node, Node]) -> Any:
    """A meta entry for a copied graph: nodes become their copies; dict entries of vanished nodes go."""
    if isinstance(value, Node):
        return mapping.get(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            k2, v2 = _remap_meta(k, mapping), _remap_meta(v, mapping)
            if (k2 is None and isinstance(k, Node)) or (v2 is None and isinstance(v, Node)):
                continue
            out[k2] = v2
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(_remap_meta(v, mapping) for v in value)
    return value


def _fmt_attr(value: Any) -> str:
    if isinstance(value, dt.DType):
        return value.name
    if isinstance(value, tuple):
        return "(" + ", ".join(_fmt_attr(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


# ---------------------------------------------------------------- the graph

# The frontend's tensor type and constructor. `loom.tensor` binds them when it is imported, so a graph
# captures tensors (`from_tensors`, `add_constant`) and returns them (`run`) without the IR importing
# the frontend.
_FRONTEND: list = []


def bind_frontend(tensor_type: type, make_tensor: Callable) -> None:
    """Tell graphs which class is the user-facing tensor and how to make one from data (`loom.tensor` calls it)."""
    _FRONTEND[:] = [tensor_type, make_tensor]


def _frontend() -> tuple[type, Callable]:
    if not _FRONTEND:
        raise LoomError("loom.ir.Graph: no tensor frontend is loaded (import loom first)")
    return _FRONTEND[0], _FRONTEND[1]


class Graph:
    """A DAG of IR nodes with placeholder inputs and a list of outputs.

    Build one with `add_input`, `add_constant` and `add_node`, or capture one
    from lazy tensors with `Graph.from_tensors`; run it with `run`. Every edit
    is checked before it is applied: an edit that would break the DAG raises
    `GraphError` and leaves the graph unchanged.

    Examples
    --------
    >>> import loom
    >>> from loom.ir import Graph
    >>> g = Graph()
    >>> x = g.add_input((2, 3), loom.float32, name="x")
    >>> y = g.add_node("exp", [x])
    >>> g.outputs = [g.add_node("sum", [y], {"axes": (1,), "keepdim": False})]
    >>> g.verify()
    >>> [n.op for n in g]
    ['input', 'exp', 'sum']
    """

    def __init__(self) -> None:
        self._nodes: dict[Node, None] = {}  # Insertion-ordered set.
        self._users: dict[Node, dict[Node, None]] = {}
        self._inputs: list[Node] = []
        self._outputs: list[Node] = []
        # Side tables of compiler passes (e.g. meta["inplace"] = {node: input index}); copy() remaps nodes.
        self.meta: dict[str, Any] = {}

    # ------------------------------------------------------------ inputs and outputs
    @property
    def inputs(self) -> tuple[Node, ...]:
        """The placeholder nodes, in the order `run` takes their values."""
        return tuple(self._inputs)

    @inputs.setter
    def inputs(self, nodes: Sequence[Node]) -> None:
        nodes = list(nodes)
        if len(nodes) != len(self._inputs) or set(nodes) != set(self._inputs):
            raise GraphError("loom.Graph.inputs: can only be set to a reordering of the current "
                             f"placeholders [{', '.join(_desc(n) for n in self._inputs)}]; "
                             "add placeholders with add_input and remove them with remove_node")
        self._inputs = nodes

    @property
    def outputs(self) -> tuple[Node, ...]:
        """The nodes the graph computes, in the order `run` returns them."""
        return tuple(self._outputs)

    @outputs.setter
    def outputs(self, nodes: Sequence[Node] | Node) -> None:
        nodes = [nodes] if isinstance(nodes, Node) else list(nodes)
        for k, n in enumerate(nodes):
            self._check_member(n, f"output {k}", "outputs")
        self._outputs = nodes

    # ------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.topological_order())

    def __contains__(self, node: object) -> bool:
        return isinstance(node, Node) and node in self._nodes

    def topological_order(self) -> list[Node]:
        """Every node, each after all of its inputs (iterative; deterministic).

        Nodes already in topological order keep the order they were added in.

        Examples
        --------
        >>> g = Graph()
        >>> x = g.add_input((3,), "float32")
        >>> y = g.add_node("neg", [x])
        >>> [n.op for n in g.topological_order()]
        ['input', 'neg']
        """
        nodes = self._nodes
        # Most graphs are built inputs first, and then the insertion order is the answer the walk below
        # would give (each node's inputs are done before it): check that in one linear pass.
        done: set[Node] = set()
        for n in nodes:
            for i in n.inputs:
                if i not in done and i in nodes:
                    return _dfs_order(nodes, lambda n: [i for i in n.inputs if i in nodes])
            done.add(n)
        return list(nodes)

    def consumers(self, node: Node) -> list[Node]:
        """The nodes that take `node` as an input (each once), in the order they were wired.

        Examples
        --------
        >>> g = Graph()
        >>> x = g.add_input((3,), "float32")
        >>> y = g.add_node("mul", [x, x])
        >>> g.consumers(x) == [y]
        True
        """
        self._check_member(node, "node", "consumers")
        return list(self._users[node])

    def find(self, op: str | Iterable[str] | None = None, name: str | None = None,
             predicate: Callable[[Node], bool] | None = None) -> list[Node]:
        """Nodes matching every given criterion, in topological order.

        Parameters
        ----------
        op : str or iterable of str, optional
            Primitive name(s) to match.
        name : str, optional
            Exact node name to match.
        predicate : callable, optional
            Called with each node; keeps the node when it returns true.

        Examples
        --------
        >>> g = Graph()
        >>> x = g.add_input((3,), "float32", name="x")
        >>> y = g.add_node("exp", [g.add_node("neg", [x])])
        >>> [n.op for n in g.find(op=("neg", "exp"))]
        ['neg', 'exp']
        >>> g.find(name="x") == [x]
        True
        """
        wanted = None
        if op is not None:
            wanted = {op} if isinstance(op, str) else set(op)
        out = []
        for n in self.topological_order():
            if wanted is not None and n.op not in wanted:
                continue
            if name is not None and n.name != name:
                continue
            if predicate is not None and not predicate(n):
                continue
            out.append(n)
        return out

    # ------------------------------------------------------------ verification
    def verify(self) -> None:
        """Check every invariant of the graph; raise GraphError naming the first one broken.

        Checks: each node's op is a known primitive and each of its inputs
        belongs to this graph; the graph is acyclic; each node's shape and dtype
        are what `loom.ir.ops.infer` gives for its op, inputs and attrs; buffers
        hold arrays of their node's shape and storage dtype; inputs are exactly
        the graph's placeholder nodes; outputs belong to the graph.
        """
        for node in self._nodes:
            if node.op not in ops.PRIMITIVES:
                raise GraphError(f"loom.Graph.verify: node {_desc(node)} has unknown op {node.op!r}")
            for k, i in enumerate(node.inputs):
                if not isinstance(i, Node) or i not in self._nodes:
                    what = _desc(i) if isinstance(i, Node) else repr(i)
                    raise GraphError(f"loom.Graph.verify: input {k} of node {_desc(node)} is {what}, "
                                     "which does not belong to this graph (dangling input)")
        try:
            order = self.topological_order()
        except GraphError as e:
            raise GraphError(f"loom.Graph.verify: {e}") from None
        for node in order:
            shape, dtype = self._infer(node.op, node.inputs, node.attrs, "verify", f"node {_desc(node)}: ")
            if shape != tuple(node.shape) or dtype is not node.dtype:
                raise _graph_error(f"loom.Graph.verify: node {_desc(node)} records "
                                   f"{node.dtype.name}{fmt_shape(node.shape)} but its op and inputs give "
                                   f"{dtype.name}{fmt_shape(shape)}",
                                   ShapeError if shape != tuple(node.shape) else DTypeError)
            if node.op == "buffer":
                b = node.buffer
                if not isinstance(b, np.ndarray) or b.shape != shape or b.dtype != dtype.np:
                    got = f"{b.dtype}{fmt_shape(b.shape)}" if isinstance(b, np.ndarray) else type(b).__name__
                    raise GraphError(f"loom.Graph.verify: buffer node {_desc(node)} holds {got}, expected "
                                     f"a NumPy array of {dtype.np}{fmt_shape(shape)}")
        seen: set[Node] = set()
        for k, n in enumerate(self._inputs):
            if n not in self._nodes or n.op != "input" or n in seen:
                why = ("is listed twice" if n in seen else "is not in this graph" if n not in self._nodes
                       else "is not an 'input' placeholder")
                raise GraphError(f"loom.Graph.verify: graph input {k} {_desc(n)} {why}")
            seen.add(n)
        for n in self._nodes:
            if n.op == "input" and n not in seen:
                raise GraphError(f"loom.Graph.verify: placeholder {_desc(n)} is not listed in graph.inputs")
        for k, n in enumerate(self._outputs):
            if not isinstance(n, Node) or n not in self._nodes:
                what = _desc(n) if isinstance(n, Node) else repr(n)
                raise GraphError(f"loom.Graph.verify: output {k} {what} does not belong to this graph")
        users: dict[Node, dict[Node, None]] = {n: {} for n in self._nodes}
        for n in self._nodes:
            for i in n.inputs:
                users[i][n] = None
        if any(set(users[n]) != set(self._users.get(n, ())) for n in self._nodes):
            raise GraphError("loom.Graph.verify: the consumer index is out of date: a node's inputs were "
                             "changed outside the Graph API (use set_input or replace)")

    # ------------------------------------------------------------ internals
    def _check_member(self, node: Any, what: str, api: str) -> None:
        if not isinstance(node, Node):
            raise GraphError(f"loom.Graph.{api}: {what} must be a Node of this graph, got {type(node).__name__}")
        if node not in self._nodes:
            raise GraphError(f"loom.Graph.{api}: {what} {_desc(node)} does not belong to this graph")

    def _infer(self, op: str, inputs: Sequence[Node], attrs: dict, api: str,
               where: str = "") -> tuple[tuple[int, ...], dt.DType]:
        """ops.infer with every failure turned into a GraphError that names the op."""
        prim = ops.PRIMITIVES.get(op)
        if prim is None:
            raise GraphError(f"loom.Graph.{api}: {where}unknown primitive {op!r}; "
                             f"known: {', '.join(sorted(ops.PRIMITIVES))}")
        try:
            shape, dtype = ops.infer(op, list(inputs), attrs)
        except LoomError as e:
            raise _graph_error(f"loom.Graph.{api}: {where}{e}", e) from None
        except KeyError as e:
            raise GraphError(f"loom.Graph.{api}: {where}primitive {op!r} needs attr {e.args[0]!r}, "
                             f"got attrs {sorted(attrs)}") from None
        except (TypeError, ValueError, IndexError, AttributeError) as e:
            raise GraphError(f"loom.Graph.{api}: {where}attrs {attrs} do not fit primitive {op!r}: {e}") from None
        return tuple(int(s) for s in shape), dt.as_dtype(dtype)

    def _insert(self, node: Node) -> Node:
        self._nodes[node] = None
        self._users[node] = {}
        for i in dict.fromkeys(node.inputs):
            self._users[i][node] = None
        return node

    def _add_buffer(self, array: np.ndarray, dtype: dt.DType, name: str | None = None,
                    device: str = "cpu") -> Node:
        """A constant node over `array` (stored form: bfloat16 as uint16 bits), taken as is."""
        shape = tuple(array.shape)
        if array.dtype != dtype.np:
            raise GraphError(f"loom.Graph.add_constant: a {dtype.name} buffer must be stored as "
                             f"{dtype.np}, got {array.dtype}")
        attrs = {"shape": shape, "dtype": dtype}
        return self._insert(Node("buffer", (), attrs, shape, dtype, device, name, buffer=array))

    def _clone_nodes(self, nodes: Iterable[Node], into: Graph, mapping: dict[Node, Node]) -> None:
        """Copy `nodes` (in topological order) into `into`, their inputs looked up in `mapping`."""
        for n in nodes:
            try:
                ins = tuple(mapping[i] for i in n.inputs)
            except KeyError:
                raise GraphError(f"loom.Graph: node {_desc(n)} has an input outside the nodes being "
                                 "copied; run verify() to find the broken edge") from None
            mapping[n] = into._insert(Node(n.op, ins, dict(n.attrs), tuple(n.shape), n.dtype, n.device,
                                           n.name, buffer=n.buffer))

    def _depends_on(self, start: Node, targets: set[Node]) -> Node | None:
        """The first of `targets` that `start` reaches through its inputs (start included), if any."""
        stack, seen = [start], {start}
        while stack:
            n = stack.pop()
            if n in targets:
                return n
            for i in n.inputs:
                if i not in seen:
                    seen.add(i)
                    stack.append(i)
        return None

    # ------------------------------------------------------------ building
    def add_node(self, op: str, inputs: Sequence[Node] = (), attrs: dict | None = None,
                 name: str | None = None) -> Node:
        """Apply primitive `op` to `inputs`; shape and dtype come from its inference rule.

        Parameters
        ----------
        op : str
            A primitive of `loom.ir.PRIMITIVES` (not ``"input"`` or ``"buffer"``:
            use `add_input` and `add_constant`).
        inputs : sequence of Node
            Nodes of this graph.
        attrs : dict, optional
            The primitive's attributes (see docs/graph-format.md).
        name : str, optional

        Returns
        -------
        Node

        Examples
        --------
        >>> g = Graph()
        >>> a = g.add_input((2, 3), "float32")
        >>> b = g.add_input((3, 4), "float32")
        >>> g.add_node("matmul", [a, b]).shape
        (2, 4)
        """
        inputs = tuple(inputs)
        for k, i in enumerate(inputs):
            self._check_member(i, f"input {k}", "add_node")
        if op in ("input", "buffer"):
            helper = "add_input" if op == "input" else "add_constant"
            raise GraphError(f"loom.Graph.add_node: {op!r} nodes are made with Graph.{helper}")
        _check_name(name, "add_node")
        attrs = _canon_attrs(attrs, "add_node")
        shape, dtype = self._infer(op, inputs, attrs, "add_node")
        device = inputs[0].device if inputs else "cpu"
        return self._insert(Node(op, inputs, attrs, shape, dtype, device, name))

    def add_input(self, shape: Sequence[int], dtype=None, name: str | None = None) -> Node:
        """Add a placeholder whose value is passed to `run`; it is appended to `inputs`.

        Examples
        --------
        >>> g = Graph()
        >>> x = g.add_input((2, 3), "float32", name="x")
        >>> g.inputs == (x,)
        True
        """
        _check_name(name, "add_input")
        attrs = _canon_attrs({"shape": tuple(shape), "dtype": dtype if dtype is not None
                              else dt.get_default_dtype()}, "add_input")
        shape, d = self._infer("input", (), attrs, "add_input")
        node = self._insert(Node("input", (), attrs, shape, d, "cpu", name))
        self._inputs.append(node)
        return node

    def add_constant(self, value: Any, dtype=None, shape: Sequence[int] | None = None,
                     name: str | None = None) -> Node:
        """Add a constant: a scalar becomes a ``const`` node, anything else a ``buffer`` node.

        Parameters
        ----------
        value : scalar, array-like or loom Tensor
            An array or tensor is copied (and realised first if lazy).
        dtype : loom dtype, optional
            Defaults to the dtype loom gives `value` (``loom.tensor`` rules).
        shape : sequence of int, optional
            For a scalar: the shape to fill (default ``()``). For an array it
            must equal the array's shape.

        Examples
        --------
        >>> g = Graph()
        >>> g.add_constant(0.5, "float32", shape=(2,)).op
        'const'
        >>> g.add_constant([1, 2, 3]).dtype
        loom.int64
        """
        Tensor, tensor = _frontend()

        _check_name(name, "add_constant")
        if isinstance(value, (bool, int, float, np.bool_, np.number)) and not isinstance(value, np.ndarray):
            d = dt.as_dtype(dtype) if dtype is not None else dt.scalar_dtype(value)
            v = value.item() if isinstance(value, np.generic) else value
            if d.category == 1 and isinstance(v, float) and math.isfinite(v):
                v = int(v)
            elif d is dt.bool_:
                v = bool(v)
            elif d.is_floating_point:
                v = float(v)
            attrs = _canon_attrs({"value": v, "shape": tuple(shape or ()), "dtype": d}, "add_constant")
            out_shape, d = self._infer("const", (), attrs, "add_constant")
            return self._insert(Node("const", (), attrs, out_shape, d, "cpu", name))
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # Out-of-range values saturate, as in PyTorch.
                t = value if isinstance(value, Tensor) else tensor(value, dtype=dtype)
                if dtype is not None and t.dtype is not dt.as_dtype(dtype):
                    t = t.detach().to(dt.as_dtype(dtype))
                array = t._array()
        except LoomError as e:
            raise _graph_error(f"loom.Graph.add_constant: {e}", e) from None
        except TypeError as e:
            raise GraphError(f"loom.Graph.add_constant: {e}") from None
        if shape is not None and tuple(shape) != tuple(array.shape):
            raise _graph_error(f"loom.Graph.add_constant: shape {fmt_shape(shape)} does not match the "
                               f"value's shape {fmt_shape(array.shape)}", ShapeError)
        return self._add_buffer(_frozen(array), t.dtype, name)

    # ------------------------------------------------------------ editing
    def remove_node(self, node: Node, force: bool = False) -> tuple[Node, ...]:
        """Remove `node`. Refused if other nodes consume it or it is an output, unless `force`.

        With ``force=True`` every node that depends on `node` is removed too
        and dropped from the outputs, so the graph stays a valid DAG.

        Returns
        -------
        tuple of Node
            The nodes removed.

        Examples
        --------
        >>> g = Graph()
        >>> x = g.add_input((3,), "float32")
        >>> y = g.add_node("neg", [x])
        >>> len(g.remove_node(y)), len(g)
        (1, 1)
        """
        return self.remove_subgraph([node], force=force)

    def remove_subgraph(self, nodes: Iterable[Node], force: bool = False) -> tuple[Node, ...]:
        """Remove a set of nodes together.

        Refused if a node outside the set consumes one of them or one of them is
        an output, unless `force`, which also removes everything that depends on
        them and drops those from the outputs.

        Examples
        --------
        >>> g = Graph()
        >>> x = g.add_input((3,), "float32")
        >>> y = g.add_node("exp", [g.add_node("neg", [x])])
        >>> len(g.remove_subgraph(g.find(op=("neg", "exp")))), len(g)
        (2, 1)
        """
        doomed: dict[Node, None] = {}
        for k, n in enumerate([nodes] if isinstance(nodes, Node) else nodes):
            self._check_member(n, f"node {k}", "remove_subgraph")
            doomed[n] = None
        if force:
            stack = list(doomed)
            while stack:
                for c in self._users[stack.pop()]:
                    if c not in doomed:
                        doomed[c] = None
                        stack.append(c)
        else:
            outputs = set(self._outputs) if len(doomed) > 8 else self._outputs  # (Many nodes: one set.)
            for n in doomed:
                outside = [c for c in self._users[n] if c not in doomed]
                if outside:
                    raise GraphError(f"loom.Graph.remove_node: {_desc(n)} is still consumed by "
                                     f"{', '.join(_desc(c) for c in outside)}; remove or rewire those "
                                     "first, or pass force=True to remove them too")
                if n in outputs:
                    raise GraphError(f"loom.Graph.remove_node: {_desc(n)} is a graph output; change "
                                     "graph.outputs first, or pass force=True to drop it from them")
        for n in doomed:
            for i in n.inputs:
                users = self._users.get(i)
                if users is not None:
                    users.pop(n, None)
        for n in doomed:
            del self._nodes[n]
            del self._users[n]
        if any(n.op == "input" for n in doomed):  # The inputs are the placeholders: none gone, none to drop.
            self._inputs = [n for n in self._inputs if n not in doomed]
        if force and not doomed.keys().isdisjoint(self._outputs):  # (Without force no output is doomed.)
            self._outputs = [n for n in self._outputs if n not in doomed]
        return tuple(doomed)

    def replace(self, old: Node, new: Node, *, check_cycles: bool = True) -> None:
        """Make every consumer of `old` (except `new` itself) and every output `old` use `new`.

        `check_cycles=False` skips the cycle check, which walks all of `new`'s
        ancestors: for compiler passes that know `new` precedes every consumer
        of `old` in topological order (verify() still finds a cycle if not).

        `new` must have `old`'s shape and dtype. `new` may consume `old`, so a
        node can be inserted after another: ``g.replace(x, g.add_node("neg", [x]))``.
        `old` stays in the graph (a pruning pass removes it once unused).

        Examples
        --------
        >>> g = Graph()
        >>> x = g.add_input((3,), "float32")
        >>> y = g.add_node("exp", [x])
        >>> g.outputs = [y]
        >>> z = g.add_node("neg", [x])
        >>> g.replace(x, z)
        >>> y.inputs == (z,) and z.inputs == (x,)
        True
        """
        self._check_member(old, "old node", "replace")
        self._check_member(new, "new node", "replace")
        if old is new:
            return
        if tuple(old.shape) != tuple(new.shape) or old.dtype is not new.dtype:
            cause = ShapeError if tuple(old.shape) != tuple(new.shape) else DTypeError
            raise _graph_error(f"loom.Graph.replace: {_desc(new)} cannot replace {_desc(old)}: shape and "
                               "dtype must match", cause)
        rewired = [c for c in self._users[old] if c is not new]
        hit = self._depends_on(new, set(rewired)) if check_cycles and rewired else None
        if hit is not None:
            raise GraphError(f"loom.Graph.replace: {_desc(new)} depends on {_desc(hit)}, which consumes "
                             f"{_desc(old)}; rewiring it to {_desc(new)} would make a cycle")
        for c in rewired:
            c.inputs = tuple(new if i is old else i for i in c.inputs)
            self._users[new][c] = None
            del self._users[old][c]
        if old in self._outputs:
            self._outputs = [new if o is old else o for o in self._outputs]

    def set_input(self, node: Node, index: int, new_input: Node) -> None:
        """Rewire input `index` of `node` to `new_input`.

        Refused if the node's shape or dtype would change, if its op rejects
        the new input, or if the edit would make a cycle.

        Examples
        --------
        >>> g = Graph()
        >>> x, y = g.add_input((3,), "float32"), g.add_input((3,), "float32")
        >>> s = g.add_node("add", [x, x])
        >>> g.set_input(s, 1, y)
        >>> s.inputs == (x, y)
        True
        """
        self._check_member(node, "node", "set_input")
        self._check_member(new_input, "new input", "set_input")
        n = len(node.inputs)
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool) or not -n <= index < n:
            raise _graph_error(f"loom.Graph.set_input: input index {index!r} out of range for {_desc(node)} "
                               f"with {n} inputs", LoomIndexError)
        index = int(index) % n
        if self._depends_on(new_input, {node}) is not None:
            raise GraphError(f"loom.Graph.set_input: {_desc(new_input)} depends on {_desc(node)}; using it "
                             f"as input {index} of {_desc(node)} would make a cycle")
        ins = node.inputs[:index] + (new_input,) + node.inputs[index + 1:]
        shape, dtype = self._infer(node.op, ins, node.attrs, "set_input", f"node {_desc(node)}: ")
        if shape != tuple(node.shape) or dtype is not node.dtype:
            raise _graph_error(f"loom.Graph.set_input: with {_desc(new_input)} as input {index}, {_desc(node)} "
                               f"would become {dtype.name}{fmt_shape(shape)}; rewiring must keep a node's "
                               "shape and dtype", ShapeError if shape != tuple(node.shape) else DTypeError)
        old = node.inputs[index]
        node.inputs = ins
        if old not in ins:
            del self._users[old][node]
        self._users[new_input][node] = None

    def extract(self, inputs: Sequence[Node], outputs: Sequence[Node]) -> Graph:
        """A new Graph of the nodes between `inputs` and `outputs`.

        The given inputs (any nodes) become the new graph's placeholders, in
        order; constants met on the way are copied. Refused if an output
        depends on a placeholder of this graph that is not among `inputs`.

        Examples
        --------
        >>> g = Graph()
        >>> x = g.add_input((3,), "float32")
        >>> y = g.add_node("neg", [x])
        >>> z = g.add_node("exp", [y])
        >>> sub = g.extract([y], [z])
        >>> [n.op for n in sub]
        ['input', 'exp']
        """
        inputs, outputs = list(inputs), list(outputs)
        for k, n in enumerate(inputs):
            self._check_member(n, f"input {k}", "extract")
        for k, n in enumerate(outputs):
            self._check_member(n, f"output {k}", "extract")
        given = set(inputs)
        if len(given) != len(inputs):
            raise GraphError("loom.Graph.extract: an input is listed twice")
        order = _dfs_order(outputs, lambda n: () if n in given else n.inputs)
        for n in order:
            if n.op == "input" and n not in given:
                raise GraphError(f"loom.Graph.extract: the outputs depend on graph input {_desc(n)}, which "
                                 "is not among the given inputs; list it (or a node between it and the "
                                 "outputs) in inputs")
        sub = Graph()
        mapping = {n: sub.add_input(n.shape, n.dtype, n.name) for n in inputs}
        for n, p in mapping.items():
            p.device = n.device
        self._clone_nodes([n for n in order if n not in given], sub, mapping)
        sub._outputs = [mapping[n] for n in outputs]
        return sub

    def copy(self) -> Graph:
        """An independent copy (new nodes; constant buffers, being read-only, are shared).

        Examples
        --------
        >>> g = Graph()
        >>> g.outputs = [g.add_node("neg", [g.add_input((3,), "float32")])]
        >>> h = g.copy()
        >>> len(h), h.outputs[0] is g.outputs[0]
        (2, False)
        """
        out = Graph()
        mapping: dict[Node, Node] = {}
        self._clone_nodes(self.topological_order(), out, mapping)
        out._inputs = [mapping[n] for n in self._inputs]
        out._outputs = [mapping[n] for n in self._outputs]
        out.meta = {k: _remap_meta(v, mapping) for k, v in self.meta.items()}
        return out

    # ------------------------------------------------------------ capture and run
    @classmethod
    def from_tensors(cls, outputs, inputs=None) -> Graph:
        """Capture the pending computation behind lazy tensors as a Graph.

        Parameters
        ----------
        outputs : Tensor or sequence of Tensor
            The tensors to compute; their pending nodes become graph nodes.
        inputs : sequence of Tensor, optional
            Tensors whose current values become placeholders, in order.
            Every other already-computed tensor met on the way becomes a
            constant (a read-only copy of its value).

        Examples
        --------
        >>> import loom
        >>> x = loom.tensor([1.0, 2.0])
        >>> g = Graph.from_tensors(x.exp().sum(), inputs=[x])
        >>> [n.op for n in g]
        ['input', 'exp', 'sum']
        >>> round(g.run([0.0, 0.0])[0].item(), 4)
        2.0
        """
        Tensor, _ = _frontend()

        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        ins = [] if inputs is None else ([inputs] if isinstance(inputs, Tensor) else list(inputs))
        for what, ts in (("outputs", outs), ("inputs", ins)):
            for k, t in enumerate(ts):
                if not isinstance(t, Tensor):
                    raise GraphError(f"loom.Graph.from_tensors: {what}[{k}] must be a loom Tensor, "
                                     f"got {type(t).__name__}")
        g = cls()
        mapping: dict[Node, Node] = {}
        for k, t in enumerate(ins):
            n = t._node
            if n in mapping:
                raise GraphError(f"loom.Graph.from_tensors: inputs[{k}] is the same value as an earlier "
                                 "input (listed twice, or an alias of it)")
            p = g.add_input(n.shape, n.dtype, n.name)
            p.device = n.device
            mapping[n] = p
        order = _dfs_order([t._node for t in outs],
                           lambda n: () if n in mapping or n.buffer is not None else n.inputs)
        for n in order:
            if n in mapping:
                continue
            if n.buffer is not None:
                mapping[n] = g._add_buffer(_frozen(n.buffer), n.dtype, n.name, n.device)
                continue
            if n.op in ("buffer", "input"):
                raise GraphError(f"loom.Graph.from_tensors: node {_desc(n)} has no value to capture")
            attrs = _canon_attrs(n.attrs, "from_tensors")
            mapping[n] = g._insert(Node(n.op, tuple(mapping[i] for i in n.inputs), attrs, tuple(n.shape),
                                        n.dtype, n.device, n.name))
        g._outputs = [mapping[t._node] for t in outs]
        g.verify()
        return g

    def _feed(self, k: int, node: Node, value: Any) -> np.ndarray:
        """The stored-form array for placeholder `node` from a Tensor, array or nested list."""
        Tensor, _ = _frontend()

        want = f"{node.dtype.name}{fmt_shape(node.shape)}"
        if isinstance(value, Tensor):
            if value.dtype is not node.dtype:
                raise _GraphDTypeError(f"loom.Graph.run: input {k} expects {want}, got a "
                                       f"{value.dtype.name}{fmt_shape(value.shape)} tensor")
            array = value._array()
        elif isinstance(value, np.ndarray):
            if node.dtype is dt.bfloat16 and value.dtype.kind == "f":
                array = dt.f32_to_bf16(value.astype(np.float32))
            elif value.dtype != node.dtype.np or node.dtype is dt.bfloat16:
                raise _GraphDTypeError(f"loom.Graph.run: input {k} expects {want}, got a NumPy array of "
                                       f"{value.dtype}{fmt_shape(value.shape)}")
            else:
                array = value
        else:
            try:
                if node.dtype is dt.bfloat16:
                    array = dt.f32_to_bf16(np.asarray(value, np.float32))
                else:
                    array = np.asarray(value, node.dtype.np)
            except (TypeError, ValueError) as e:
                raise GraphError(f"loom.Graph.run: input {k} expects {want}: {e}") from None
        if tuple(array.shape) != tuple(node.shape):
            raise _GraphShapeError(f"loom.Graph.run: input {k} expects {want}, got shape "
                                   f"{fmt_shape(array.shape)}")
        return array

    def run(self, *values) -> tuple:
        """Evaluate the graph on the NumPy reference interpreter.

        Parameters
        ----------
        *values : Tensor, NumPy array or nested lists
            One value per placeholder in `inputs`, of its shape and dtype
            (a bfloat16 input also takes a float array).

        Returns
        -------
        tuple of Tensor
            One realised tensor per output.

        Examples
        --------
        >>> import numpy as np
        >>> g = Graph()
        >>> x = g.add_input((2,), "float32")
        >>> g.outputs = [g.add_node("mul", [x, x])]
        >>> g.run(np.array([2.0, 3.0], np.float32))[0].tolist()
        [4.0, 9.0]
        """
        from loom.runtime import reference
        Tensor, _ = _frontend()

        if len(values) != len(self._inputs):
            raise GraphError(f"loom.Graph.run: the graph takes {len(self._inputs)} inputs "
                             f"({', '.join(_desc(n) for n in self._inputs) or 'none'}), got {len(values)}")
        env: dict[Node, np.ndarray] = {}
        for k, (node, value) in enumerate(zip(self._inputs, values)):
            env[node] = self._feed(k, node, value)
        fed = list(env.values())
        order = _dfs_order(self._outputs, lambda n: () if n in env else n.inputs)
        # Free each intermediate once its last consumer has run.
        uses: dict[Node, int] = {n: 0 for n in order}
        for n in order:
            for i in n.inputs:
                uses[i] += 1
        for o in self._outputs:
            uses[o] += 1
        with np.errstate(all="ignore"):
            for node in order:
                if node in env:
                    continue
                if node.op == "buffer":
                    env[node] = node.buffer
                elif node.op == "input":
                    raise GraphError(f"loom.Graph.run: placeholder {_desc(node)} is not listed in "
                                     "graph.inputs, so it has no value")
                else:
                    env[node] = reference.evaluate(node, [env[i] for i in node.inputs])
                for i in node.inputs:
                    uses[i] -= 1
                    if uses[i] == 0:
                        env.pop(i, None)
        results = []
        for o in self._outputs:
            array = env[o]
            if any(np.may_share_memory(array, f) for f in fed):
                array = np.array(array)  # Results never alias the caller's arrays.
            results.append(Tensor._wrap(Node("buffer", (), {}, tuple(o.shape), o.dtype, o.device,
                                             buffer=array)))
        return tuple(results)

    # ------------------------------------------------------------ printing
    def __str__(self) -> str:
        lines = [f"graph({', '.join(f'%{n.id}' for n in self._inputs)}) {{"]
        for n in self.topological_order():
            label = f" {n.name!r}" if n.name else ""
            attrs = {k: v for k, v in n.attrs.items() if not (n.op in ("input", "buffer") and k in
                                                                ("shape", "dtype"))}
            shown = " {" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(attrs.items())) + "}" if attrs else ""
            ins = ", ".join(f"%{i.id}" for i in n.inputs)
            lines.append(f"  %{n.id}{label} = {n.op}({ins}){shown} : {n.dtype.name}{fmt_shape(n.shape)}")
        lines.append(f"  return {', '.join(f'%{n.id}' for n in self._outputs)}")
        lines.append("}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<loom.ir.Graph: {len(self._nodes)} nodes, {len(self._inputs)} inputs, "
                f"{len(self._outputs)} outputs>")
