import pytest
import torch

# The tiny translation model trained once per session through `attnlab train translation`
# (and its corpus), shared with tests/cli's training tests.
from cli.conftest import multi30k_root, small_corpus, trained_model  # noqa: F401


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models decode fastest on one thread (see tests/cli/conftest.py); restore afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
