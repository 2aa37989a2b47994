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
