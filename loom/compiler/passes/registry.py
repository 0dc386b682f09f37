"""The pass registry: `register_pass`, `PASSES`, `run_passes` and the optimisation levels.

The pass modules of this package register themselves here; `loom.compiler.passes`
re-exports it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from loom.errors import LoomError
from loom.ir.graph import Graph

MAX_LEVEL = 3

# The built-in passes each level adds, in the order they run.
_LEVEL_STEPS: dict[int, tuple[str, ...]] = {
    1: ("prune", "cse", "fold"),
    2: ("simplify", "cse", "fuse", "inplace"),
    3: ("memory",),
}


@dataclass(frozen=True)
class Pass:
    """A registered pass: its name, the level that first runs it (None: only on request) and its function."""

    name: str
    level: int | None
    fn: Callable[[Graph], Graph]
    builtin: bool = False

    @property
    def doc(self) -> str:
        """The first line of the pass function's docstring."""
        return (self.fn.__doc__ or "").strip().split("\n")[0]

    def __call__(self, graph: Graph) -> Graph:
        return self.fn(graph)


PASSES: dict[str, Pass] = {}


def register_pass(name: str, level: int | None = None, *, override: bool = False,
                  _builtin: bool = False) -> Callable[[Callable[[Graph], Graph]], Callable[[Graph], Graph]]:
    """Register a Graph -> Graph function as the pass `name` (a decorator).

    Parameters
    ----------
    name : str
        The name `run_passes` and `compile` know the pass by.
    level : int, optional
        The optimisation level (1-3) from which `compile` runs the pass, after
        the built-in passes of that level. None (the default) registers a
        pass that runs only when named in `run_passes`.
    override : bool
        Allow replacing a pass already registered under `name`.

    Examples
    --------
    >>> import loom
    >>> @loom.compiler.register_pass("count_nodes_example", override=True)
    ... def count_nodes(graph):
    ...     graph.meta["node_count"] = len(graph)
    ...     return graph
    >>> g = loom.ir.Graph()
    >>> g.outputs = [g.add_node("neg", [g.add_input((3,), "float32")])]
    >>> loom.compiler.run_passes(g, ["count_nodes_example"]).meta["node_count"]
    2
    """
    if not isinstance(name, str) or not name:
        raise LoomError(f"loom.compiler.register_pass: name must be a non-empty str, got {name!r}")
    if level is not None and (not isinstance(level, int) or isinstance(level, bool)
                              or not 1 <= level <= MAX_LEVEL):
        raise LoomError(f"loom.compiler.register_pass: level must be None or an int in 1..{MAX_LEVEL}, "
                        f"got {level!r}")

    def decorate(fn: Callable[[Graph], Graph]) -> Callable[[Graph], Graph]:
        if not callable(fn):
            raise LoomError(f"loom.compiler.register_pass: pass {name!r} must be callable, got "
                            f"{type(fn).__name__}")
        old = PASSES.get(name)
        if old is not None and not override:
            raise LoomError(f"loom.compiler.register_pass: a pass named {name!r} is already registered "
                            f"({old.fn.__module__}.{old.fn.__qualname__}); pass override=True to replace it")
        if old is not None and old.builtin and not _builtin:
            raise LoomError(f"loom.compiler.register_pass: {name!r} is a built-in pass and cannot be "
                            "replaced; register yours under another name")
        PASSES[name] = Pass(name, level, fn, _builtin)
        return fn

    return decorate


def passes_for_level(level: int) -> list[str]:
    """The pass names `compile` runs at `level`, in order.

    Examples
    --------
    >>> passes_for_level(1)
    ['prune', 'cse', 'fold']
    """
    if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= MAX_LEVEL:
        raise LoomError(f"loom.compiler: level must be an int in 0..{MAX_LEVEL}, got {level!r}")
    names: list[str] = []
    for lv in range(1, level + 1):
        names += _LEVEL_STEPS[lv]
        names += [p.name for p in PASSES.values() if p.level == lv and not p.builtin]
    return names


def run_passes(graph: Graph, names: Sequence[str] | str, *, verify: bool = True, copy: bool = True,
               observer: Callable[[str, Graph], None] | None = None) -> Graph:
    """Run the named passes, in order, on a copy of `graph`; return the result.

    Parameters
    ----------
    graph : loom.ir.Graph
        Left unchanged unless ``copy=False``.
    names : sequence of str
        Registered pass names (see `PASSES`); a name may repeat.
    verify : bool
        Check the graph's invariants before the first pass and after every
        pass (`Graph.verify`).
    copy : bool
        Work on a copy (the default). With False the passes edit `graph`
        itself, so its nodes keep their ids through the pipeline.
    observer : callable, optional
        Called as ``observer(name, graph)`` after each pass (used by `explain`).

    The result's ``meta["pass_seconds"]`` holds each pass's wall time in
    seconds (summed over the runs of a pass named twice).

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((3,), "float32")
    >>> dead = g.add_node("exp", [x])
    >>> g.outputs = [g.add_node("neg", [g.add_node("neg", [x])])]
    >>> [n.op for n in loom.compiler.run_passes(g, ["prune", "simplify"])]
    ['input']
    """
    if not isinstance(graph, Graph):
        raise LoomError(f"loom.compiler.run_passes: expected a loom.ir.Graph, got {type(graph).__name__}")
    names = [names] if isinstance(names, str) else list(names)
    unknown = [n for n in names if not isinstance(n, str) or n not in PASSES]
    if unknown:
        raise LoomError(f"loom.compiler.run_passes: unknown pass {unknown[0]!r}; registered passes: "
                        f"{', '.join(sorted(PASSES))} (add one with loom.compiler.register_pass)")
    if verify:
        graph.verify()  # A node no primitive accepts (say, edited attrs) never reaches a pass or a kernel.
    out = graph.copy() if copy else graph
    seconds: dict[str, float] = {}
    for name in names:
        out.meta.pop("memory", None)  # A plan describes the graph it was made for; any pass may change it.
        start = time.perf_counter()
        result = PASSES[name](out)
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start
        if not isinstance(result, Graph):
            raise LoomError(f"loom.compiler.run_passes: pass {name!r} returned {type(result).__name__}, "
                            "expected the loom.ir.Graph it transformed")
        out = result
        _drop_stale_inplace(out)
        if verify:
            out.verify()
        if observer is not None:
            observer(name, out)
    out.meta["pass_seconds"] = seconds  # Wall time of each pass (a pass run twice: the sum), for profiling.
    return out


def _drop_stale_inplace(graph: Graph) -> None:
    """Forget in-place marks that a later pass made illegal (or whose nodes it removed)."""
    marks = graph.meta.get("inplace")
    if not marks:
        return
    from loom.compiler.constants import reusable

    outputs = set(graph.outputs)
    graph.meta["inplace"] = {n: k for n, k in marks.items()
                             if n in graph and reusable(graph, n, k, outputs)}


# The built-in passes register themselves on import.
