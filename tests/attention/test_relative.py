"""Relative attention (Shaw et al. 2018; Huang et al. 2018's skewing): against a float64
loop that gathers E[clip(i - j)] for every pair, at lengths below, at and above the span,
per head and shared, causal and both directions, with masks, offsets and a fixed-shape
buffer; the two patterns against each other; spans 0 and 1; parameters in models."""

import pytest
import torch
from reference.relative import naive_relative_attention

import attnlab
from attnlab.attention import (AttentionContext, MultiHeadAttention, RelativeShaw, RelativeSkew, build_pattern,
                               list_patterns)
from attnlab.attention.relative import skew

PATTERNS = [RelativeSkew, RelativeShaw]


def bound(cls, heads, dim, **kwargs):
    pattern = cls(**kwargs)
    pattern.bind(heads, dim)
    pattern.double()
    return pattern


def tensors(batch, heads, query_len, key_len, dim, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, n, dim, dtype=torch.float64, generator=generator)
            for n in (query_len, key_len, key_len)]


def test_registered_and_specs_round_trip():
    assert {"relative_skew", "relative_shaw"} <= set(list_patterns())
    spec = {"name": "relative_skew", "max_relative_position": 7, "causal": False, "shared": True}
    pattern = build_pattern(spec)
    assert isinstance(pattern, RelativeSkew) and pattern.spec() == spec and not pattern.causal
    assert build_pattern("relative_shaw").causal


def test_skew_moves_distances_into_place():
    """Column c of row i = distance d_max - c; the skew puts it at key j = pos_i - d."""
    query_len, key_len = 3, 5
    d_max = key_len - 1
    relative = torch.tensor([[float(d_max - c) for c in range(key_len)]] * query_len)
    out = skew(relative, key_len)
    offset = key_len - query_len
    for i in range(query_len):
        for j in range(key_len):
            if j <= i + offset:
                assert out[i, j] == i + offset - j


@pytest.mark.parametrize("cls", PATTERNS)
@pytest.mark.parametrize("length", [3, 5, 9])  # below, equal to (span + 1 rows) and above the span
@pytest.mark.parametrize("shared", [False, True], ids=["per-head", "shared"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "both-directions"])
def test_equals_naive_gather(cls, length, shared, causal):
    span = 4
    pattern = bound(cls, 3, 5, max_relative_position=span, causal=causal, shared=shared)
    q, k, v = tensors(2, 3, length, length, 5)
    expected, _ = naive_relative_attention(q, k, v, pattern.relative_embeddings.detach(),
                                           max_relative_position=span, causal=causal)
    out, _ = pattern(q, k, v, AttentionContext())
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("cls", PATTERNS)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "both-directions"])
def test_key_padding_and_weights(cls, causal):
    pattern = bound(cls, 2, 3, max_relative_position=2, causal=causal)
    q, k, v = tensors(2, 2, 7, 7, 3, seed=1)
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[1, ..., :3] = False  # left padding in row 1 (its first queries see no key: zeros)
    mask[0, ..., 6] = False
    expected, expected_weights = naive_relative_attention(q, k, v, pattern.relative_embeddings.detach(),
                                                          max_relative_position=2, causal=causal, mask=mask)
    out, weights = pattern(q, k, v, AttentionContext(mask=mask, need_weights=True))
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=1e-10)
    fused, _ = pattern(q, k, v, AttentionContext(mask=mask))
    torch.testing.assert_close(fused, expected, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("cls", PATTERNS)
@pytest.mark.parametrize("query_offset,key_offset,query_len,key_len", [
    (None, 0, 1, 11), (None, 0, 4, 11), (None, 3, 2, 6), (7, 2, 3, 9), (6, 0, 1, 16)])
def test_queries_at_offsets(cls, query_offset, key_offset, query_len, key_len):
    """Cached steps (queries last), a cache window's key offset, explicit positions with
    future keys in the buffer (fixed-shape steps)."""
    pattern = bound(cls, 2, 4, max_relative_position=3)
    q, k, v = tensors(1, 2, query_len, key_len, 4, seed=2)
    keys = list(range(key_offset, key_offset + key_len))
    queries = keys[key_len - query_len:] if query_offset is None else range(query_offset, query_offset + query_len)
    expected, _ = naive_relative_attention(q, k, v, pattern.relative_embeddings.detach(), max_relative_position=3,
                                           causal=True, query_positions=queries, key_positions=keys)
    out, _ = pattern(q, k, v, AttentionContext(query_offset=query_offset, key_offset=key_offset))
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)
    if query_offset is not None:  # the offset as a (1,) device tensor: the same
        tensor_out, _ = pattern(q, k, v, AttentionContext(query_offset=torch.tensor([query_offset]),
                                                          key_offset=key_offset))
        torch.testing.assert_close(tensor_out, expected, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "both-directions"])
@pytest.mark.parametrize("shared", [False, True], ids=["per-head", "shared"])
@pytest.mark.parametrize("span", [0, 1, 3, 40])
def test_skew_equals_shaw_values_and_gradients(causal, shared, span):
    torch.manual_seed(0)
    skewed = bound(RelativeSkew, 2, 4, max_relative_position=span, causal=causal, shared=shared)
    shaw = bound(RelativeShaw, 2, 4, max_relative_position=span, causal=causal, shared=shared)
    shaw.load_state_dict(skewed.state_dict())
    q, k, v = (t.requires_grad_() for t in tensors(2, 2, 10, 10, 4, seed=3))
    out_a, _ = skewed(q, k, v, AttentionContext())
    out_b, _ = shaw(q, k, v, AttentionContext())
    torch.testing.assert_close(out_a, out_b, atol=1e-12, rtol=1e-10)
    upstream = torch.randn_like(out_a)
    grads_a = torch.autograd.grad(out_a, (q, k, v, skewed.relative_embeddings), upstream)
    grads_b = torch.autograd.grad(out_b, (q, k, v, shaw.relative_embeddings), upstream)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "both-directions"])
@pytest.mark.parametrize("shared", [False, True], ids=["per-head", "shared"])
@pytest.mark.parametrize("query_offset,key_offset,query_len,key_len,padded", [
    (None, 0, 13, 13, False), (None, 0, 13, 13, True), (None, 2, 5, 11, True), (9, 3, 7, 17, False)])
def test_query_chunks_equal_the_naive_reference_values_and_gradients(causal, shared, query_offset, key_offset,
                                                                     query_len, key_len, padded):
    """Long inputs go through query chunks (checkpointed under autograd; causal chunks cut
    the keys after their last query): the same values as the float64 loop and the same
    gradients as the computation in one piece, with padding, offsets, odd sizes and a last
    chunk shorter than the others."""
    span = 4
    pattern = bound(RelativeSkew, 2, 3, max_relative_position=span, causal=causal, shared=shared)
    pattern.chunk_elements = 2 * 2 * key_len * 3  # 3 query rows per chunk
    q, k, v = (t.requires_grad_() for t in tensors(2, 2, query_len, key_len, 3, seed=5))
    mask = None
    if padded:
        mask = torch.ones(2, 1, 1, key_len, dtype=torch.bool)
        mask[1, ..., :3] = False
        mask[0, ..., -1] = False
    keys = list(range(key_offset, key_offset + key_len))
    queries = keys[key_len - query_len:] if query_offset is None else range(query_offset, query_offset + query_len)
    embeddings = pattern.relative_embeddings
    expected, _ = naive_relative_attention(q, k, v, embeddings, max_relative_position=span, causal=causal, mask=mask,
                                           query_positions=queries, key_positions=keys)
    ctx = AttentionContext(query_offset=query_offset, key_offset=key_offset, mask=mask)
    calls = []
    original = pattern._attend
    pattern._attend = lambda *a: calls.append(a[0].shape[-2]) or original(*a)
    out, _ = pattern(q, k, v, ctx)
    assert calls == [min(3, query_len - i) for i in range(0, query_len, 3)]  # really in chunks
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)
    # gradients: against the whole computation (one chunk), itself tested against Shaw's
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v, embeddings), upstream)
    pattern._attend = original
    pattern.chunk_elements = 0  # no chunks
    whole, _ = pattern(q, k, v, ctx)
    want = torch.autograd.grad(whole, (q, k, v, embeddings), upstream)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)


def test_query_chunks_with_dropout_recompute_the_same_masks():
    """Checkpointed chunks are recomputed in the backward pass with the forward's dropout:
    the gradients equal those of the same chunks without checkpointing (same seed)."""
    pattern = bound(RelativeSkew, 2, 4, max_relative_position=5)
    pattern.chunk_elements = 2 * 12 * 4
    q, k, v = (t.requires_grad_() for t in tensors(1, 2, 12, 12, 4, seed=6))
    torch.manual_seed(11)
    out, _ = pattern(q, k, v, AttentionContext(dropout_p=0.3))
    grads = torch.autograd.grad(out.square().sum(), (q, k, v, pattern.relative_embeddings))
    torch.manual_seed(11)
    plain = torch.cat([pattern._attend(q[..., i:i + 4, :], k[..., :i + 4, :], v[..., :i + 4, :],
                                       AttentionContext(query_offset=i, dropout_p=0.3))[0] for i in range(0, 12, 4)], -2)
    torch.testing.assert_close(out, plain, atol=1e-12, rtol=1e-10)
    for a, b in zip(grads, torch.autograd.grad(plain.square().sum(), (q, k, v, pattern.relative_embeddings))):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)
    assert not torch.equal(out, pattern(q, k, v, AttentionContext())[0])  # dropout did drop something


def test_span_zero_is_content_only_attention():
    """One embedding for every distance adds the same logit to every key: no effect."""
    pattern = bound(RelativeSkew, 2, 4, max_relative_position=0)
    q, k, v = tensors(1, 2, 6, 6, 4)
    out, _ = pattern(q, k, v, AttentionContext())
    plain, _ = build_pattern("causal")(q, k, v, AttentionContext())
    torch.testing.assert_close(out, plain, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("spec,message", [
    ({"name": "relative_skew", "max_relative_position": -1}, "must be in"),
    ({"name": "relative_skew", "max_relative_position": 2.5}, "must be an integer"),
    ({"name": "relative_shaw", "max_relative_position": 1 << 20}, "must be in"),
    ({"name": "relative_skew", "causal": "yes"}, "true or false"),
    ({"name": "relative_skew", "span": 3}, "span")])
def test_bad_parameters_are_rejected_clearly(spec, message):
    with pytest.raises(ValueError, match=message):
        build_pattern(spec)


def test_binding_twice_to_other_heads_is_refused():
    pattern = RelativeSkew(max_relative_position=2)
    MultiHeadAttention(8, 2, pattern=pattern)
    with pytest.raises(ValueError, match="already bound"):
        MultiHeadAttention(8, 4, pattern=pattern)


def test_parameters_live_in_the_model_and_survive_save_load(tmp_path):
    torch.manual_seed(0)
    spec = {"name": "relative_skew", "max_relative_position": 5, "causal": True, "shared": False}
    model = attnlab.create_model("lm_tiny", attention=spec, positional="none").eval()
    names = [name for name, _ in model.named_parameters() if "relative" in name]
    assert names == [f"decoder.stack.layers.{i}.self_attn.pattern.relative_embeddings" for i in range(2)]
    assert model.decoder.layers[0].self_attn.pattern.relative_embeddings.shape == (4, 6, 8)
    with torch.device("meta"):  # the parameter count the loader checks before allocating
        assert attnlab.create_model("lm_tiny", attention=spec, positional="none").num_parameters() == \
            model.num_parameters()
    model.save_pretrained(tmp_path)
    loaded = attnlab.load_model(tmp_path)
    assert loaded.config.attention == spec
    ids = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids))
    # the embeddings take part in training
    model.train()
    model(ids).sum().backward()
    assert model.decoder.layers[0].self_attn.pattern.relative_embeddings.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["relative_skew", "relative_shaw"])
def test_cached_decoding_equals_recomputation_at_twice_the_trained_length(name):
    """A model 'trained' on windows of 16 with span 6 decodes 32 tokens with its cache (eager
    and fixed-shape) exactly as a full forward over each prefix."""
    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny", vocab_size=23, d_model=16, num_heads=2, d_ff=24, max_positions=16,
                                 positional="none", attention={"name": name, "max_relative_position": 6}).eval()
    ids = torch.randint(1, 23, (2, 32))
    config = model.config.replace(max_positions=32)  # NoPE + relative: the length is only a cap
    longer = type(model)(config).eval()
    longer.load_state_dict(model.state_dict())
    with torch.no_grad():
        full = longer(ids)
        for fixed_shape in (False, True):
            cache = longer.new_cache(2, 32, fixed_shape=fixed_shape)
            torch.testing.assert_close(longer.prefill(ids[:, :3], cache), full[:, 2], atol=1e-5, rtol=1e-5)
            for t in range(3, 32):
                torch.testing.assert_close(longer.step(ids[:, t], cache), full[:, t], atol=1e-5, rtol=1e-5)


def test_relative_encoder_both_directions_without_absolute_positions(tmp_path):
    """An encoder–decoder whose encoder attends in both directions with relative_skew and has
    no absolute positions: allowed (the pattern tells positions apart), order matters, and
    it saves and loads."""
    torch.manual_seed(0)
    encoder_spec = {"name": "relative_skew", "max_relative_position": 4, "causal": False, "shared": True}
    model = attnlab.create_model("transformer_tiny", vocab_size=19, d_model=16, num_heads=2, d_ff=24,
                                 num_encoder_layers=1, num_decoder_layers=1, positional="none",
                                 encoder_attention=encoder_spec,
                                 decoder_attention={"name": "relative_skew", "max_relative_position": 4}).eval()
    assert model.encoder.layers[0].self_attn.pattern.relative_embeddings.shape == (9, 8)
    src = torch.tensor([[4, 7, 9, 11, 5, 6, 2]])
    with torch.no_grad():
        memory, _ = model.encode(src)
        swapped, _ = model.encode(src[:, [1, 0, 2, 3, 4, 5, 6]])
    assert (memory[:, 2:] - swapped[:, 2:]).abs().max() > 1e-4  # order reaches the other tokens
    model.save_pretrained(tmp_path)
    loaded = attnlab.load_model(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(loaded.encode(src)[0], memory)
    with pytest.raises(ValueError, match="positional='none' needs causal attention"):
        attnlab.create_model("transformer_tiny", positional="none")  # full attention cannot tell order
