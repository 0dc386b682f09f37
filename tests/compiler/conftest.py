"""The compiler tests compare optimised graphs with eager values computed node by node on the reference
path (the oracle), bit for bit, whatever eager backend LOOM_BACKEND chose ("auto" would compile large graphs)."""
from __future__ import annotations

import pytest

import loom


@pytest.fixture(autouse=True)
def _eager_reference_oracle():
    with loom.backend("reference"):
        yield
