"""One decoding road: for every registered causal pattern and every activation, the cached
step equals the full forward, and cached greedy decoding equals argmax decoding by full
recomputation, on the decoder-only LM and on the encoder–decoder. Also: patterns come from
configs and survive save/load; NoPE."""

import itertools

import pytest
import torch
from reference.toy_patterns import causal_specs

import attnlab
from attnlab.generation import generate, greedy_search
from attnlab.layers.feedforward import ACTIVATIONS

PATTERNS = causal_specs()  # includes the toy banded_causal pattern of tests/reference
CASES = list(itertools.product(PATTERNS, sorted(ACTIVATIONS)))
IDS = [f"{p if isinstance(p, str) else p['name']}-{a}" for p, a in CASES]


def lm(pattern, activation, **overrides):
    torch.manual_seed(0)
    return attnlab.create_model("lm_tiny", vocab_size=23, d_model=16, num_heads=2, d_ff=24, num_layers=2,
                                max_positions=32, attention=pattern, activation=activation, **overrides).eval()


def transformer(pattern, activation, **overrides):
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", vocab_size=19, d_model=16, num_heads=2, d_ff=24,
                                 num_encoder_layers=1, num_decoder_layers=2, decoder_attention=pattern,
                                 activation=activation, **overrides).eval()
    with torch.no_grad():  # sharper distributions than the fresh initialisation: fewer near-ties
        model.decoder.embed.weight.mul_(3.0)
    return model


@pytest.mark.parametrize("pattern,activation", CASES, ids=IDS)
@pytest.mark.parametrize("fixed_shape", [False, True], ids=["eager", "fixed-shape"])
def test_lm_step_equals_full_forward_at_every_position(pattern, activation, fixed_shape):
    model = lm(pattern, activation, norm_first=activation != "relu")
    ids = torch.randint(1, 23, (3, 13))
    mask = torch.ones(3, 13, dtype=torch.bool)
    mask[1, :4] = False  # left padding
    mask[2, :1] = False
    ids[~mask] = 0
    with torch.no_grad():
        full = model(ids, attention_mask=mask)  # (B, L, V)
    cache = model.new_cache(3, 16, fixed_shape=fixed_shape)
    torch.testing.assert_close(model.prefill(ids[:, :5], cache, mask[:, :5]), full[:, 4], atol=1e-5, rtol=1e-5)
    for t in range(5, 13):
        torch.testing.assert_close(model.step(ids[:, t], cache), full[:, t], atol=1e-5, rtol=1e-5)
    assert cache.length == 13 and cache.positions.tolist() == [13, 9, 12]


@pytest.mark.parametrize("pattern,activation", CASES, ids=IDS)
def test_lm_cached_greedy_generation_equals_full_recomputation(pattern, activation):
    model = lm(pattern, activation)
    prompt = [5, 3, 9]
    generated = generate(model, [prompt], max_new_tokens=12, greedy=True)[0]
    sequence = list(prompt)
    with torch.no_grad():
        for _ in range(12):
            sequence.append(int(model(torch.tensor([sequence]))[0, -1].argmax()))
    assert generated == sequence[len(prompt):]


@pytest.mark.parametrize("pattern,activation", CASES, ids=IDS)
def test_encoder_decoder_cached_greedy_equals_full_recomputation(pattern, activation):
    model = transformer(pattern, activation)
    src = torch.tensor([[4, 7, 9, 11, 2], [5, 6, 2, 0, 0]])
    cached = greedy_search(model, src, max_len_a=0, max_len_b=9)
    naive = greedy_search(model, src, max_len_a=0, max_len_b=9, use_cache=False)
    assert [h.tokens for h in cached] == [h.tokens for h in naive]
    # And by hand: argmax over the full decoder recomputation, token for token.
    memory, memory_mask = model.encode(src)
    with torch.no_grad():
        for row, hypothesis in enumerate(cached):
            prefix = [model.config.bos_id]
            for token in hypothesis.tokens:
                logits = model.decode(torch.tensor([prefix]), memory[row:row + 1], memory_mask[row:row + 1])
                assert int(logits[0, -1].argmax()) == token
                prefix.append(token)


@pytest.mark.parametrize("pattern,activation", CASES, ids=IDS)
def test_encoder_decoder_step_equals_full_decode(pattern, activation):
    """The decoder part's step path (static cache, cross-attention keys cached) equals decode()."""
    model = transformer(pattern, activation, norm_first=True)
    src = torch.tensor([[4, 7, 9, 11, 2], [5, 6, 2, 0, 0]])
    tgt = torch.randint(3, 19, (2, 8))
    tgt[:, 0] = model.config.bos_id
    memory, memory_mask = model.encode(src)
    with torch.no_grad():
        full = model.decode(tgt, memory, memory_mask)
        cache = model.decoder.new_cache(2, 8)
        first = model.decoder(tgt[:, :1], torch.arange(1), memory=memory, memory_mask=memory_mask, cache=cache)
        cache.positions.fill_(1)
        torch.testing.assert_close(first[:, 0], full[:, 0], atol=1e-5, rtol=1e-5)
        for t in range(1, 8):
            torch.testing.assert_close(model.decoder.step(tgt[:, t], cache, memory_mask), full[:, t],
                                       atol=1e-5, rtol=1e-5)


def test_patterns_come_from_the_config_and_survive_save_load(tmp_path):
    model = lm({"name": "banded_causal", "width": 1}, "gelu")
    assert all(layer.self_attn.pattern.width == 1 for layer in model.decoder.layers)
    model.save_pretrained(tmp_path)
    loaded = attnlab.load_model(tmp_path)
    assert loaded.config.attention == {"name": "banded_causal", "width": 1}
    ids = torch.randint(0, 23, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids))
    # The band really restricts attention: a token 3 positions back no longer matters.
    changed = ids.clone()
    changed[:, 0] += 1
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[:, 4:], model(changed)[:, 4:])  # 2 layers x width 1 < 4


def test_pattern_fields_are_validated():
    with pytest.raises(ValueError, match="not a causal pattern"):
        attnlab.create_model("lm_tiny", attention="full")
    with pytest.raises(ValueError, match="decoder_attention"):
        attnlab.create_model("transformer_tiny", decoder_attention="full")
    with pytest.raises(ValueError, match="unknown attention pattern 'nope'"):
        attnlab.create_model("transformer_tiny", encoder_attention="nope")
    attnlab.create_model("transformer_tiny", encoder_attention="causal")  # a causal encoder is allowed


def test_nope_is_valid_for_causal_stacks_only():
    model = lm("causal", "gelu", positional="none")
    assert model.decoder.positions is None
    with pytest.raises(ValueError, match="positional='none' needs causal attention"):
        attnlab.create_model("transformer_tiny", positional="none")  # its encoder attends fully
    with pytest.raises(ValueError, match="'rope'"):
        attnlab.create_model("lm_tiny", positional="rope")


def test_without_positions_the_causal_mask_alone_breaks_permutation_symmetry():
    """NoPE: a full-attention stack is permutation-equivariant (it cannot know order); the
    causal mask makes outputs depend on the order of the earlier tokens."""
    torch.manual_seed(0)
    ids = torch.tensor([[3, 8, 1, 12, 5, 9]])
    order = torch.tensor([4, 0, 5, 2, 1, 3])
    model = lm("causal", "gelu", positional="none")
    encoder = attnlab.create_model("transformer_tiny", vocab_size=23, d_model=16, num_heads=2, d_ff=24,
                                   positional="none", encoder_attention="causal").eval().encoder
    full_stack = type(encoder.stack)(  # the same layers with full attention
        [type(layer)(16, 2, 24, dropout=0.0, self_pattern="full") for layer in encoder.layers],
        d_model=16, final_norm=True).eval()
    with torch.no_grad():
        x = model.decoder.embed_tokens(ids, torch.arange(6))
        equivariant, _ = full_stack(x[:, order])
        plain, _ = full_stack(x)
        torch.testing.assert_close(equivariant, plain[:, order], atol=1e-5, rtol=1e-5)
        causal, permuted = model(ids), model(ids[:, order])
        assert (causal[:, order] - permuted).abs().max() > 1e-3
        # The first position sees only itself: its output is a function of its token alone.
        torch.testing.assert_close(model(ids[:, :1])[0, 0], causal[0, 0], atol=1e-5, rtol=1e-5)


def test_step_head_copy_follows_the_weights():
    """The decode step's transposed copy of the output embedding is rebuilt when the weights
    change in place (an optimizer step between two generations), never stale."""
    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny").eval()
    ids = torch.randint(1, model.config.vocab_size, (2, 1))
    with torch.no_grad():
        for _ in range(2):
            step = model.decoder.step(ids[:, 0], model.decoder.new_cache(2, 8))
            torch.testing.assert_close(step, model(ids)[:, -1], rtol=1e-4, atol=1e-5)
            model.decoder.head.weight.mul_(1.5)  # in place, as an optimizer does (tied: the embedding too)
