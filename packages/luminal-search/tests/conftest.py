"""Every test gets its own cache (LUMINAL_CACHE) so runs never share plans; the CPU runtime
library in it is the session's (the root conftest's fresh_cache)."""

import pytest


@pytest.fixture(autouse=True)
def private_cache(fresh_cache):
    return fresh_cache
