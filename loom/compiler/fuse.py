"""Fusion: group elementwise ops, reductions and the movement ops feeding them into ``fused`` nodes.

A ``fused`` node (primitive kind ``"fused"``) stands for one kernel. Its
inputs are the group's external inputs, in order of first use, and its attrs
are ``{"body": Graph}``: a graph whose placeholders match those inputs one to
one and whose single output is the group's result. On the reference path the
node evaluates its body node by node, so a fused graph computes exactly what
the unfused one did; `loom.codegen` compiles the same body to C.

Grouping rules (a group grows backwards from its root, the one node whose
value leaves the group):

- elementwise primitives (unary, binary, compare, ternary, cast) chain;
- reshape/permute/expand/slice/flip/pad join a group when they feed a node
  already in it: in a kernel they are index arithmetic;
- a group holds at most one reduction (sum/prod/max/min). It takes in its
  elementwise/movement producers, and elementwise nodes may consume its
  result inside the group, but no movement op may sit between the reduction
  and the root (that would re-run the reduction at other indices), except
  one: a last-axis reduction broadcast back along that axis by an expand
  (softmax's sum, layer_norm's mean) makes a row kernel, which reduces each
  row once and then writes it;
- a node joins only if every consumer is in the group and it is not a graph
  output, so a group has exactly one value consumed outside;
- an expensive elementwise op (exp, log, sqrt, div, tanh, ...) does not join
  through an expand: the kernel would recompute it for every broadcast copy,
  so it gets its own kernel on the small shape;
- matmul, gather, scatter_add, argsort and sources stay library nodes; a
  ``const`` feeding a group is copied into the body (a scalar in the kernel);
- a group holds at most ``MAX_GROUP`` nodes (a longer chain becomes several kernels);
- nodes that read or make complex values stay unfused (the C code generator has no complex types);
- integer div/floordiv/mod stay unfused: dividing by zero is an error the
  reference path reports, and a kernel has no way to.

Before grouping, a cheap value read by several kernels is recomputed in each
(`recompute_cheap`): a group of at most ``RECOMPUTE_OPS`` cheap elementwise
ops (and any movement ops) read by several other groups, whose full-size
inputs are no more bytes than its value, is copied into each. Writing such a
value once and reading it back costs more memory traffic than the few flops
it saves (batch norm's centred input and normalised output, a broadcast
copy: each stored one is a full pass over an activation).
"""
from __future__ import annotations

import heapq

import numpy as np

from loom.errors import DTypeError, GraphError, ShapeError, fmt_shape
from loom.ir import ops
from loom.ir.graph import Graph
from loom.ir.node import Node
from loom.runtime import reference

ELEMENTWISE_KINDS = frozenset({"unary", "binary", "compare", "ternary"})
FUSIBLE_MOVEMENT = frozenset({"reshape", "permute", "expand", "slice", "flip", "pad"})
REDUCTIONS = frozenset({"sum", "prod", "max", "min"})
_CHECKED_DIVISION = frozenset({"div", "floordiv", "mod"})
# Nodes per kernel at most: bounds the generated C (and the code generator's recursion) for very long
# elementwise chains; a longer chain becomes several kernels.
MAX_GROUP = 256
# Elementwise ops costly enough that recomputing them for every copy an expand makes is a loss.
EXPENSIVE = frozenset({"exp", "log", "log1p", "expm1", "sqrt", "recip", "div", "pow", "sin", "cos", "tan",
                       "tanh", "erf", "atan2"})
# Elementwise ops a kernel may recompute per reader instead of reading a stored value (`recompute_cheap`).
RECOMPUTE_OPS = 6


# ---------------------------------------------------------------- the "fused" primitive

def _infer_fused(inputs, attrs):
    body = attrs["body"]
    if not isinstance(body, Graph) or len(body.outputs) != 1:
        raise GraphError("loom.fused: attr 'body' must be a loom.ir.Graph with exactly one output")
    params = body.inputs
    if len(inputs) != len(params):
        raise GraphError(f"loom.fused: the body takes {len(params)} inputs, got {len(inputs)}")
    for k, (i, p) in enumerate(zip(inputs, params)):
        if tuple(i.shape) != tuple(p.shape):
            raise ShapeError(f"loom.fused: input {k} is {fmt_shape(i.shape)} but the body expects "
                             f"{fmt_shape(p.shape)}")
        if i.dtype is not p.dtype:
            raise DTypeError(f"loom.fused: input {k} is {i.dtype.name} but the body expects {p.dtype.name}")
    out = body.outputs[0]
    return tuple(out.shape), out.dtype




def run_body(body: Graph, arrays: list[np.ndarray]) -> np.ndarray:
    """Evaluate a fused body on stored-form arrays with the reference interpreter."""
    return reference.run_subgraph(body, arrays)


def _fused_impl(*args):
    *arrays, attrs = args
    body = attrs["body"]
    # reference.evaluate hands primitives half-precision inputs widened to float32 and narrows the
    # result: undo that around the body, which works on stored forms (both conversions are exact).
    stored = [reference.from_compute(a, p.dtype) for a, p in zip(arrays, body.inputs)]
    out = body.outputs[0]
    return reference.to_compute(run_body(body, stored), out.dtype)


def _fused_attrs(inputs, attrs):
    ops._attr_names("fused", attrs, ("body",))
    if not isinstance(attrs["body"], Graph):
        raise ops._bad_attr("fused", "body", attrs["body"], "a loom.ir.Graph", GraphError)


if "fused" not in ops.PRIMITIVES:
    ops.register("fused", "fused", -1, _infer_fused, _fused_impl, check_attrs=_fused_attrs)


# ---------------------------------------------------------------- grouping

def fusible(node: Node) -> str | None:
    """The role `node` can play in a group: "elementwise", "reduce", "movement", or None."""
    prim = ops.PRIMITIVES.get(node.op)
    if prim is None:
        return None
    if node.dtype.category == 3 or any(i.dtype.category == 3 for i in node.inputs):
        return None  # Kernels have no complex types: complex values stay on the reference path.
    if prim.kind in ELEMENTWISE_KINDS:
        if node.op in _CHECKED_DIVISION and not node.dtype.is_floating_point:
            return None
        return "elementwise"
    if node.op in REDUCTIONS:
        return "reduce"
    if node.op in FUSIBLE_MOVEMENT:
        return "movement"
    return None


def find_groups(graph: Graph, order: list[Node] | None = None,
                roles: dict[Node, str | None] | None = None) -> list[list[Node]]:
    """The fusion groups of `graph`, each a list of nodes in topological order ending with its root.

    `order`: the graph's `topological_order()`, when the caller has it already; `roles`: `fusible` of nodes
    already asked (filled in for the others), for a caller that groups the graph again after editing it."""
    if order is None:
        order = graph.topological_order()
    pos = {n: k for k, n in enumerate(order)}
    outputs = set(graph.outputs)
    taken: set[Node] = set()
    groups: list[list[Node]] = []
    # Each node's role, decided once (a node is met many times; its op and its inputs' dtypes never change).
    if roles is None:
        roles = {}
    for n in order:
        if n not in roles:
            roles[n] = fusible(n)
    users = graph._users  # Read only: consumers() would copy each node's list.
    for root in reversed(order):
        role = roles[root]
        if root in taken or role not in ("elementwise", "reduce"):
            continue
        members = {root}
        movement_above = {root: False}  # A movement op lies between the node and the root.
        broadcast_above = {root: False}  # An expand lies between them: the node would run per copy.
        has_reduce = role == "reduce"
        # Whether a member's value is read on the reducing side of a row kernel (below its row reduction)
        # and on the writing side: a row kernel computes a node read on both sides twice per element.
        sides = {root: (False, True)}
        row_reduce: set[Node] = set()
        heap = [(-pos[i], i.id, i) for i in set(root.inputs)]
        heapq.heapify(heap)
        seen: set[Node] = set()
        while heap and len(members) < MAX_GROUP:  # Latest first: consumers are decided before it.
            _, _, p = heapq.heappop(heap)
            if p in seen:
                continue
            seen.add(p)
            role = roles[p]
            if role is None or p in taken or p in outputs:
                continue
            consumers = users[p]
            # One walk over the consumers: all inside the group? a movement op or an expand below p?
            # which sides of a row kernel read p?
            inside, above, broadcast, reducing, writing = True, False, False, False, False
            for c in consumers:
                if c not in members:
                    inside = False
                    break
                above = above or movement_above[c] or roles[c] == "movement"
                broadcast = broadcast or broadcast_above[c] or c.op == "expand"
                if c in row_reduce:
                    reducing = True
                else:
                    r, w = sides[c]
                    reducing, writing = reducing or r, writing or w
            if not inside:
                continue
            row = role == "reduce" and _row_broadcast(p, consumers, movement_above)
            if role == "reduce" and (has_reduce or (above and not row)):
                continue
            if broadcast and p.op in EXPENSIVE:
                continue  # Cheaper as its own kernel on the small shape than recomputed per broadcast copy.
            side = (reducing, writing)
            if side == (True, True) and p.op in EXPENSIVE:
                continue  # Computed once into memory beats twice per element in the row kernel.
            if row:  # The kernel reduces each row once and writes it: no movement, no broadcast below.
                above = broadcast = False
                row_reduce.add(p)
            sides[p] = side
            members.add(p)
            movement_above[p] = above
            broadcast_above[p] = broadcast
            has_reduce |= role == "reduce"
            for i in set(p.inputs):
                if i not in seen:
                    heapq.heappush(heap, (-pos[i], i.id, i))
        taken |= members
        groups.append(sorted(members, key=pos.__getitem__))
    groups.reverse()
    return groups


def _row_broadcast(node: Node, consumers, movement_above: dict) -> bool:
    """Whether reduction `node` is a row reduction whose every consumer broadcasts it back along the row.

    That is a last-axis reduction with keepdim read only through expands to its input's shape, each
    expand read by nodes with no movement between them and the root (softmax's sum before the divide,
    layer_norm's mean before the subtract). Code generation makes such a group a row kernel.
    """
    x = node.inputs[0]
    axes = tuple(a % max(x.ndim, 1) for a in node.attrs.get("axes", ()))
    if x.ndim == 0 or axes != (x.ndim - 1,) or not node.attrs.get("keepdim", False):
        return False
    for c in consumers:
        if c.op != "expand" or tuple(c.shape) != tuple(x.shape) or movement_above.get(c, True):
            return False
    return True


def fuse_group(graph: Graph, members: list[Node], *, remove: bool = True) -> Node:
    """Replace a group (topological order, root last) by one ``fused`` node; return that node.

    With ``remove=False`` the group's nodes stay in the graph, unused (`fuse` removes all groups at once)."""
    root = members[-1]
    inside = set(members)
    external: dict[Node, None] = {}
    for m in members:
        for i in m.inputs:
            if i not in inside and i.op != "const":
                external[i] = None
    ext = list(external)
    # The body computes the root from inputs of the externals' shapes: the fused node has the root's shape and
    # dtype (what add_node would infer, one loop over the inputs later).
    fused = graph._insert(Node("fused", tuple(ext), {"body": _body(ext, root)}, root.shape, root.dtype,
                               ext[0].device if ext else "cpu", root.name))
    graph.replace(root, fused, check_cycles=False)  # Externals precede the root: no cycle possible.
    if remove:
        graph.remove_subgraph(members)
    return fused


def _body(ext: list[Node], root: Node) -> Graph:
    """`Graph.extract(ext, [root])` for a group: its nodes were checked when they entered the graph, so they
    are copied as they are, without inferring each one's shape again."""
    body = Graph()
    mapping: dict[Node, Node] = {}
    for n in ext:
        p = Node("input", (), {"shape": n.shape, "dtype": n.dtype}, n.shape, n.dtype, n.device, n.name)
        body._insert(p)
        body._inputs.append(p)
        mapping[n] = p
    # Members and copied consts (every other input of a member is external), each after its inputs: the
    # order extract's walk gives.
    stack = [(root, iter(root.inputs))]
    seen = set(ext)
    seen.add(root)
    while stack:
        n, pending = stack[-1]
        for i in pending:
            if i not in seen:
                seen.add(i)
                stack.append((i, iter(i.inputs)))
                break
        else:
            stack.pop()
            mapping[n] = body._insert(Node(n.op, tuple([mapping[i] for i in n.inputs]), dict(n.attrs), n.shape,
                                           n.dtype, n.device, n.name, buffer=n.buffer))
    body._outputs = [mapping[root]]
    return body


def _nbytes(n: Node) -> int:
    return int(np.prod(n.shape, dtype=np.int64)) * n.dtype.np.itemsize


def _recomputable(members: list[Node], outputs: set) -> bool:
    """Whether a group's value is cheap enough for each reader to recompute it (see `recompute_cheap`):
    few cheap ops, and its full-size inputs are no more bytes than the value itself, so that a reader
    recomputing it reads no more memory than one loading it; none of them a matmul (whose first
    reader runs on the GEMM's row blocks)."""
    root = members[-1]
    if root in outputs or sum(fusible(m) == "elementwise" for m in members) > RECOMPUTE_OPS:
        return False
    if not all(fusible(m) in ("elementwise", "movement") and m.op not in EXPENSIVE for m in members):
        return False
    inside = set(members)
    size = int(np.prod(root.shape, dtype=np.int64))
    # A const is a scalar in the kernel, whatever its shape: it reads no memory.
    full = [i for i in {i for m in members for i in m.inputs if i not in inside and i.op != "const"}
            if int(np.prod(i.shape, dtype=np.int64)) >= size]
    if any(i.op == "matmul" for i in full):
        return False  # It runs as the GEMM's epilogue, on row blocks still in cache: storing it is cheap.
    return sum(_nbytes(i) for i in full) <= _nbytes(root)


def recompute_cheap(graph: Graph, rounds: int = 3) -> int:
    """Copy cheap shared values into each kernel that reads them (in place); returns the copies made.

    Grouping is tried first: a group (no reduction, no `EXPENSIVE` op, at most
    `RECOMPUTE_OPS` elementwise ops, not a graph output, reading no more bytes of
    full-size inputs than its value has), or a movement op in no group, whose
    value is read by nodes of two or more groups is copied once per further group,
    so each group computes it itself instead of reading it from memory. A copied
    group's own inputs may then qualify in turn: `rounds` bounds the cascade.
    """
    return _recompute_cheap(graph, rounds)[0]


def _recompute_cheap(graph: Graph, rounds: int) -> tuple[int, list[list[Node]] | None]:
    """`recompute_cheap`, and the graph's fusion groups when its last round copied nothing (None otherwise):
    the graph is then as that round grouped it, and `fuse` need not group it again."""
    from loom.compiler.passes.prune import keep_walk_order

    outputs = set(graph.outputs)
    made = 0
    roles: dict[Node, str | None] = {}
    for _ in range(rounds):
        order = graph.topological_order()  # One walk per round: the graph changes only after the reads below.
        groups = find_groups(graph, order, roles)
        owner = {m: k for k, members in enumerate(groups) for m in members}
        # Kernels reading a gather keep their inputs: the native driver runs gather * w -> scatter_add as one
        # sparse product when the product kernel reads exactly the gather and w.
        gathered = {owner[c] for n in order if n.op == "gather" for c in graph.consumers(n) if c in owner}
        before, start, copies = made, list(graph._nodes), []
        # Movement ops left out of every group (read by several) are free to recompute: index arithmetic.
        loose = [[n] for n in order if roles[n] == "movement" and n not in owner]
        # Readers first: a copy joins its readers' group (owner), so its own inputs may be copied this round.
        for members in list(reversed(groups)) + loose:
            root = members[-1]
            readers = graph.consumers(root)
            if len(readers) < 2 or any(c not in owner or owner[c] in gathered for c in readers) or \
                    not _recomputable(members, outputs):
                continue
            by_group: dict[int, list[Node]] = {}
            for c in readers:
                by_group.setdefault(owner[c], []).append(c)
            for gid, cs in list(by_group.items())[1:]:  # The first group keeps the original.
                mapping: dict[Node, Node] = {}
                for m in members:
                    mapping[m] = graph.add_node(m.op, [mapping.get(i, i) for i in m.inputs], dict(m.attrs),
                                                name=m.name)
                    owner[mapping[m]] = gid
                    copies.append(mapping[m])
                for c in cs:
                    for k, i in enumerate(c.inputs):
                        if i is root:
                            graph.set_input(c, k, mapping[root])
                made += 1
        if made == before:
            return made, groups
        keep_walk_order(graph, start, copies)  # The next round's walk, without walking.
    return made, None


def fuse(graph: Graph) -> Graph:
    """Group the graph's fusible nodes and replace each group by a ``fused`` node (in place).

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((4, 3), "float32")
    >>> e = g.add_node("exp", [g.add_node("neg", [x])])
    >>> g.outputs = [g.add_node("sum", [e], {"axes": (1,), "keepdim": False})]
    >>> [n.op for n in fuse(g)]
    ['input', 'fused']
    >>> [n.op for n in g.outputs[0].attrs["body"]]
    ['input', 'neg', 'exp', 'sum']
    """
    from loom.compiler.passes.prune import drop_unused, keep_walk_order

    consts: list[Node] = []
    _, groups = _recompute_cheap(graph, 3)
    fused: list[Node] = []
    made: list[Node] = []
    start = list(graph._nodes)
    for members in groups if groups is not None else find_groups(graph):
        consts += [i for m in members for i in m.inputs if i.op == "const"]
        made.append(fuse_group(graph, members, remove=False))
        fused += members
    if fused:
        graph.remove_subgraph(fused)  # One removal for every group: each pass over the graph's lists is once.
    drop_unused(graph, consts)  # Constants copied into bodies and used nowhere else.
    # The fused nodes were appended after their consumers: store the nodes in the order topological_order
    # gives, so the passes after this one and the executor get it without walking the graph again.
    if not keep_walk_order(graph, start, made):
        graph._nodes = dict.fromkeys(graph.topological_order())
    return graph
