"""`tf.nest`: flatten and rebuild nests of lists, tuples and dicts."""
from __future__ import annotations

from loom.tf.tape import flatten, pack_sequence_as  # noqa: F401


def map_structure(fn, *structures):
    """`fn` applied to the corresponding leaves of `structures`, in the first one's nesting."""
    flats = [flatten(s) for s in structures]
    return pack_sequence_as(structures[0], [fn(*xs) for xs in zip(*flats)])
