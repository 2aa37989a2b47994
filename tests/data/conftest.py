"""Shared fixtures for the data tests: where the real corpora live."""

import os
from pathlib import Path

import pytest

from attnlab.data.trans_de_en import DEFAULT_TRANS_DE_EN_PATH

REPO = Path(__file__).resolve().parents[2]


def _shared_data() -> Path | None:
    """``$ATTNLAB_DATA`` if it holds multi30k, else the project's ``../shared/data``."""
    for candidate in (os.environ.get("ATTNLAB_DATA"), REPO.parent / "shared" / "data"):
        if candidate and (Path(candidate) / "multi30k" / "train.de.gz").is_file():
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    root = _shared_data()
    if root is None:
        pytest.skip("Multi30k not found: set ATTNLAB_DATA to a directory holding multi30k/")
    return root


@pytest.fixture(scope="session")
def multi30k_dir(shared_data) -> Path:
    return shared_data / "multi30k"


needs_trans_de_en = pytest.mark.skipif(
    not DEFAULT_TRANS_DE_EN_PATH.is_file(),
    reason="trans-de-en not installed (apt-get install -y trans-de-en)",
)
