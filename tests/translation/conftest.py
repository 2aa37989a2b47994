import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models decode fastest on one thread (see tests/cli/conftest.py); restore afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
