"""The compiler's entry point: run a level's passes and hand the result to the executor."""
from __future__ import annotations

import os

from loom.codegen.toolchain import CODEGEN
from loom.compiler.memory import MemoryPlan
from loom.compiler.passes import passes_for_level, run_passes
from loom.errors import LoomError
from loom.ir.graph import Graph
from loom.runtime.executor import Executable

BACKENDS = ("c",)
# Check the graph's invariants after every pass (``LOOM_VERIFY_PASSES=1``; the test suite sets it). The
# input graph is always checked; re-checking after each pass re-infers every node's shape, which was
# half of a warm GPT step's compile time.
VERIFY_PASSES = os.environ.get("LOOM_VERIFY_PASSES", "") not in ("", "0")


def optimize(graph: Graph, level: int = 3, *, checked: bool = False) -> tuple[Graph, MemoryPlan | None]:
    """The optimised copy of `graph` at `level`, and its memory plan (None below O3).

    `checked`: the caller built `graph` through the Graph API (which checks
    each node as it is added) and has not edited it since, so its
    invariants are not checked again (`loom.function` passes its trace).

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((3,), "float32")
    >>> g.outputs = [g.add_node("neg", [g.add_node("exp", [x])])]
    >>> opt, plan = optimize(g)
    >>> [n.op for n in opt], plan.arena_bytes
    (['input', 'fused'], 0)
    """
    if not VERIFY_PASSES and not checked:
        graph.verify()  # A node no primitive accepts (say, edited attrs) never reaches a pass or a kernel.
    out = run_passes(graph, pass_names(graph, level), verify=VERIFY_PASSES)
    return out, out.meta.get("memory")


def pass_names(graph: Graph, level: int) -> list[str]:
    """The passes `optimize` runs on `graph` at `level`: the level's, plus ``remat`` before ``memory``
    when the graph carries a memory budget (``graph.meta["memory_budget"]``, set by `loom.function`) or
    a checkpointed segment's recomputation (``graph.meta["recompute"]``, whose schedule it tightens)."""
    names = passes_for_level(level)
    if (graph.meta.get("memory_budget") is not None or graph.meta.get("recompute")) and "memory" in names:
        names.insert(names.index("memory"), "remat")
    return names


def compile(graph: Graph, level: int = 3, backend: str = "c", *, checked: bool = False):  # noqa: A001
    """Optimise `graph` and build an executable for it.

    Parameters
    ----------
    graph : loom.ir.Graph
        The graph to compile (left unchanged).
    level : int
        0: no passes; 1: prune, cse, fold; 2: + simplify, fuse, in-place
        reuse; 3 (default): + static memory planning.
    backend : str
        ``"c"``: fused kernels become generated C (`loom.codegen`).
    checked : bool
        The graph was built through the Graph API and not edited since:
        its invariants are not checked again (see `optimize`).

    Returns
    -------
    loom.runtime.executor.Executable
        Built as ``Executable(optimized_graph, plan)``, where `plan` is the
        `MemoryPlan` at level 3 and None below (every value then gets an
        array of its own). Call it with one array per graph input; it
        returns a tuple of arrays.

    Examples
    --------
    >>> import loom, numpy as np
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((3,), "float32")
    >>> g.outputs = [g.add_node("exp", [x])]
    >>> run = loom.compiler.compile(g)                         # doctest: +SKIP
    >>> run(np.zeros(3, np.float32))[0].tolist()                # doctest: +SKIP
    [1.0, 1.0, 1.0]
    """
    if not isinstance(graph, Graph):
        raise LoomError(f"loom.compiler.compile: expected a loom.ir.Graph, got {type(graph).__name__}")
    if backend not in BACKENDS:
        raise LoomError(f"loom.compiler.compile: unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
    optimized, plan = optimize(graph, level, checked=checked)
    return Executable(optimized, plan, CODEGEN, verify=False)  # optimize() checked it (see VERIFY_PASSES).


def respecialized(graph: Graph, earlier: list[tuple[Graph, Graph, Executable]], level: int = 3):
    """An executable for trace `graph` made from an earlier trace's optimised graph, or None.

    `earlier` holds (trace, its optimised graph, its executable) of the same
    function at other sizes. Where `graph` differs from one of them only in sizes
    (`loom.compiler.respecialize`), that optimised graph is rebuilt at the
    new sizes and only the passes after fusion run again: the same graph,
    plan and kernels the pipeline would give, without running it (fused
    bodies that did not change keep the earlier executable's kernels). None when no
    earlier trace fits (the caller compiles `graph`).
    """
    from loom.compiler import respecialize as _re

    names = pass_names(graph, level)
    if graph.meta.get("memory_budget") is not None or graph.meta.get("recompute") or \
            not _re.default_pipeline(level) or "fuse" not in names:
        return None
    after = names[len(names) - names[::-1].index("fuse"):]  # In-place reuse and the memory plan.
    for old, optimized, exe in earlier:
        out = _re.respecialize(old, graph, optimized)
        if out is None:
            continue
        seconds = out.meta["pass_seconds"]
        out = run_passes(out, after, verify=VERIFY_PASSES, copy=False)
        out.meta["pass_seconds"] = {**seconds, **out.meta["pass_seconds"]}
        return Executable(out, out.meta.get("memory"), CODEGEN, verify=False, like=exe)
    return None
