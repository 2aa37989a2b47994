"""Shared settings for the training tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def single_thread():
    """Run on one intra-op thread: these tiny ops are dominated by thread wake-ups
    on a busy 2-core machine (20 ms instead of 7 µs per op), and one thread keeps
    float reductions in a fixed order."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
