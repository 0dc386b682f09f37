"""Codegen tests build kernels synchronously into a cache that persists between runs (.pytest_cache)."""
import os

import pytest


@pytest.fixture(scope="package", autouse=True)
def kernel_cache(request):
    """LOOM_CODEGEN_SYNC=1 and a persistent LOOM_CACHE_DIR for this package's tests (restored after)."""
    saved = {k: os.environ.get(k) for k in ("LOOM_CODEGEN_SYNC", "LOOM_CACHE_DIR")}
    os.environ["LOOM_CODEGEN_SYNC"] = "1"
    os.environ["LOOM_CACHE_DIR"] = os.environ.get("LOOM_TEST_CACHE_DIR") or str(
        request.config.cache.mkdir("loom-kernels"))
    yield os.environ["LOOM_CACHE_DIR"]
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
