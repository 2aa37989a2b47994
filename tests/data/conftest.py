"""Data-test fixtures: trans-de-en (Multi30k fixtures are in tests/conftest.py)."""

import os

import pytest

from attnlab.data.trans_de_en import DEFAULT_TRANS_DE_EN_PATH

# In CI the set-up installs trans-de-en, so there the tests run (and fail if it is missing).
needs_trans_de_en = pytest.mark.skipif(
    not DEFAULT_TRANS_DE_EN_PATH.is_file() and not os.environ.get("CI"),
    reason="trans-de-en not installed (apt-get install -y trans-de-en)",
)
