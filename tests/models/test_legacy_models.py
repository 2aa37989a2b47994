"""Model directories written by an older attnlab still load and compute the same outputs.

tests/fixtures/legacy_models/ was written by the code of commit 03ab32e (see make.py
there), before the parameters were renamed into encoder/decoder parts.
"""

import json
from pathlib import Path

import pytest
import torch

import attnlab

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "legacy_models"


@pytest.mark.parametrize("name", ["lm", "transformer"])
def test_old_model_directory_loads_with_the_same_outputs(name):
    expected = json.loads((FIXTURES / "expected.json").read_text())[name]
    model = attnlab.load_model(FIXTURES / name)
    ids = torch.tensor(expected["ids"])
    with torch.no_grad():
        logits = model(ids) if name == "lm" else model(ids, ids[:, :5])
    reference = torch.tensor(expected["logits"], dtype=torch.float64)
    # float32 outputs of a d_model=8 model: rounding differences between CPUs stay far below this.
    torch.testing.assert_close(logits.double(), reference, atol=1e-5 * reference.abs().max().item(), rtol=1e-5)


@pytest.mark.parametrize("name", ["lm", "transformer"])
def test_average_of_old_and_new_names(name, tmp_path):
    """A run resumed across the rename keeps checkpoints with old and new parameter names;
    averaging them renames the old ones (averaging a model with itself gives the model)."""
    import shutil

    from attnlab.models.registry import load_model
    from attnlab.training.checkpoint import average_checkpoints_to_directory

    old = FIXTURES / name
    new = tmp_path / "new"
    load_model(old).save_pretrained(new)
    averaged = average_checkpoints_to_directory([old, new], tmp_path / "avg")
    reference = load_model(new)
    model = load_model(averaged)
    for (key, value), (ref_key, ref_value) in zip(model.state_dict().items(), reference.state_dict().items()):
        assert key == ref_key and torch.equal(value, ref_value), key
    copied = tmp_path / "copied.safetensors"  # a bare file outside a model directory: names as written
    shutil.copy(old / "model.safetensors", copied)
    with pytest.raises(ValueError, match="tensor names differ"):
        average_checkpoints_to_directory([new, copied], tmp_path / "avg2")
