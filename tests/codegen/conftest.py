"""Codegen tests build kernels synchronously into a cache that persists between runs (.pytest_cache)."""
import pytest

from tests.codegen.helpers import persistent_sync_kernels


@pytest.fixture(scope="package", autouse=True)
def kernel_cache(request):
    """LOOM_CODEGEN_SYNC=1 and a persistent LOOM_CACHE_DIR for this package's tests (restored after)."""
    with persistent_sync_kernels(request.config) as cache_dir:
        yield cache_dir
