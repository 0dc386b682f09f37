import os

import pytest

# The suite checks the graph after every compiler pass (off by default for compile speed).
os.environ.setdefault("LOOM_VERIFY_PASSES", "1")

from tests.parity.harness import MODES  # noqa: E402

# Execution modes the parity suite runs each case in (comma-separated), e.g. LOOM_PARITY_MODES=eager.
_SELECTED = [m for m in os.environ.get("LOOM_PARITY_MODES", "eager,compiled,traced").split(",") if m]
_UNKNOWN = sorted(set(_SELECTED) - set(MODES))
if _UNKNOWN:
    raise pytest.UsageError(f"LOOM_PARITY_MODES names unknown modes {_UNKNOWN}; known: {sorted(MODES)}")
_PARAMS: list = list(_SELECTED)
if "LOOM_PARITY_MODES" not in os.environ:
    # loom.function on the actor runtime: the whole suite once more (minutes), so with the slow tests
    # (`pytest -m slow`), not in the default run.
    _PARAMS.append(pytest.param("actors", marks=pytest.mark.slow))


@pytest.fixture(params=_PARAMS)
def mode(request):
    """Each parity case runs once per selected loom execution mode."""
    return request.param
