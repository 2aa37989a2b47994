"""Token embeddings (× sqrt(d_model)) and the position-wise feed-forward network."""

import math

import pytest
import torch
from reference.layers import reference_feedforward

from attnlab.layers import FeedForward, TokenEmbedding


@pytest.mark.parametrize("d_model", [3, 8, 512])
def test_token_embedding_is_the_row_times_sqrt_d_model(d_model):
    embedding = TokenEmbedding(11, d_model, padding_idx=0)
    ids = torch.tensor([[1, 2, 0], [10, 10, 3]])
    out = embedding(ids)
    assert out.shape == (2, 3, d_model)
    torch.testing.assert_close(out, embedding.weight[ids] * math.sqrt(d_model), atol=0, rtol=1e-6)


def test_unscaled_token_embedding():
    embedding = TokenEmbedding(11, 8, scale=False)
    ids = torch.tensor([[4, 5]])
    assert torch.equal(embedding(ids), embedding.weight[ids])


@pytest.mark.parametrize("padding_idx", [0, 3])
def test_padding_row_is_zero_and_gets_no_gradient(padding_idx):
    embedding = TokenEmbedding(7, 8, padding_idx=padding_idx)
    assert torch.equal(embedding.weight[padding_idx], torch.zeros(8))
    assert (embedding.weight.abs().sum(-1) > 0).sum() == 6  # the other rows are initialised
    ids = torch.tensor([[padding_idx, 1, 2, padding_idx]])
    out = embedding(ids)
    assert torch.equal(out[0, 0], torch.zeros(8))
    out.sum().backward()
    assert torch.equal(embedding.weight.grad[padding_idx], torch.zeros(8))
    assert (embedding.weight.grad[1] != 0).all()


def test_scaled_embedding_has_about_unit_variance_at_initialisation():
    """Weights ~ N(0, 1/d), so the output (× sqrt(d)) has unit variance."""
    embedding = TokenEmbedding(4000, 64)
    assert embedding.weight.std().item() == pytest.approx(64 ** -0.5, rel=0.02)
    assert embedding(torch.arange(4000)).std().item() == pytest.approx(1.0, rel=0.02)


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("d_model,d_ff", [(3, 5), (8, 32)])
def test_feedforward_matches_the_formula(activation, d_model, d_ff):
    ffn = FeedForward(d_model, d_ff, activation=activation).double()
    x = torch.randn(2, 7, d_model, dtype=torch.float64) * 2
    expected = reference_feedforward(x, ffn.linear1.weight.detach(), ffn.linear1.bias.detach(),
                                     ffn.linear2.weight.detach(), ffn.linear2.bias.detach(), activation)
    torch.testing.assert_close(ffn(x), expected, atol=1e-12, rtol=1e-10)


def test_feedforward_activations_differ():
    x = torch.randn(2, 7, 8)
    outputs = {}
    for activation in ("relu", "gelu", "gelu_tanh"):
        torch.manual_seed(1)
        outputs[activation] = FeedForward(8, 16, activation=activation)(x)
    assert not torch.allclose(outputs["relu"], outputs["gelu"])
    assert not torch.allclose(outputs["gelu"], outputs["gelu_tanh"], atol=1e-6, rtol=0)


def test_feedforward_rejects_an_unknown_activation():
    with pytest.raises(ValueError, match="'swish'"):
        FeedForward(8, 16, activation="swish")


def test_feedforward_activation_dropout_only_in_training():
    ffn = FeedForward(8, 64, dropout=0.5)
    x = torch.randn(2, 7, 8)
    ffn.train()
    assert not torch.allclose(ffn(x), ffn(x))
    ffn.eval()
    torch.testing.assert_close(ffn(x), ffn.linear2(torch.relu(ffn.linear1(x))), atol=0, rtol=0)
