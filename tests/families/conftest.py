import pytest


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """The families' tests run tiny models: one thread each (tests/conftest.py's single_thread)."""
    yield


def with_record(model, tmp_path, name: str, **changes):
    """A copy of the model directory ``model`` whose sidecar ``name`` (classes.json,
    image.json, ...) has ``changes`` (e.g. data=a folder that is gone): what evaluate and
    the explorer do when the data a model recorded is no longer there."""
    import json
    import shutil

    moved = tmp_path / f"moved-{name}"
    shutil.copytree(model, moved)
    record = json.loads((moved / name).read_text())
    (moved / name).write_text(json.dumps({**record, **changes}))
    return moved
