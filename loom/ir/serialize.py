"""Graphs to and from strict, language-neutral JSON (the format is specified in docs/graph-format.md).

The round trip is lossless: `to_json(from_json(to_json(g))) == to_json(g)`,
byte for byte, and the loaded graph computes exactly what the original does.
"""
from __future__ import annotations

import base64
import json
import math
import os
import re
import tempfile
from contextlib import suppress
from typing import Any

import numpy as np

from loom import dtypes as dt
from loom.errors import GraphError
from loom.ir.graph import Graph
from loom.ir.node import Node

FORMAT = "loom.graph"
VERSION = 1

_NODE_KEYS = ("id", "op", "inputs", "attrs", "shape", "dtype", "device", "name")

# The deepest nesting of JSON arrays and objects from_json reads. A graph needs 6 levels and
# each subgraph (a fused body, a loop body) about 5 more, so real graphs stay far below it; a
# deeper document is refused up front instead of exhausting the interpreter's stack.
MAX_NESTING = 100
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


# ---------------------------------------------------------------- values

def _encode(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, dt.DType):
        return {"dtype": value.name}
    if isinstance(value, (tuple, list)):
        return [_encode(v, where) for v in value]
    if isinstance(value, Graph):  # Subgraphs: fused kernel bodies, loop conditions and bodies.
        return {"graph": json.loads(to_json(value))}
    raise GraphError(f"loom.to_json: {where} holds a {type(value).__name__}, which the graph format "
                     "cannot store")


def _decode(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return tuple(_decode(v, where) for v in value)
    if isinstance(value, dict):
        if set(value) == {"dtype"}:
            return _dtype(value["dtype"], where)
        if set(value) == {"float"} and value["float"] in ("inf", "-inf", "nan"):
            return float(value["float"])
        if set(value) == {"graph"} and isinstance(value["graph"], dict):
            return _load(value["graph"])
    raise GraphError(f"loom.from_json: {where}: cannot decode attr value {value!r} (expected a number, "
                     'bool, string, null, list, {"dtype": name}, {"float": "inf" | "-inf" | "nan"} '
                     'or {"graph": {...}})')


def _dtype(name: Any, where: str) -> dt.DType:
    if not isinstance(name, str) or name not in {d.name for d in dt.ALL}:
        raise GraphError(f"loom.from_json: {where}: unknown dtype {name!r}; expected one of "
                         f"{[d.name for d in dt.ALL]}")
    return dt.from_name(name)


def _encode_buffer(node: Node) -> dict[str, Any]:
    array = np.asarray(node.buffer)  # Not ascontiguousarray: it turns a 0-d array into shape [1].
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return {"data": base64.b64encode(little.tobytes(order="C")).decode("ascii"), "dtype": node.dtype.name,
            "shape": list(array.shape)}


def _decode_buffer(entry: Any, where: str) -> tuple[np.ndarray, dt.DType]:
    if not isinstance(entry, dict) or set(entry) != {"data", "dtype", "shape"}:
        raise GraphError(f"loom.from_json: {where}: a buffer node needs "
                         '"buffer": {"data", "dtype", "shape"}')
    d = _dtype(entry["dtype"], where)
    shape = _shape(entry["shape"], where)
    try:
        raw = base64.b64decode(entry["data"], validate=True)
    except (TypeError, ValueError) as e:
        raise GraphError(f"loom.from_json: {where}: buffer data is not base64: {e}") from None
    expected = math.prod(shape) * d.np.itemsize
    if len(raw) != expected:
        raise GraphError(f"loom.from_json: {where}: buffer holds {len(raw)} bytes, but "
                         f"{d.name}{list(shape)} needs {expected}")
    array = np.frombuffer(raw, dtype=d.np.newbyteorder("<")).reshape(shape).astype(d.np)
    array.flags.writeable = False
    return array, d


def _shape(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                              for s in value):
        raise GraphError(f"loom.from_json: {where}: shape must be a list of non-negative ints, got {value!r}")
    return tuple(value)


# ---------------------------------------------------------------- graphs

def to_json(graph: Graph) -> str:
    """Serialise a verified graph to strict JSON (one node per line).

    Nodes are numbered 0, 1, ... in the graph's topological order, so the
    text depends only on the graph, not on node identities.

    Examples
    --------
    >>> import loom
    >>> from loom.ir import Graph, to_json, from_json
    >>> g = Graph()
    >>> g.outputs = [g.add_node("neg", [g.add_input((2,), loom.float32)])]
    >>> text = to_json(g)
    >>> to_json(from_json(text)) == text
    True
    """
    if not isinstance(graph, Graph):
        raise GraphError(f"loom.to_json: expected a loom.ir.Graph, got {type(graph).__name__}")
    graph.verify()
    order = graph.topological_order()
    ids = {n: k for k, n in enumerate(order)}
    lines = []
    for n in order:
        entry: dict[str, Any] = {
            "id": ids[n], "op": n.op, "inputs": [ids[i] for i in n.inputs],
            "attrs": {k: _encode(n.attrs[k], f"attr {k!r} of node %{n.id} ({n.op})") for k in sorted(n.attrs)},
            "shape": list(n.shape), "dtype": n.dtype.name, "device": n.device, "name": n.name,
        }
        if n.op == "buffer":
            entry["buffer"] = _encode_buffer(n)
        lines.append(json.dumps(entry, allow_nan=False))
    head = json.dumps({"format": FORMAT, "version": VERSION, "inputs": [ids[n] for n in graph.inputs],
                       "outputs": [ids[n] for n in graph.outputs]}, allow_nan=False)
    body = "[\n" + ",\n".join(lines) + "\n]" if lines else "[]"
    return head[:-1] + ', "nodes": ' + body + "}\n"


def _reject_constant(token: str):
    raise GraphError(f"loom.from_json: {token} is not strict JSON; non-finite floats are written "
                     '{"float": "inf"}')


def _nesting(text: str | bytes) -> int:
    """How deep JSON arrays and objects nest in `text` (brackets inside strings do not count)."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    codes = np.frombuffer(_STRING.sub(b'""', raw), np.uint8)
    step = (np.isin(codes, (ord("["), ord("{"))).astype(np.int64)
            - np.isin(codes, (ord("]"), ord("}"))).astype(np.int64))
    return int(np.cumsum(step).max(initial=0))


def from_json(text: str | bytes) -> Graph:
    """Load a graph written by `to_json` (or by any writer that follows docs/graph-format.md).

    Every node is checked against its primitive's attribute and shape/dtype
    rules (the checks of `Graph.add_node`), so a malformed or inconsistent
    file raises GraphError instead of loading. Documents nesting deeper than
    `MAX_NESTING` levels are refused.
    """
    if not isinstance(text, (str, bytes, bytearray)):
        raise GraphError(f"loom.from_json: expected JSON text (str or bytes), got {type(text).__name__}")
    depth = _nesting(text)
    if depth > MAX_NESTING:
        raise GraphError(f"loom.from_json: the document nests arrays/objects {depth} levels deep; the graph "
                         f"format needs far fewer and loom reads at most {MAX_NESTING}")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise GraphError(f"loom.from_json: not valid JSON: {e}") from None
    except RecursionError:  # pragma: no cover - MAX_NESTING keeps far below the stack limit
        raise GraphError(f"loom.from_json: the document nests too deeply (at most {MAX_NESTING} levels)") from None
    except UnicodeDecodeError as e:
        raise GraphError(f"loom.from_json: not valid UTF-8 JSON text: {e}") from None
    return _load(doc)


def _load(doc: Any) -> Graph:
    """The graph described by a parsed document (the top level or a subgraph attr)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise GraphError(f'loom.from_json: not a loom graph (expected "format": "{FORMAT}")')
    version = doc.get("version")
    if version != VERSION:
        raise GraphError(f"loom.from_json: format version {version!r} is not supported; this loom reads "
                         f"version {VERSION}")
    for key in ("inputs", "outputs", "nodes"):
        if not isinstance(doc.get(key), list):
            raise GraphError(f"loom.from_json: {key!r} must be a list")
    g = Graph()
    nodes: dict[int, Node] = {}
    for k, entry in enumerate(doc["nodes"]):
        where = f"nodes[{k}]"
        if not isinstance(entry, dict) or any(key not in entry for key in _NODE_KEYS):
            raise GraphError(f"loom.from_json: {where} must be an object with keys {list(_NODE_KEYS)}")
        nid, op, name, device = entry["id"], entry["op"], entry["name"], entry["device"]
        allowed = _NODE_KEYS + (("buffer",) if op == "buffer" else ())
        if set(entry) - set(allowed):
            raise GraphError(f"loom.from_json: {where} has unknown keys {sorted(set(entry) - set(allowed))}")
        where = f"node {nid!r} ({op})"
        if not isinstance(nid, int) or isinstance(nid, bool) or nid in nodes:
            raise GraphError(f"loom.from_json: nodes[{k}] has a missing, non-integer or repeated id {nid!r}")
        if not isinstance(op, str) or not isinstance(device, str) or not (name is None or isinstance(name, str)):
            raise GraphError(f"loom.from_json: {where}: op and device must be strings, name a string or null")
        refs = entry["inputs"]
        if not isinstance(refs, list) or any(isinstance(r, bool) or r not in nodes for r in refs):
            raise GraphError(f"loom.from_json: {where}: inputs {refs!r} must list ids of nodes that appear "
                             "earlier in the list")
        if not isinstance(entry["attrs"], dict):
            raise GraphError(f"loom.from_json: {where}: attrs must be an object")
        attrs = {key: _decode(v, f"{where} attr {key!r}") for key, v in entry["attrs"].items()}
        shape, d = _shape(entry["shape"], where), _dtype(entry["dtype"], where)
        if op in ("input", "buffer") and (refs or attrs != {"shape": shape, "dtype": d}):
            raise GraphError(f"loom.from_json: {where}: a {op} node takes no inputs and has exactly the "
                             f"attrs shape and dtype, equal to the node's ({d.name}{list(shape)})")
        try:
            if op == "input":
                node = g.add_input(shape, d, name)
            elif op == "buffer":
                array, bd = _decode_buffer(entry.get("buffer"), where)
                node = g._add_buffer(array, bd, name)
            else:
                node = g.add_node(op, [nodes[r] for r in refs], attrs, name)
        except GraphError as e:
            raise GraphError(f"loom.from_json: {where}: {e}") from None
        if tuple(node.shape) != shape or node.dtype is not d:
            raise GraphError(f"loom.from_json: {where}: the file records {d.name}{list(shape)} but the "
                             f"primitive gives {node.dtype.name}{list(node.shape)}")
        node.device = device
        nodes[nid] = node
    for key in ("inputs", "outputs"):
        if any(isinstance(r, bool) or r not in nodes for r in doc[key]):
            raise GraphError(f"loom.from_json: {key} {doc[key]!r} must list ids of nodes in the file")
    try:
        g.inputs = [nodes[r] for r in doc["inputs"]]
    except GraphError as e:
        raise GraphError(f"loom.from_json: 'inputs' must list every input node exactly once: {e}") from None
    g.outputs = [nodes[r] for r in doc["outputs"]]
    return g


def save(graph: Graph, path: str | os.PathLike) -> None:
    """Write `graph` to `path` atomically (a temporary file, then os.replace).

    Examples
    --------
    >>> import os, tempfile, loom
    >>> from loom.ir import Graph, save, load
    >>> g = Graph()
    >>> g.outputs = [g.add_node("exp", [g.add_input((3,), loom.float32)])]
    >>> path = os.path.join(tempfile.mkdtemp(), "g.json")
    >>> save(g, path)
    >>> [n.op for n in load(path)]
    ['input', 'exp']
    """
    text = to_json(graph)
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".loom-graph-", suffix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def load(path: str | os.PathLike) -> Graph:
    """Read a graph written by `save`."""
    with open(os.fspath(path), encoding="utf-8") as f:
        return from_json(f.read())
