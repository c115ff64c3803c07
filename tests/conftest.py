"""Fixtures for the whole suite: no test writes to the user's own cache directory."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_index_cache(tmp_path_factory: pytest.TempPathFactory):
    """Point the replay's index cache (KBDEBUG_CACHE_DIR) at a directory of the test
    session, for every test and every process a test starts."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KBDEBUG_CACHE_DIR", str(tmp_path_factory.mktemp("kbdebug-cache")))
        patch.delenv("KBDEBUG_NO_CACHE", raising=False)
        yield
