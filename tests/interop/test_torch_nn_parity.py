"""attnlab.interop.from_torch_transformer: the converted stacks compute what torch.nn.Transformer computes.

nn.Transformer has no embeddings, so both sides get the same embedded (random) inputs. The
torch side gets its own masks: ``src_key_padding_mask`` + ``memory_key_padding_mask``
(True = pad), a causal ``tgt_mask`` and ``tgt_key_padding_mask``; attnlab gets its
``(B, 1, 1, S)`` key-padding mask (True = real). Positions that are padding are not
compared (torch's fast path writes zeros there; attnlab leaves them unspecified).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import attnlab
from attnlab.interop import TransformerStacks, from_torch_transformer
from attnlab.models import Transformer

# torch's own note that its nested-tensor fast path is a prototype: not ours to act on.
pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")

D_MODEL, HEADS, D_FF, LAYERS = 32, 4, 64, 2
SRC_LENGTHS = [7, 4, 1]  # right-padded to 7
TGT_LENGTHS = [5, 2, 6]  # right-padded to 6

VARIANTS = {
    "post_ln_relu": dict(norm_first=False, activation="relu"),
    "pre_ln_relu": dict(norm_first=True, activation="relu"),
    "post_ln_gelu": dict(norm_first=False, activation="gelu"),
    "pre_ln_gelu_module": dict(norm_first=True, activation=nn.GELU()),
    "post_ln_gelu_tanh": dict(norm_first=False, activation=nn.GELU(approximate="tanh")),
}


def torch_transformer(seed: int, **kwargs) -> nn.Transformer:
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested-tensor notes about norm_first
        transformer = nn.Transformer(D_MODEL, HEADS, LAYERS, LAYERS, D_FF, dropout=0.1, batch_first=True, **kwargs)
    # Non-trivial LayerNorm affine parameters and biases, so a swapped norm or a lost
    # bias cannot go unnoticed (nn.Transformer initialises them to 1 and 0).
    with torch.no_grad():
        for name, parameter in transformer.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.add_(0.1 * torch.randn_like(parameter))
    return transformer.eval()


def padding_masks(lengths: list[int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (real (B, L) bool, True at real tokens; torch's padding mask, True at pads)."""
    real = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
    return real, ~real


def embedded_inputs(seed: int):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randn(len(SRC_LENGTHS), max(SRC_LENGTHS), D_MODEL, generator=generator)
    tgt = torch.randn(len(TGT_LENGTHS), max(TGT_LENGTHS), D_MODEL, generator=generator)
    return src, tgt


def run_torch(transformer: nn.Transformer, src, tgt, *, fast_path: bool):
    """Encoder output, decoder output, full forward. ``fast_path=False`` runs with autograd
    on, which keeps torch off its inference fast path (nested tensors, fused encoder layer)
    so every module computes exactly what it declares."""
    _, src_pad = padding_masks(SRC_LENGTHS, src.shape[1])
    _, tgt_pad = padding_masks(TGT_LENGTHS, tgt.shape[1])
    causal = torch.ones(tgt.shape[1], tgt.shape[1], dtype=torch.bool).triu(1)  # True = may not attend
    with torch.set_grad_enabled(not fast_path):
        memory = transformer.encoder(src, src_key_padding_mask=src_pad)
        out = transformer.decoder(tgt, memory, tgt_mask=causal, tgt_is_causal=True, tgt_key_padding_mask=tgt_pad,
                                  memory_key_padding_mask=src_pad)
        full = transformer(src, tgt, tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                           memory_key_padding_mask=src_pad, tgt_is_causal=True)
    return memory.detach(), out.detach(), full.detach()


def run_attnlab(stacks: TransformerStacks, src, tgt):
    src_real, _ = padding_masks(SRC_LENGTHS, src.shape[1])
    mask = src_real[:, None, None, :]
    with torch.no_grad():
        memory, _ = stacks.encoder(src, self_mask=mask)
        out, _ = stacks.decoder(tgt, memory=memory, memory_mask=mask)
        full = stacks(src, tgt, src_mask=mask)
    return memory, out, full


def max_diff_at(a: torch.Tensor, b: torch.Tensor, real: torch.Tensor) -> float:
    return float((a - b).abs()[real].max())


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("seed", [0, 1])
def test_encoder_and_decoder_outputs_equal_torch(variant, seed):
    transformer = torch_transformer(seed, **VARIANTS[variant])
    stacks = from_torch_transformer(transformer)
    assert not stacks.training
    src, tgt = embedded_inputs(seed + 100)
    ours = run_attnlab(stacks, src, tgt)
    src_real, _ = padding_masks(SRC_LENGTHS, src.shape[1])
    tgt_real, _ = padding_masks(TGT_LENGTHS, tgt.shape[1])
    # torch's inference fast path runs the encoder layer as one fused op that treats
    # nn.GELU(approximate="tanh") as the exact GELU, so its encoder disagrees with torch's
    # own modules there; the module semantics (fast_path=False) are what we match.
    fast_paths = [False] if variant.endswith("gelu_tanh") else [False, True]
    for fast_path in fast_paths:
        theirs = run_torch(transformer, src, tgt, fast_path=fast_path)
        assert max_diff_at(ours[0], theirs[0], src_real) < 1e-5, f"encoder output, {fast_path=}"
        assert max_diff_at(ours[1], theirs[1], tgt_real) < 1e-5, f"decoder output, {fast_path=}"
        assert max_diff_at(ours[2], theirs[2], tgt_real) < 1e-5, f"full forward, {fast_path=}"
    # The comparison means something: outputs are far from trivially equal inputs.
    assert max_diff_at(ours[1], tgt, tgt_real) > 0.1


def test_parity_detects_a_changed_weight():
    """The tolerance is tight enough to see a small change in one weight."""
    transformer = torch_transformer(0)
    stacks = from_torch_transformer(transformer)
    with torch.no_grad():
        stacks.decoder.layers[1].cross_attn.qkv_proj.weight[40, 3] += 1e-2  # a key row of cross-attention
    src, tgt = embedded_inputs(5)
    tgt_real, _ = padding_masks(TGT_LENGTHS, tgt.shape[1])
    ours, theirs = run_attnlab(stacks, src, tgt)[1], run_torch(transformer, src, tgt, fast_path=False)[1]
    assert max_diff_at(ours, theirs, tgt_real) > 1e-5


def test_source_padding_content_is_ignored():
    """Changing padded source vectors changes nothing at real positions, on both sides."""
    transformer = torch_transformer(3)
    stacks = from_torch_transformer(transformer)
    src, tgt = embedded_inputs(3)
    src_real, _ = padding_masks(SRC_LENGTHS, src.shape[1])
    tgt_real, _ = padding_masks(TGT_LENGTHS, tgt.shape[1])
    noisy = src.clone()
    noisy[~src_real] = 100 * torch.randn(int((~src_real).sum()), D_MODEL)
    base = run_attnlab(stacks, src, tgt)
    changed = run_attnlab(stacks, noisy, tgt)
    assert max_diff_at(base[0], changed[0], src_real) < 1e-5
    assert max_diff_at(base[1], changed[1], tgt_real) < 1e-5


def test_converter_copies_weights_not_shares_them():
    transformer = torch_transformer(0)
    stacks = from_torch_transformer(transformer)
    before = run_attnlab(stacks, *embedded_inputs(0))[1].clone()
    with torch.no_grad():
        for parameter in transformer.parameters():
            parameter.zero_()
    after = run_attnlab(stacks, *embedded_inputs(0))[1]
    assert torch.equal(before, after)


def test_converter_keeps_training_mode_and_counts():
    transformer = torch_transformer(0).train()
    stacks = from_torch_transformer(transformer)
    assert stacks.training
    assert sum(p.numel() for p in stacks.parameters()) == sum(p.numel() for p in transformer.parameters())


@pytest.mark.parametrize("kwargs, words", [
    (dict(activation=torch.nn.functional.silu), ["activation"]),
    (dict(bias=False), ["bias"]),
])
def test_unsupported_transformers_raise_value_error(kwargs, words):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformer = nn.Transformer(D_MODEL, HEADS, 1, 1, D_FF, batch_first=True, **kwargs)
    with pytest.raises(ValueError) as error:
        from_torch_transformer(transformer)
    for word in words:
        assert word in str(error.value)


@pytest.mark.parametrize("norm_first", [False, True])
def test_full_model_with_converted_stacks_equals_torch_on_embedded_inputs(norm_first):
    """A Transformer built from a config, with the converter's stacks, equals nn.Transformer
    fed with that Transformer's own embeddings; logits = output projection of torch's output."""
    transformer = torch_transformer(7, norm_first=norm_first)
    stacks = from_torch_transformer(transformer)
    model = attnlab.create_model("transformer_tiny", vocab_size=20, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF,
                                 num_encoder_layers=LAYERS, num_decoder_layers=LAYERS, norm_first=norm_first,
                                 dropout=0.1).eval()
    assert isinstance(model, Transformer)
    model.encoder.stack.load_state_dict(stacks.encoder.state_dict())
    model.decoder.stack.load_state_dict(stacks.decoder.state_dict())
    for ours, theirs in ((model.encoder.stack, stacks.encoder), (model.decoder.stack, stacks.decoder)):
        for (name, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
            assert torch.equal(a, b), name

    generator = torch.Generator().manual_seed(1)
    src_ids = torch.randint(3, 20, (len(SRC_LENGTHS), max(SRC_LENGTHS)), generator=generator)
    tgt_ids = torch.randint(3, 20, (len(TGT_LENGTHS), max(TGT_LENGTHS)), generator=generator)
    src_real, src_pad = padding_masks(SRC_LENGTHS, src_ids.shape[1])
    tgt_real, tgt_pad = padding_masks(TGT_LENGTHS, tgt_ids.shape[1])
    src_ids[src_pad] = model.config.pad_id
    tgt_ids[tgt_pad] = model.config.pad_id

    with torch.no_grad():
        logits = model(src_ids, tgt_ids)
        src_embedded = model.encoder.embed_tokens(src_ids, torch.arange(src_ids.shape[1]))
        tgt_embedded = model.decoder.embed_tokens(tgt_ids, torch.arange(tgt_ids.shape[1]))
        causal = torch.ones(tgt_ids.shape[1], tgt_ids.shape[1], dtype=torch.bool).triu(1)
        hidden = transformer(src_embedded, tgt_embedded, tgt_mask=causal, tgt_is_causal=True,
                             src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                             memory_key_padding_mask=src_pad)
        expected = model.output_proj(hidden)
    assert logits.shape == (len(TGT_LENGTHS), max(TGT_LENGTHS), 20)
    assert max_diff_at(logits, expected, tgt_real) < 1e-5
    # The embedding really is token × sqrt(d_model) + sinusoid, as the paper says.
    assert torch.allclose(src_embedded[0, 2], model.src_embed.weight[src_ids[0, 2]] * D_MODEL ** 0.5
                          + model.positions(torch.tensor(2)), atol=1e-6)
