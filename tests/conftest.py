import pytest

from tests.parity.harness import MODES


@pytest.fixture(params=sorted(MODES))
def mode(request):
    """Each parity case runs once per registered loom execution mode."""
    return request.param
