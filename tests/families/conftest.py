import pytest


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """The families' tests run tiny models: one thread each (tests/conftest.py's single_thread)."""
    yield
