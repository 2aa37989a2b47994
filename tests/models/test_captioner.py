"""The Captioner: image encoder + the shared TokenDecoder; cached decoding, search, failure modes."""

import warnings

import pytest
import torch

import attnlab
from attnlab.attention import StaticKVCache
from attnlab.generation import beam_search, greedy_search
from attnlab.generation.compiled import unavailable_reason
from attnlab.generation.protocols import EncoderDecoder
from attnlab.models.captioner import Captioner, CaptionerConfig

# Fused kernels add in another order than the eager ones: float32 rounding, on any CPU.
TOLERANCE = dict(atol=2e-5, rtol=2e-5)


def _model(encoder="vit", **overrides):
    torch.manual_seed(0)
    config = attnlab.get_preset("captioner_tiny", image_encoder=encoder, num_decoder_layers=2, **overrides)
    return Captioner(config).double().eval()


@pytest.mark.parametrize("encoder", ["vit", "cnn"])
def test_cached_decoding_equals_full_recomputation(encoder):
    model = _model(encoder)
    assert isinstance(model, EncoderDecoder)
    images = torch.randn(3, 3, 32, 32, dtype=torch.float64)
    tokens = torch.randint(4, 64, (3, 9))
    memory, mask = model.encode(images)
    assert mask is None and memory.shape == (3, 64, 32)  # 8x8 cells
    full = model.decode(tokens, memory, None)
    cache = model.new_cache(capacity=4)  # grows past its first capacity
    steps = [model.decode(tokens[:, :3], memory, None, cache=cache)]
    for t in range(3, 9):
        steps.append(model.decode(tokens[:, t:t + 1], None, None, cache=cache))
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-10, atol=1e-10)
    # the teacher-forced forward is the same numbers, without the banned columns masked
    forward = model(images, tokens)
    banned = torch.tensor([0, 1, 3])
    assert torch.isinf(full[..., banned]).all() and torch.isfinite(forward).all()
    assert torch.isinf(full[:, 0, 2]).all() and torch.isfinite(full[:, 1:, 2]).all()  # EOS never first
    keep = torch.tensor([2] + list(range(4, 64)))
    torch.testing.assert_close(forward[:, 1:, keep], full[:, 1:, keep], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(forward[:, :1, 4:], full[:, :1, 4:], rtol=1e-12, atol=1e-12)


def test_decoder_is_causal_and_depends_on_the_image():
    model = _model()
    images = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    a = torch.randint(4, 64, (2, 7))
    b = a.clone()
    b[:, 4:] = torch.randint(4, 64, (2, 3))
    torch.testing.assert_close(model(images, a)[:, :4], model(images, b)[:, :4], rtol=1e-12, atol=1e-12)
    other = model(images.flip(0), a)
    assert (other - model(images, a)).abs().max() > 1e-3


@pytest.mark.parametrize("encoder", ["vit", "cnn"])
def test_search_with_and_without_cache_agree(encoder):
    model = _model(encoder).float()
    images = torch.randn(4, 3, 32, 32)
    greedy = greedy_search(model, images, max_len_a=0, max_len_b=40)
    assert [h.tokens for h in greedy] == [h.tokens for h in greedy_search(model, images, max_len_a=0, max_len_b=40,
                                                                           use_cache=False)]
    beams = beam_search(model, images, beam_size=3, max_len_a=0, max_len_b=40, nbest=3)
    naive = beam_search(model, images, beam_size=3, max_len_a=0, max_len_b=40, nbest=3, use_cache=False)
    assert [[h.tokens for h in b] for b in beams] == [[h.tokens for h in b] for b in naive]
    for hypotheses in beams:
        for h in hypotheses:  # never PAD, BOS or UNK; at most max_positions tokens
            assert not {0, 1, 3} & set(h.tokens) and len(h.tokens) <= model.config.max_positions


def test_a_model_that_never_ends_still_stops():
    model = _model().float()
    model.banned[model.config.eos_id] = True  # EOS can never win
    images = torch.randn(2, 3, 32, 32)
    for h in greedy_search(model, images, max_len_a=0, max_len_b=1000):
        assert len(h.tokens) == model.config.max_positions
    for beams in beam_search(model, images, beam_size=2, max_len_a=0, max_len_b=1000):
        assert len(beams) == 1 and len(beams[0].tokens) == model.config.max_positions


def test_no_empty_beams_or_captions_even_when_the_model_wants_to_stop_at_once():
    model = _model(vocab_size=6).float()  # 2 words + EOS may be emitted
    bias = torch.zeros(6)
    bias[2] = 100.0  # EOS is by far the likeliest token everywhere
    model.decoder.head.bias = torch.nn.Parameter(bias)
    images = torch.randn(3, 3, 32, 32)
    beams = beam_search(model, images, beam_size=8, max_len_a=0, max_len_b=5, nbest=8)
    assert all(len(b) >= 1 for b in beams)  # a beam wider than the vocabulary
    assert all(set(h.tokens) <= {2, 4, 5} and h.tokens[0] != 2 for b in beams for h in b)
    assert [h.tokens[1:] for h in greedy_search(model, images, max_len_a=0, max_len_b=5)] == [[2]] * 3


def test_save_and_load_round_trip(tmp_path):
    model = _model("cnn").float()
    model.save_pretrained(tmp_path / "m")
    loaded = attnlab.load_model(tmp_path / "m")
    images, tokens = torch.randn(2, 3, 32, 32), torch.randint(0, 64, (2, 5))
    torch.testing.assert_close(loaded(images, tokens), model(images, tokens))


def test_bad_inputs():
    model = _model().float()
    with pytest.raises(ValueError, match=r"images must be \(batch, 3, 32, 32\)"):
        model.encode(torch.randn(2, 3, 28, 28))
    with pytest.raises(ValueError, match="floating point"):
        model.encode(torch.zeros(1, 3, 32, 32, dtype=torch.uint8))
    memory, _ = model.encode(torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.decode(torch.tensor([[70]]), memory, None)
    with pytest.raises(ValueError, match="beyond max_positions=32"):
        model.decode(torch.ones(1, 33, dtype=torch.long), memory, None)
    with pytest.raises(ValueError, match="memory_mask must be None"):
        model.decode(torch.ones(1, 2, dtype=torch.long), memory, torch.ones(1, 1, 1, 64, dtype=torch.bool))
    for bad, match in (({"image_encoder": "rnn"}, "image_encoder"),
                       ({"patch_size": 6, "image_size": 36, "image_encoder": "cnn"}, "power of two"),
                       ({"patch_size": 5}, "divisible"), ({"decoder_attention": "full"}, "causal"),
                       ({"unk_id": 64}, "outside the vocabulary")):
        with pytest.raises(ValueError, match=match):
            attnlab.get_preset("captioner_tiny", **bad)


@pytest.mark.parametrize("encoder", ["vit", "cnn"])
def test_attention_maps_for_the_explorer(encoder):
    from attnlab.viz.explorer.maps import attention_maps

    model = _model(encoder)
    images, tokens = torch.randn(1, 3, 32, 32, dtype=torch.float64), torch.randint(4, 64, (1, 6))
    groups = attention_maps(model, images=images, tgt_in_ids=tokens)
    expected = {"decoder self": (2, 4, 6, 6), "cross": (2, 4, 6, 64)}
    if encoder == "vit":
        expected["image encoder self"] = (1, 4, 64, 64)
    assert {name: tuple(w.shape) for name, w in groups.items()} == expected
    for weights in groups.values():
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    # the cross-attention shown is the one the grounding score and the figures read
    from attnlab.families.caption.task import word_attention

    pixels = ((images[0].clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    ours = word_attention(model, pixels, tokens[0, 1:].tolist())
    tgt_in = torch.cat([torch.tensor([[model.config.bos_id]]), tokens[:, 1:]], 1)
    shown = attention_maps(model, images=(pixels[None].double() / 127.5 - 1), tgt_in_ids=tgt_in)["cross"]
    torch.testing.assert_close(ours, shown[-1].mean(0).view(6, 8, 8), rtol=1e-5, atol=1e-6)


def test_sampled_captions_follow_the_protocol():
    from attnlab.data.tokenizer import Tokenizer
    from attnlab.families.caption.task import sample_captions

    tokenizer = Tokenizer.train([f"word{i} w{i % 7} x{i % 5}" for i in range(300)], vocab_size=64)
    model = _model().float()
    images = (torch.rand(3, 3, 32, 32) * 255).to(torch.uint8)
    from attnlab.data.images import normalize

    top1 = sample_captions(model, tokenizer, images, top_k=1)  # top-1 sampling is greedy search
    greedy = greedy_search(model, normalize(images), max_len_a=0, max_len_b=model.config.max_positions)
    assert [c.tokens for c in top1] == [[t for t in h.tokens if t != 2] for h in greedy]
    a = sample_captions(model, tokenizer, images, temperature=1.5, seed=1)
    assert [c.tokens for c in a] == [c.tokens for c in sample_captions(model, tokenizer, images, temperature=1.5, seed=1)]
    assert all(c.tokens and not {0, 1, 2, 3} & set(c.tokens) and len(c.tokens) <= 32 for c in a)


# -- the step path (search's road) and the step compiled ahead of time -----------------------
def _teacher_forced_steps(model, step, images, tokens, rows_per_source, origins, *, fixed_shape=False,
                          beam_scores=None):
    """Outputs of ``step`` (``model.decode_step``'s logits; None: beam search's package, given
    ``beam_scores``, its candidates: scores, beams, tokens, each stacked ``(B, T, 2k)``) fed
    ``tokens`` (R, T) one position at a time over a step cache, with ``origins[t]`` (beam search's
    reorder) applied after step t."""
    memory, _ = model.encode(images)
    cache = model.new_step_cache(memory, rows_per_source=rows_per_source, capacity=tokens.shape[1],
                                 fixed_shape=fixed_shape)
    if step is None:
        from attnlab.generation import aot

        step = aot.aot_step(model, "search", cache, beam=rows_per_source)
    out = []
    for t in range(tokens.shape[1]):
        out.append(step(tokens[:, t], cache, None, *(() if beam_scores is None else (beam_scores,))))
        if t in origins:
            cache.reorder(origins[t], include_memory=False)
    return torch.stack(out, 1) if beam_scores is None else tuple(torch.stack(parts, 1) for parts in zip(*out))


def _reference(model, images, tokens, rows_per_source, origins):
    """The same logits by ``decode`` over the whole (reordered) prefix, no cache: float64."""
    memory, _ = model.encode(images)
    memory = memory.repeat_interleave(rows_per_source, 0)
    prefix, out = tokens[:, :0], []
    for t in range(tokens.shape[1]):
        prefix = torch.cat([prefix, tokens[:, t:t + 1]], 1)
        out.append(model.decode(prefix, memory)[:, -1])
        if t in origins:
            prefix = prefix[origins[t]]
    return torch.stack(out, 1)


@pytest.mark.parametrize("encoder", ["vit", "cnn"])
def test_the_step_path_equals_decode_with_the_masks_and_reorders(encoder):
    model = _model(encoder)  # float64: the reference
    images = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    torch.manual_seed(1)
    tokens = torch.randint(2, 64, (6, 7))
    origins = {1: torch.tensor([2, 0, 1, 5, 5, 3]), 4: torch.tensor([1, 1, 0, 4, 3, 3])}  # rows stay in their image
    with torch.no_grad():
        steps = _teacher_forced_steps(model, model.decode_step, images, tokens, 3, origins)
        torch.testing.assert_close(steps, _reference(model, images, tokens, 3, origins), rtol=1e-10, atol=1e-10)
    assert torch.isinf(steps[:, 0, [0, 1, 2, 3]]).all() and torch.isinf(steps[:, 1:, [0, 1, 3]]).all()
    assert torch.isfinite(steps[:, 1:, 2]).all()  # EOS only barred from the first position
    cache = model.new_step_cache(model.encode(images)[0], capacity=1000)
    assert cache.capacity == model.config.max_positions  # a caption is never longer


needs_compiler = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@pytest.fixture(scope="module")
def aot_cache(tmp_path_factory):
    """One package cache for the module's slow tests: each package is built once, then loaded
    by every fresh model of the same structure."""
    return tmp_path_factory.mktemp("aot-cache")


@needs_compiler
@pytest.mark.slow
def test_the_package_gives_the_eager_candidates_greedy_and_beam_tokens(aot_cache, monkeypatch):
    from reference.aot_search import assert_candidates_match, assert_search_through_the_package

    monkeypatch.setenv("ATTNLAB_CACHE", str(aot_cache))
    model = _model().float()
    images = torch.randn(3, 3, 32, 32)
    torch.manual_seed(1)
    tokens = torch.randint(2, 64, (9, 12))
    origins = {2: torch.tensor([1, 1, 0, 3, 4, 5, 8, 6, 6]), 6: torch.tensor([2, 0, 1, 5, 3, 3, 7, 7, 7])}
    beam_scores = -torch.rand(9) * 5  # the hypotheses' scores so far
    with torch.no_grad():  # teacher-forced: a near-tie cannot make the two runs feed different tokens
        # beam search's package gives each image's 2k best continuations
        assert_candidates_match(_teacher_forced_steps(model, None, images, tokens, 3, origins, fixed_shape=True,
                                                      beam_scores=beam_scores),
                                _teacher_forced_steps(model, lambda *a: torch.log_softmax(model.decode_step(*a), -1),
                                                      images, tokens, 3, origins), beam_scores, 3, **TOLERANCE)
    # several images (any number: one package), and one; greedy: one package for several images
    assert_search_through_the_package(model, (images, images[:1]), beam=3, nbest=3, max_len_a=0,
                                      max_len_b=model.config.max_positions)


@needs_compiler
@pytest.mark.slow
def test_seeded_sampled_captions_draw_as_the_eager_step_does(aot_cache, monkeypatch):
    from attnlab.data.tokenizer import Tokenizer
    from attnlab.families.caption.task import sample_captions

    monkeypatch.setenv("ATTNLAB_CACHE", str(aot_cache))
    tokenizer = Tokenizer.train([f"word{i} w{i % 7} x{i % 5}" for i in range(300)], vocab_size=64)
    model = _model().float()
    images = (torch.rand(3, 3, 32, 32) * 255).to(torch.uint8)
    for options in (dict(top_k=5, seed=3), dict(temperature=0.7, top_p=0.9, seed=4)):
        assert [c.tokens for c in sample_captions(model, tokenizer, images, compile="aot", **options)] == \
            [c.tokens for c in sample_captions(model, tokenizer, images, **options)]


def test_without_a_compiler_one_warning_and_eager_captions(tmp_path, monkeypatch):
    from attnlab.data.tokenizer import Tokenizer
    from attnlab.families.caption.task import generate_captions, sample_captions

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    tokenizer = Tokenizer.train([f"word{i} w{i % 7} x{i % 5}" for i in range(300)], vocab_size=64)
    model = _model().float()
    images = (torch.rand(2, 3, 32, 32) * 255).to(torch.uint8)
    fixed = []  # whether each eager step's cache attends its whole buffer: none does, as without compile="aot"
    decode_step = type(model).decode_step
    monkeypatch.setattr(type(model), "decode_step",
                        lambda self, tokens, cache, mask=None: (fixed.append(cache.fixed_shape),
                                                                decode_step(self, tokens, cache, mask))[1])
    with pytest.warns(RuntimeWarning, match="no-such-c\\+\\+' is not found; decoding eagerly") as said:
        captions = generate_captions(model, tokenizer, images, beam_size=2, compile="aot")
    assert len([w for w in said if "decoding eagerly" in str(w.message)]) == 1
    assert captions == generate_captions(model, tokenizer, images, beam_size=2)
    with warnings.catch_warnings():  # said once per model and reason
        warnings.simplefilter("error")
        assert generate_captions(model, tokenizer, images, beam_size=1, compile="aot") == \
            generate_captions(model, tokenizer, images, beam_size=1)
        assert sample_captions(model, tokenizer, images, seed=2, compile="aot") == \
            sample_captions(model, tokenizer, images, seed=2)
    assert fixed and not any(fixed)
    assert not list(tmp_path.rglob("*.pt2")) and not list(tmp_path.rglob("*.json"))
    with pytest.raises(ValueError, match="compile=True"):
        sample_captions(model, tokenizer, images, compile=True)


def test_auto_without_a_package_eager_captions_and_nothing_said_or_written(tmp_path, monkeypatch):
    """compile="auto" (the caption verb's default) with no package built: the eager steps on the default
    cache, for beam search and the sampler, no warning, no cache directory."""
    from attnlab.data.tokenizer import Tokenizer
    from attnlab.families.caption.task import generate_captions, sample_captions

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    tokenizer = Tokenizer.train([f"word{i} w{i % 7} x{i % 5}" for i in range(300)], vocab_size=64)
    model = _model().float()
    images = (torch.rand(2, 3, 32, 32) * 255).to(torch.uint8)
    fixed = []  # each cache as it is made (a fixed-shape one turned to the default kind would pass at a step)
    made = StaticKVCache.__init__
    monkeypatch.setattr(StaticKVCache, "__init__", lambda self, *args, fixed_shape=False, **kwargs: (
        fixed.append(fixed_shape), made(self, *args, fixed_shape=fixed_shape, **kwargs))[1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        beams = generate_captions(model, tokenizer, images, beam_size=2, compile="auto")
        sampled = sample_captions(model, tokenizer, images, seed=2, compile="auto")
    assert fixed and not any(fixed) and not (tmp_path / "cache").exists()
    assert beams == generate_captions(model, tokenizer, images, beam_size=2)
    assert sampled == sample_captions(model, tokenizer, images, seed=2)
