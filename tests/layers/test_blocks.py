"""Encoder/decoder layers and stacks: the paper's formula, torch.nn parity, cached decoding."""

import pytest
import torch
from reference.layers import reference_layer_norm, reference_transformer_layer
from torch import nn

from attnlab.layers import DecoderLayer, EncoderLayer, LayerAttention, TransformerLayer, TransformerStack
from attnlab.attention import CausalAttention, FullAttention

D_MODEL, HEADS, D_FF = 12, 3, 20


def randomise(module):
    """Fresh LayerNorms are (1, 0) and fresh attention biases 0: make every parameter
    random so that a swapped or skipped parameter shows up."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.5)
    return module


def key_mask(batch, length):
    lengths = torch.randint(1, length + 1, (batch,))
    lengths[0] = length
    return (torch.arange(length)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, L)


def float64_inputs(batch=3, length=7, memory_length=5):
    return (torch.randn(batch, length, D_MODEL, dtype=torch.float64),
            torch.randn(batch, memory_length, D_MODEL, dtype=torch.float64))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_layer_matches_the_formula(norm_first, activation):
    layer = randomise(EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first, activation=activation)).double().eval()
    assert isinstance(layer.self_attn.pattern, FullAttention) and layer.cross_attn is None
    x, _ = float64_inputs()
    mask = key_mask(3, 7)
    out, weights = layer(x, self_mask=mask)
    assert weights is None
    expected = reference_transformer_layer(layer, x, causal=False, self_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_layer_matches_the_formula(norm_first):
    layer = randomise(DecoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first)).double().eval()
    assert isinstance(layer.self_attn.pattern, CausalAttention)
    assert isinstance(layer.cross_attn.pattern, FullAttention)
    x, memory = float64_inputs()
    memory_mask = key_mask(3, 5)
    out, _ = layer(x, memory=memory, memory_mask=memory_mask)
    expected = reference_transformer_layer(layer, x, causal=True, memory=memory, memory_mask=memory_mask)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)


def test_post_ln_and_pre_ln_really_differ():
    torch.manual_seed(3)
    post = randomise(EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=False)).double().eval()
    pre = EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=True).double().eval()
    pre.load_state_dict(post.state_dict())
    x, _ = float64_inputs()
    assert not torch.allclose(post(x)[0], pre(x)[0])
    # Post-LN ends in a LayerNorm: every output row is normalised before the affine map.
    norm = post.ffn_norm
    normalised = (post(x)[0] - norm.bias) / norm.weight
    torch.testing.assert_close(normalised.mean(-1), torch.zeros(3, 7, dtype=torch.float64), atol=1e-10, rtol=0)


def test_layer_returns_per_head_weights():
    layer = DecoderLayer(D_MODEL, HEADS, D_FF).eval()
    x, memory = torch.randn(2, 4, D_MODEL), torch.randn(2, 6, D_MODEL)
    out, weights = layer(x, memory=memory, need_weights=True)
    assert isinstance(weights, LayerAttention)
    assert weights.self_attn.shape == (2, HEADS, 4, 4) and weights.cross_attn.shape == (2, HEADS, 4, 6)
    assert (weights.self_attn.triu(1) == 0).all()
    torch.testing.assert_close(out, layer(x, memory=memory)[0], atol=1e-5, rtol=1e-5)


def test_residual_dropout_only_in_training():
    layer = EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.5)
    x = torch.randn(2, 5, D_MODEL)
    layer.train()
    assert not torch.allclose(layer(x)[0], layer(x)[0])
    layer.eval()
    torch.testing.assert_close(layer(x)[0], layer(x)[0], atol=0, rtol=0)


def make_stack(num_layers, *, decoder, norm_first, final_norm, dtype=torch.float64):
    layer_class = DecoderLayer if decoder else EncoderLayer
    layers = [layer_class(D_MODEL, HEADS, D_FF, norm_first=norm_first) for _ in range(num_layers)]
    return randomise(TransformerStack(layers, d_model=D_MODEL, final_norm=final_norm)).to(dtype).eval()


@pytest.mark.parametrize("final_norm", [False, True])
@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
def test_stack_applies_layers_in_order_then_the_final_norm(decoder, final_norm):
    stack = make_stack(3, decoder=decoder, norm_first=True, final_norm=final_norm)
    assert stack.has_cross_attention == decoder
    assert (stack.final_norm is not None) == final_norm
    x, memory = float64_inputs()
    memory = memory if decoder else None
    expected = x
    for layer in stack.layers:
        expected = reference_transformer_layer(layer, expected, causal=decoder, memory=memory)
    if final_norm:
        norm = stack.final_norm
        expected = reference_layer_norm(expected, norm.weight.detach(), norm.bias.detach(), norm.eps)
    out, weights = stack(x, memory=memory, need_weights=True)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)
    assert len(weights) == 3 and all(isinstance(w, LayerAttention) for w in weights)


# ------------------------------------------------------------- parity with torch.nn layers

# torch.nn names -> attnlab names (prefix replacements); load_state_dict(strict=True) then
# also proves both sides have exactly the same parameters.
TORCH_TO_ATTNLAB = {
    "self_attn.in_proj_": "self_attn.qkv_proj.",
    "self_attn.out_proj.": "self_attn.out_proj.",
    "multihead_attn.in_proj_": "cross_attn.qkv_proj.",
    "multihead_attn.out_proj.": "cross_attn.out_proj.",
    "linear1.": "ffn.linear1.",
    "linear2.": "ffn.linear2.",
    "norm1.": "self_attn_norm.",
}
ENCODER_NORMS = {"norm2.": "ffn_norm."}
DECODER_NORMS = {"norm2.": "cross_attn_norm.", "norm3.": "ffn_norm."}


def copy_from_torch(theirs: nn.Module, ours: TransformerLayer, decoder: bool) -> TransformerLayer:
    names = {**TORCH_TO_ATTNLAB, **(DECODER_NORMS if decoder else ENCODER_NORMS)}
    state = {}
    for name, value in theirs.state_dict().items():
        prefix = next(p for p in names if name.startswith(p))
        state[names[prefix] + name[len(prefix):]] = value
    ours.load_state_dict(state, strict=True)
    return ours


def parity_pair(decoder, norm_first, activation):
    """A random torch.nn encoder/decoder layer (eval) and an attnlab layer with its weights."""
    if decoder:
        torch_class, attnlab_class = nn.TransformerDecoderLayer, DecoderLayer
    else:
        torch_class, attnlab_class = nn.TransformerEncoderLayer, EncoderLayer
    theirs = randomise(torch_class(D_MODEL, HEADS, D_FF, dropout=0.1, activation=activation, batch_first=True,
                                   norm_first=norm_first)).eval()
    ours = attnlab_class(D_MODEL, HEADS, D_FF, norm_first=norm_first, activation=activation)
    return theirs, copy_from_torch(theirs, ours, decoder).eval()


PARITY_SETTINGS = pytest.mark.parametrize("norm_first,activation", [
    (False, "relu"), (False, "gelu"), (True, "relu"), (True, "gelu")], ids=lambda v: str(v))


@PARITY_SETTINGS
def test_encoder_layer_parity_with_torch(norm_first, activation):
    theirs, ours = parity_pair(False, norm_first, activation)
    x = torch.randn(3, 7, D_MODEL)
    mask = key_mask(3, 7)
    expected = theirs(x, src_key_padding_mask=~mask[:, 0, 0])  # torch: True = padding
    out, _ = ours(x, self_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@PARITY_SETTINGS
def test_decoder_layer_parity_with_torch(norm_first, activation):
    theirs, ours = parity_pair(True, norm_first, activation)
    x, memory = torch.randn(3, 7, D_MODEL), torch.randn(3, 5, D_MODEL)
    memory_mask = key_mask(3, 5)
    expected = theirs(x, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(7), tgt_is_causal=True,
                      memory_key_padding_mask=~memory_mask[:, 0, 0])
    out, _ = ours(x, memory=memory, memory_mask=memory_mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------ cached incremental decoding

@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 3, 1]], ids=["steps", "chunks"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_cached_decoder_stack_equals_full_recomputation(norm_first, chunks):
    stack = make_stack(2, decoder=True, norm_first=norm_first, final_norm=True, dtype=torch.float32)
    x, memory = torch.randn(3, 9, D_MODEL), torch.randn(3, 5, D_MODEL)
    memory_mask = key_mask(3, 5)
    full, _ = stack(x, memory=memory, memory_mask=memory_mask)
    cache = stack.new_cache(capacity=2)
    start, outputs = 0, []
    for size in chunks:
        out, _ = stack(x[:, start:start + size], memory=memory if start == 0 else None, memory_mask=memory_mask,
                       cache=cache)
        outputs.append(out)
        start += size
        assert cache.length == start
    assert (torch.cat(outputs, dim=1) - full).abs().max() < 1e-5


def test_layer_scale_zero_makes_a_pre_ln_layer_the_identity():
    torch.manual_seed(0)
    layer = EncoderLayer(8, 2, 16, dropout=0.0, norm_first=True, layer_scale_init=0.0)
    x = torch.randn(3, 5, 8)
    assert torch.equal(layer(x)[0], x)
    assert layer.self_attn_scale.shape == (8,) and layer.cross_attn_scale is None


def test_drop_path_skips_whole_samples_and_scales_the_kept_ones():
    torch.manual_seed(0)
    layer = EncoderLayer(8, 2, 16, dropout=0.0, norm_first=True, drop_path=0.5).train()
    reference = EncoderLayer(8, 2, 16, dropout=0.0, norm_first=True)
    reference.load_state_dict(layer.state_dict())
    x = torch.randn(200, 3, 8)
    # One sub-layer at a time: the FFN branch of each sample is skipped or doubled (1/(1-p)).
    with torch.no_grad():
        branch = reference.ffn(reference.ffn_norm(x))
        out, _ = layer._residual(x, layer.ffn_norm, lambda h: (layer.ffn(h), None))
    kept = torch.isclose(out, x + 2 * branch, atol=1e-6).all(dim=(1, 2))
    skipped = torch.equal(out[~kept], x[~kept])
    assert skipped and 50 < int(kept.sum()) < 150
    with pytest.raises(ValueError, match="drop_path"):
        EncoderLayer(8, 2, 16, drop_path=1.0)
