"""`explain`: what the compiler does to a function, pass by pass, down to kernels and memory."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from loom.compiler.memory import MemoryPlan
from loom.compiler.passes import run_passes
from loom.compiler.pipeline import pass_names
from loom.errors import LoomError, fmt_shape
from loom.ir.graph import Graph
from loom.ir.node import Node


@dataclass
class PassRecord:
    """One pass of an explanation: the graph after it and how much it changed."""

    name: str
    graph: Graph
    text: str
    nodes_before: int
    nodes_after: int
    seconds: float

    @property
    def ops(self) -> Counter:
        """How many nodes of each op the graph has after the pass."""
        return Counter(n.op for n in self.graph.topological_order())


@dataclass
class KernelInfo:
    """A fused node of the optimised graph: its body and, when loom.codegen is there, its C source."""

    node: Node
    body: Graph
    source: str | None
    note: str = ""

    @property
    def ops(self) -> list[str]:
        return [n.op for n in self.body.topological_order() if n.op != "input"]


@dataclass
class Explanation:
    """The result of `explain`; ``str()`` gives the readable report.

    Attributes
    ----------
    level : int
    graph : Graph
        The captured graph, before any pass.
    text : str
        Its printout, with the node ids the pass printouts share.
    passes : list of PassRecord
        One record per pass, in order, with the graph after it.
    optimized : Graph
        The graph after the last pass.
    kernels : list of KernelInfo
        The fused nodes of `optimized`, in topological order.
    memory : MemoryPlan or None
        The static plan (level 3), with ``arena_bytes`` and ``lower_bound``.
    remat : loom.compiler.remat.RematReport or None
        With a memory budget: planned bytes before and after, values and
        nodes recomputed, extra FLOPs.
    plan_memory : loom.compiler.partition.PlanMemory or None
        With a memory budget and ``runtime="actors"`` over a graph that is
        several tasks: the budget split among the tasks, each task's arena
        against its share and its own `RematReport`.
    """

    level: int
    graph: Graph
    text: str = ""
    passes: list[PassRecord] = field(default_factory=list)
    optimized: Graph | None = None
    kernels: list[KernelInfo] = field(default_factory=list)
    memory: MemoryPlan | None = None
    remat: Any = None
    plan_memory: Any = None

    @property
    def node_counts(self) -> list[tuple[str, int]]:
        """(stage, node count) from the captured graph through every pass."""
        return [("captured", len(self.graph))] + [(p.name, p.nodes_after) for p in self.passes]

    def __str__(self) -> str:
        names = ", ".join(p.name for p in self.passes) or "none"
        out = [f"loom.compiler.explain: level O{self.level}, passes: {names}", "", "node counts:"]
        before = len(self.graph)
        out.append(f"  {'captured':<20} {before:>6}")
        for p in self.passes:
            out.append(f"  {p.name:<20} {p.nodes_after:>6}  ({p.nodes_after - p.nodes_before:+d}, "
                       f"{p.seconds * 1e3:.2f} ms)")
        out += ["", f"== captured graph ({len(self.graph)} nodes) ==", self.text or str(self.graph)]
        previous = self.text
        for p in self.passes:
            out += ["", f"== after {p.name}: {p.nodes_before} -> {p.nodes_after} nodes =="]
            out.append("(unchanged)" if p.text == previous else p.text)
            previous = p.text
        out += ["", f"== kernels ({len(self.kernels)}) =="]
        for k, info in enumerate(self.kernels):
            n = info.node
            ins = ", ".join(f"%{i.id}" for i in n.inputs)
            out += [f"-- kernel {k}: %{n.id} = fused({ins}) : {n.dtype.name}{fmt_shape(n.shape)}; "
                    f"ops {' '.join(info.ops)}", str(info.body)]
            out += ["source:", info.source] if info.source is not None else [f"source: ({info.note})"]
        out += ["", "== memory =="]
        if self.memory is None:
            out.append(f"no static plan at level O{self.level} (O3 plans memory)")
        else:
            out.append(str(self.memory))
            out.append(f"planned peak {self.memory.arena_bytes} B vs lower bound {self.memory.lower_bound} B")
        out += self._budget_text()
        return "\n".join(out)

    def _budget_text(self) -> list[str]:
        """The memory budget sections: what the plan keeps under it, and how it got there."""
        out: list[str] = []
        rem, mem = self.remat, self.plan_memory
        if mem is not None:
            out += ["", "== memory plan (actor tasks) ==", str(mem)]
            for t in mem.tasks:
                if t.report is not None:
                    out += ["", f"-- task {t.name}: rematerialisation --", str(t.report)]
        elif rem is not None:
            from loom.compiler.remat import fmt_bytes

            total = rem.arena_after + rem.outputs
            state = "met" if rem.met else "NOT met"
            moved = (f"{rem.values} values recomputed ({rem.recomputed} nodes, {rem.extra_flops / 1e9:.3f} GFLOP), "
                     f"{rem.offloaded} offloaded to disk ({fmt_bytes(rem.offload_bytes)})")
            out += ["", "== memory plan ==",
                    f"budget {fmt_bytes(rem.budget)} ({rem.budget} B): {state}; arena {fmt_bytes(rem.arena_after)} + "
                    f"outputs {fmt_bytes(rem.outputs)} = {fmt_bytes(total)} ({total / max(rem.budget, 1):.3f} of "
                    f"the budget; {fmt_bytes(rem.arena_before)} without it)",
                    f"policy {rem.strategy} (offload={rem.offload!r}): {moved}",
                    "", "== rematerialisation ==", str(rem)]
        return out

    def __repr__(self) -> str:
        plan = (f", arena {self.memory.arena_bytes} B / lower bound {self.memory.lower_bound} B"
                if self.memory is not None else "")
        return (f"<loom.compiler.Explanation O{self.level}: {len(self.graph)} -> "
                f"{len(self.optimized) if self.optimized is not None else '?'} nodes, "
                f"{len(self.kernels)} kernels{plan}>")


def _tensors(value: Any, what: str) -> list:
    """The Tensors in a (nested) tuple/list/dict, in order."""
    from loom.tensor import Tensor

    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v, what)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v, what)]
    if what == "outputs":
        raise LoomError(f"loom.compiler.explain: the function must return Tensors (or tuples/lists/dicts "
                        f"of them), got a {type(value).__name__}")
    return []


def _kernel_info(node: Node) -> KernelInfo:
    body = node.attrs["body"]
    try:
        from loom.codegen import get_kernel
    except ImportError:
        return KernelInfo(node, body, None, "loom.codegen is not available")
    try:
        return KernelInfo(node, body, get_kernel(body).source)
    except Exception as e:  # noqa: BLE001 - explain reports, it does not fail on a codegen gap.
        return KernelInfo(node, body, None, f"codegen failed: {type(e).__name__}: {e}")


class _Optimized:
    """What `loom.compiler.partition.fit_budget` reads of a compiled task: its optimised graph and memory plan."""

    def __init__(self, graph: Graph, level: int) -> None:
        self.graph = run_passes(graph, pass_names(graph, level))
        self.plan = self.graph.meta.get("memory")


def explain(fn: Callable | Graph, *args, level: int | None = None, memory_budget: int | str | None = None,
            strict: bool | None = None, offload: str | None = None, runtime: str | None = None) -> Explanation:
    """Show what the compiler does to `fn(*args)`: the graph after each pass, the kernels, the memory plan.

    Parameters
    ----------
    fn : callable or loom.ir.Graph
        A function of loom Tensors returning Tensors (nested tuples, lists
        and dicts are flattened); it runs once, lazily, and its pending
        computation is captured with `loom.ir.Graph.from_tensors`. The Tensor
        arguments become the graph's inputs. A Graph is explained as is.
        A `loom.function` is explained with the settings it was made with
        (its level, memory budget, `strict`, `offload` and `runtime`)
        unless given here: its Python function is captured.
    *args
        The arguments to call `fn` with.
    level : int
        The optimisation level whose passes run (default 3).
    memory_budget : int or str, optional
        As for `loom.function`: adds the ``remat`` pass (level 3), whose
        choice the report's "rematerialisation" section states.
    strict : bool
        With `memory_budget`: raise instead of warning when it cannot be met.
    offload : str
        With `memory_budget`, as for `loom.function`: ``"auto"`` (default),
        ``"never"`` or ``"disk"``; the section then lists, per value, whether it was
        recomputed or offloaded to disk and what the cost model estimated.
    runtime : str
        ``"native"`` (default) or, as for `loom.function`, ``"actors"``: with
        a memory budget over a graph that is several tasks (independent
        branches), the budget is split among them as the actor runtime does
        (`loom.compiler.partition.fit_budget`) and the "memory plan (actor
        tasks)" section gives every task's share, arena and choice
        (`Explanation.plan_memory`); the pass listing is then that of the
        whole graph without the budget.

    Returns
    -------
    Explanation
        ``print()`` it for the report; its fields hold the same data. Kernel
        sources come from ``loom.codegen.get_kernel`` (which also starts
        building each kernel in the background, as a first compiled run would).

    Examples
    --------
    >>> import loom
    >>> x = loom.randn(4, 3)
    >>> e = loom.compiler.explain(lambda t: (t * 1.0).exp().sum(1), x)
    >>> e.node_counts[0], e.node_counts[-1]
    (('captured', 5), ('memory', 2))
    >>> len(e.kernels)
    1
    """
    declared: Any = fn if callable(getattr(fn, "fn", None)) and hasattr(fn, "memory_reports") else None
    ran = None  # The memory plan a loom.function's actor program was compiled with.
    if declared is not None:  # A loom.function: its settings, unless given here.
        if args:
            fn = declared.fn   # Captured from a call, as any function.
        else:
            entries = list(declared._cache.values())
            if not entries:
                raise LoomError(f"loom.compiler.explain: loom.function {getattr(declared, '__name__', '?')!r} has "
                                "not been traced yet: call it once first, or pass the arguments to capture it with")
            fn, ran = entries[-1].graph, entries[-1].remat   # Its latest specialisation, as traced.
        level = declared.level if level is None else level
        memory_budget = declared.memory_budget if memory_budget is None else memory_budget
        strict = declared.strict if strict is None else strict
        offload = declared.offload if offload is None else offload
        runtime = declared.runtime if runtime is None else runtime
    level = 3 if level is None else level
    strict, runtime = bool(strict), runtime or "native"
    if runtime not in ("native", "actors"):
        raise LoomError(f"loom.compiler.explain: runtime must be 'native' or 'actors', got {runtime!r}")
    if isinstance(fn, Graph):
        if args:
            raise LoomError("loom.compiler.explain: a Graph takes no arguments")
        graph = fn
    else:
        if not callable(fn):
            raise LoomError(f"loom.compiler.explain: expected a function or a Graph, got {type(fn).__name__}")
        outs = _tensors(fn(*args), "outputs")
        if not outs:
            raise LoomError("loom.compiler.explain: the function returned no Tensors")
        inputs, seen = [], set()
        for t in _tensors(list(args), "inputs"):
            if t._node not in seen:
                seen.add(t._node)
                inputs.append(t)
        graph = Graph.from_tensors(outs, inputs=inputs)

    work = graph.copy()  # The passes edit this one in place, so node ids stay stable in the report.
    if memory_budget is not None:
        from loom.compiler.remat import DEFAULT_OFFLOAD, parse_budget

        if level != 3:
            raise LoomError(f"loom.compiler.explain: memory_budget needs level 3 (the memory plan), got {level}")
        work.meta["memory_budget"] = (parse_budget(memory_budget, "loom.compiler.explain"), bool(strict))
        work.meta["offload"] = offload = offload or DEFAULT_OFFLOAD
    plan_memory = None
    if runtime == "actors" and memory_budget is not None:
        from loom.compiler.partition import fit_budget, partition

        if hasattr(ran, "tasks"):   # The plan the function runs with (its pipeline stages included).
            plan_memory = ran
        else:
            parts = partition(work)
            if len(parts.parts) > 1:  # One task is the plain step: its report is the plain step's.
                nbytes, strict_ = work.meta["memory_budget"]
                plan_memory = fit_budget(parts, lambda g: _Optimized(g, level), nbytes, strict_,  # type: ignore[arg-type, return-value]
                                         work.meta["offload"], 2, "loom.compiler.explain")[1]
        if plan_memory is not None:
            del work.meta["memory_budget"], work.meta["offload"]
    result = Explanation(level, graph.copy(), str(work))
    result.plan_memory = plan_memory
    last = {"time": time.perf_counter(), "size": len(graph)}

    def observe(name: str, g: Graph) -> None:
        now = time.perf_counter()
        result.passes.append(PassRecord(name, g.copy(), str(g), int(last["size"]), len(g), now - last["time"]))
        last["time"], last["size"] = time.perf_counter(), len(g)

    optimized = run_passes(work, pass_names(work, level), copy=False, observer=observe)
    result.optimized = optimized
    result.kernels = [_kernel_info(n) for n in optimized.topological_order() if n.op == "fused"]
    result.memory = optimized.meta.get("memory")
    result.remat = optimized.meta.get("remat")
    return result
