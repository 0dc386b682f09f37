import os

import pytest

from tests.parity.harness import MODES

# Execution modes the parity suite runs each case in (comma-separated), e.g. LOOM_PARITY_MODES=eager.
_SELECTED = [m for m in os.environ.get("LOOM_PARITY_MODES", "eager,compiled,traced").split(",") if m]


@pytest.fixture(params=_SELECTED)
def mode(request):
    """Each parity case runs once per selected loom execution mode."""
    return request.param
