"""The import graph of `loom/`: the layering rules of docs/architecture.md, checked statically.

Every import counts, module-level or inside a function, so a deferred import
cannot hide a dependency that points up the stack.
"""
from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "loom"


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _graph() -> dict[str, set[str]]:
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parts) + ("." + base if base else "")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                if t.split(".")[0] == "loom":
                    r = resolve(t)
                    if r is not None and r != mod:
                        edges[mod].add(r)
    for mod in mods:
        edges.setdefault(mod, set())
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _under(mod: str, *layers: str) -> bool:
    return any(mod == layer or mod.startswith(layer + ".") for layer in layers)


def test_the_runtime_imports_neither_compiler_nor_codegen_nor_the_frontend():
    edges = _graph()
    bad = sorted((m, t) for m in edges if _under(m, "loom.runtime") for t in edges[m]
                 if _under(t, "loom.compiler", "loom.codegen", "loom.tensor", "loom.functional", "loom.nn",
                           "loom.function", "loom.autograd.engine") or t == "loom")
    assert not bad, f"runtime modules importing from above: {bad}"


def test_the_ir_imports_neither_the_frontend_nor_codegen_nor_the_compiler():
    edges = _graph()
    bad = sorted((m, t) for m in edges if _under(m, "loom.ir") for t in edges[m]
                 if _under(t, "loom.tensor", "loom.functional", "loom.codegen", "loom.compiler", "loom.nn")
                 or t == "loom")
    assert not bad, f"IR modules importing from above: {bad}"


def test_no_import_cycle_in_the_ir_runtime_codegen_and_compiler_layers():
    core = ("loom.ir", "loom.runtime", "loom.codegen", "loom.compiler")
    bad = [c for c in _cycles(_graph()) if any(_under(m, *core) for m in c)]
    assert not bad, f"import cycles through the core layers: {bad}"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_of_loom_has_no_cycle():
    cycles = _cycles(_graph())
    listed = "\n".join(f"  {len(c)} modules: {c}" for c in sorted(cycles, key=len, reverse=True))
    assert not cycles, f"{len(cycles)} import cycles in loom/ (each a strongly connected component):\n{listed}"


def test_every_upward_slot_is_declared_and_filled_after_import_loom():
    """Lower layers call higher ones only through loom._upper; `import loom` fills every slot it declares."""
    import loom  # noqa: F401  (fills the slots)
    from loom import _upper

    declared = set(_upper.__annotations__)
    filled = {name for name in declared if name in vars(_upper)}
    assert declared and filled == declared, f"slots left empty: {sorted(declared - filled)}"


def test_a_slot_that_is_not_declared_is_refused():
    import pytest

    from loom import _upper

    with pytest.raises(NameError, match="no slot 'matmull'"):
        _upper.register(matmull=lambda a, b: a)
