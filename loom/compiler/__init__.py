"""The compiler: a pipeline of Graph -> Graph passes with optimisation levels, and its entry points.

- `run_passes(graph, names)` runs any registered passes; `register_pass`
  adds one; `PASSES` lists them.
- `compile(graph, level=3)` optimises a graph and builds an executable.
- `explain(fn, *args)` shows the graph after each pass, the fused kernels and
  the memory plan.
- `plan_memory(graph)` gives the static arena plan.
- `rematerialize(graph, budget)` recomputes activations to fit a memory
  budget (the ``remat`` pass behind ``loom.function(memory_budget=...)``).

Examples
--------
>>> import loom
>>> g = loom.ir.Graph()
>>> x = g.add_input((3,), "float32")
>>> g.outputs = [g.add_node("exp", [g.add_node("neg", [g.add_node("neg", [x])])])]
>>> [n.op for n in loom.compiler.run_passes(g, ["simplify"])]
['input', 'exp']
"""
from loom.compiler.passes import PASSES, Pass, passes_for_level, register_pass, run_passes
from loom.compiler.memory import MemoryPlan, plan_memory
from loom.compiler.pipeline import compile, optimize  # noqa: A004
from loom.compiler.explain import Explanation, explain
from loom.compiler.remat import RematReport, rematerialize
from loom.compiler import eager  # noqa: F401  (registers the compiled eager backend with the runtime)

__all__ = ["register_pass", "PASSES", "Pass", "run_passes", "passes_for_level", "compile", "optimize",
           "explain", "Explanation", "plan_memory", "MemoryPlan", "rematerialize", "RematReport"]
