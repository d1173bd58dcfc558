"""Generation tests run tiny models: one intra-op thread is faster and immune to a busy second core."""

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield
