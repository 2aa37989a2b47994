"""BertEncoder on its own: padding invariance, input checks, save/load (parity with
transformers is in tests/interop/test_hf_bert.py)."""

import pytest
import torch

from attnlab import create_model, load_model
from attnlab.models.bert import mean_pool


@pytest.fixture
def model():
    torch.manual_seed(0)
    return create_model("bert_tiny").eval()


def test_padding_does_not_change_real_positions(model):
    ids = torch.randint(1, 100, (1, 7))
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        short, long = model(ids), model(padded)
    tol = 1e-5 * short.hidden.abs().max()
    assert (long.hidden[:, :7] - short.hidden).abs().max() <= tol
    assert (long.pooled - short.pooled).abs().max() <= tol
    mask = (padded != 0).long()
    assert (mean_pool(long.hidden, mask) - short.hidden.mean(1)).abs().max() <= tol


def test_input_errors(model):
    with pytest.raises(ValueError, match="longer than the model's max_positions=64"):
        model(torch.ones(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_mask has shape"):
        model(torch.ones(2, 5, dtype=torch.long), attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="token_type_ids contains token id 2"):
        model(torch.ones(1, 5, dtype=torch.long), token_type_ids=torch.full((1, 5), 2))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.full((1, 3), 100))
    no_head = create_model("bert_tiny", mlm_head=False)
    with pytest.raises(ValueError, match="no masked-LM head"):
        no_head.mlm_logits(torch.zeros(1, 2, 32))


def test_save_load_round_trip(model, tmp_path):
    model.save_pretrained(tmp_path / "bert")
    loaded = load_model(tmp_path / "bert")
    ids = torch.randint(1, 100, (2, 9))
    with torch.no_grad():
        assert torch.equal(model(ids).hidden, loaded(ids).hidden)
        assert torch.equal(model.mlm_logits(model(ids).hidden), loaded.mlm_logits(loaded(ids).hidden))
