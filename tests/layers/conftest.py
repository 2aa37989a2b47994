import pytest


@pytest.fixture(autouse=True)
def _tiny_ops_on_one_thread(single_thread):
    """These tests run thousands of tiny ops: see ``single_thread`` in tests/conftest.py."""
