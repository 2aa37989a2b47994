# The tiny translation model trained once per session through `attnlab train translation`
# (and its corpus), shared with tests/cli's training tests.
from cli.conftest import multi30k_root, small_corpus, trained_model  # noqa: F401

# One thread per test comes from tests/families/conftest.py's autouse _one_thread.
