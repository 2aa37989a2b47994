"""Shared pytest set-up for the whole test tree; keep it small and generic.

tests/ has no ``__init__.py``, so pytest puts this directory on ``sys.path``: tests import
the slow reference implementations as ``from reference.attention import ...``.
"""

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_torch():
    """Every test starts from the same torch RNG state, so a failure reproduces on its own."""
    torch.manual_seed(0)


@pytest.fixture
def single_thread():
    """One intra-op thread for the test: tiny tensor ops are dominated by thread wake-ups
    on a busy 2-core machine. Opt in per directory with an autouse fixture that requests it."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
