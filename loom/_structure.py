"""Structure versions of the containers a traced step reads tensors through (modules, optimizers).

A `loom.function` trace binds the tensors it read by identity. Replacing a module's parameter by
assignment, adding a child module or an optimizer's parameter group changes which tensors the Python
step would read, with no tensor changing: such a change stamps the container with a fresh version, the
trace records the versions of the containers it went through, and a replay whose containers were
changed since traces again.
"""
from __future__ import annotations

import itertools

from loom.runtime import realize as _realize

_next = itertools.count(1).__next__
latest = 0  # The last stamp given anywhere: a trace whose containers held at this stamp still holds.


def changed(obj) -> None:
    """Stamp `obj` (a module or optimizer whose set of tensors changed) with a new version."""
    global latest
    latest = _next()
    obj.__dict__["_loom_structure"] = latest


def version(obj) -> int:
    """`obj`'s structure version (0: never changed since it was made)."""
    return obj.__dict__.get("_loom_structure", 0)


def note(obj) -> None:
    """Inside a trace: the step went through `obj`, so the trace holds while its version does."""
    tr = _realize.active_trace
    if tr is not None:
        tr.structures.setdefault(id(obj), obj)
