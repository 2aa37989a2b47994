"""The captioning task: vocabulary, batches, scores, grounding, and a tiny model that
learns a few scenes in seconds."""

import time

import pytest
import torch

import attnlab
from attnlab.data.scenes import SceneObject, load_scenes, mask_of
from attnlab.families.caption.task import (CaptionBatches, caption_loss, caption_scores, encode_captions,
                                           generate_captions, grounding_hit, grounding_score, object_references,
                                           word_attention)
from attnlab.tasks.captioning import train_caption_tokenizer


@pytest.fixture(scope="module")
def scenes():
    return load_scenes("train", count=40)


@pytest.fixture(scope="module")
def tokenizer(scenes):
    return train_caption_tokenizer(scenes.captions, 1000)


def test_vocabulary_shrinks_to_what_the_captions_allow_and_never_needs_unk(scenes, tokenizer):
    assert 10 < tokenizer.vocab_size < 1000
    ids = [t for group in scenes.captions for t in sum(tokenizer.encode_batch(group), [])]
    assert tokenizer.unk_id not in ids
    assert tokenizer.decode(tokenizer.encode(scenes.captions[0][0])) == scenes.captions[0][0]


def test_batches_teacher_forcing_and_resume(scenes, tokenizer):
    pairs = encode_captions(tokenizer, scenes.captions, 32)
    batches = CaptionBatches(scenes.images, pairs, 16, bos_id=1, eos_id=2, pad_id=0, seed=3)
    first = next(iter(batches))
    assert first["images"].shape == (16, 3, 32, 32) and first["images"].min() >= -1 and first["images"].max() <= 1
    tgt_in, tgt_out = first["tgt_in"], first["tgt_out"]
    assert (tgt_in[:, 0] == 1).all()
    real = tgt_out != -100
    assert torch.equal(tgt_in[:, 1:][real[:, :-1] & real[:, 1:]], tgt_out[:, :-1][real[:, :-1] & real[:, 1:]])
    last_real = tgt_out.gather(1, (real.sum(1) - 1)[:, None])[:, 0]
    assert (last_real == 2).all()  # every target ends with EOS
    state = batches.state_dict()
    rest = [b["tgt_in"] for b in batches]
    again = CaptionBatches(scenes.images, pairs, 16, bos_id=1, eos_id=2, pad_id=0, seed=3)
    again.load_state_dict(state)
    assert all(torch.equal(a, b["tgt_in"]) for a, b in zip(rest, again))


def test_grounding_hit_is_one_on_the_mask_and_the_area_fraction_when_uniform():
    obj = SceneObject("circle", "red", "large", 12.3, 17.8, 5.76)
    mask = torch.from_numpy(mask_of(obj, 32))
    cells = mask.double().view(8, 4, 8, 4).mean((1, 3))  # attention = the object's mask on the 8x8 grid
    assert grounding_hit(cells, mask) == 1.0
    assert grounding_hit(mask.double(), mask) == 1.0  # at pixel resolution too
    assert grounding_hit(torch.ones(8, 8), mask) == pytest.approx(float(mask.double().mean()))
    elsewhere = torch.zeros(8, 8)
    elsewhere[0, 7] = 1.0
    assert grounding_hit(elsewhere, mask) == 0.0
    with pytest.raises(ValueError, match="multiple"):
        grounding_hit(torch.ones(5, 5), mask)


def test_object_references_follow_colour_and_shape():
    objects = [SceneObject("circle", "red", "small", 5, 5, 3), SceneObject("circle", "blue", "large", 20, 20, 5),
               SceneObject("square", "green", "small", 5, 25, 3)]
    words = "a small blue circle to the left of a square and a red triangle".split()
    assert object_references(words, objects) == [(3, 1), (9, 2)]  # the red triangle names nothing


def test_caption_scores(scenes):
    refs = scenes.captions[:4]
    perfect = caption_scores([r[0] for r in refs], refs)
    assert perfect["bleu4"] == pytest.approx(1.0, abs=1e-6) and perfect["cider"] > 1.0
    worse = caption_scores(["a circle", "", "the the the", refs[3][0]], refs)  # an empty caption is scored, not a crash
    assert worse["bleu4"] < perfect["bleu4"] and worse["cider"] < perfect["cider"]
    with pytest.raises(ValueError, match="hypotheses"):
        caption_scores(["a"], refs)


def test_tiny_model_learns_a_few_scenes_in_seconds(scenes, tokenizer):
    few = load_scenes("train", count=4)
    captions = [[c[0]] for c in few.captions]
    pairs = encode_captions(tokenizer, captions, 32)
    torch.manual_seed(0)
    model = attnlab.create_model("captioner_tiny", vocab_size=tokenizer.vocab_size, d_model=64, d_ff=128)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    batches = CaptionBatches(few.images, pairs, 4, bos_id=1, eos_id=2, pad_id=0)
    started = time.perf_counter()
    batch = next(iter(batches))
    for _ in range(150):
        loss, count, _ = caption_loss(model, batch)
        optimizer.zero_grad()
        (loss / count).backward()
        optimizer.step()
    assert time.perf_counter() - started < 60
    generated = generate_captions(model, tokenizer, few.images, beam_size=2)
    assert [g.text for g in generated] == [c[0] for c in captions]
    result = grounding_score(model, tokenizer, few, generated)
    assert result["object_words"] >= 4 and result["unmatched"] == 0
    assert 0.0 <= result["grounding"] <= 1.0 and 0.0 < result["grounding_uniform"] < 0.2


def test_word_attention_of_a_caption_that_fills_the_context():
    model = attnlab.create_model("captioner_tiny").eval()
    image = load_scenes("valid", count=1).images[0]
    full = list(range(4, 4 + model.config.max_positions))  # never ended: no room for the EOS step
    attention = word_attention(model, image, full)
    assert attention.shape == (model.config.max_positions, 8, 8)
    torch.testing.assert_close(attention.sum((1, 2)), torch.ones(model.config.max_positions))
    assert word_attention(model, image, full[:5]).shape == (6, 8, 8)


@pytest.mark.slow
@pytest.mark.skipif(__import__("shutil").which("java") is None, reason="METEOR needs Java")
def test_meteor_where_java_is_present(scenes):
    refs = scenes.captions[:3]
    scores = caption_scores([refs[0][0], "", "a blue thing"], refs, meteor=True)
    perfect = caption_scores([r[0] for r in refs], refs, meteor=True)
    assert 0.0 <= scores["meteor"] < perfect["meteor"] <= 1.0 and perfect["meteor"] > 0.9


def test_twemoji_captioned_by_their_names(tmp_path):
    """`--data emoji:DIR`: each emoji is one image with its Unicode name as the caption."""
    from reference.emoji_package import fake_package

    from attnlab.data.emoji import load_emoji
    from attnlab.families.caption.task import load_caption_split

    root = fake_package(tmp_path)
    for split in ("train", "valid", "test"):
        emoji = load_emoji(root, size=16, split=split)
        data = load_caption_split(f"emoji:{root}", split, image_size=16)
        assert data.images.shape == (len(emoji), 3, 16, 16)
        assert data.captions == [[name] for name in emoji.names] and data.files == emoji.files
        assert torch.equal(data.images, emoji.images.permute(0, 3, 1, 2))
