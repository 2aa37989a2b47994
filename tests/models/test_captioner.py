"""The Captioner: image encoder + the shared TokenDecoder; cached decoding, search, failure modes."""

import pytest
import torch

import attnlab
from attnlab.generation import beam_search, greedy_search
from attnlab.generation.protocols import EncoderDecoder
from attnlab.models.captioner import Captioner, CaptionerConfig


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
