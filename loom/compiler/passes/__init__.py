"""The pass registry: named Graph -> Graph passes and the optimisation levels built from them.

A pass edits the graph it receives in place and returns it (or a new graph).
`run_passes` copies the caller's graph first, so the caller's graph is never
changed, runs the named passes in order and checks the graph after each one.

Levels (Dragon-style, each level adds to the one below):

- O0: nothing;
- O1: ``prune``, ``cse``, ``fold``;
- O2: + ``simplify``, ``cse`` (again: simplification exposes duplicates),
  ``fuse``, ``inplace`` (after fusion, so its marks name the final nodes);
- O3: + ``memory`` (the static memory plan, stored in ``graph.meta["memory"]``).

A user pass registered with a level runs at that level and above, after the
built-in passes of its level.
"""
from loom.compiler.passes.registry import (  # noqa: F401
    Pass, register_pass, passes_for_level, run_passes, _drop_stale_inplace, MAX_LEVEL, _LEVEL_STEPS, PASSES,
)
from loom.compiler.passes import prune, cse, fold, simplify, fuse, inplace, memory, remat  # noqa: F401

__all__ = ["Pass", "PASSES", "register_pass", "run_passes", "passes_for_level", "MAX_LEVEL"]
