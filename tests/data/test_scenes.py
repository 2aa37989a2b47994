"""The synthetic scene generator: determinism, disjoint splits, held-out pairs, captions
that agree with the masks and attributes."""

import hashlib
import re

import numpy as np
import pytest
import torch

from attnlab.data.scenes import COLOURS, HELD_OUT_PAIRS, SHAPES, SIZES, load_scenes, mask_of


@pytest.fixture(scope="module")
def splits():
    return {split: load_scenes(split, count=n) for split, n in (("train", 300), ("valid", 60), ("test", 120))}


def test_same_seed_same_scenes_other_seed_other_scenes():
    a, b = load_scenes("valid", count=20), load_scenes("valid", count=20)
    assert torch.equal(a.images, b.images) and a.captions == b.captions and a.objects == b.objects
    assert all(torch.equal(x, y) for x, y in zip(a.masks, b.masks))
    assert not torch.equal(load_scenes("valid", count=20, seed=1).images, a.images)
    # a prefix of a split is the same whatever the count
    assert torch.equal(load_scenes("valid", count=5).images, a.images[:5])


def test_splits_share_no_image(splits):
    digests = {split: {hashlib.sha256(image.numpy().tobytes()).hexdigest() for image in s.images}
               for split, s in splits.items()}
    assert not digests["train"] & digests["valid"]
    assert not digests["train"] & digests["test"]
    assert not digests["valid"] & digests["test"]


def test_held_out_pairs_only_in_test(splits):
    for split in ("train", "valid"):
        pairs = {(o.colour, o.shape) for scene in splits[split].objects for o in scene}
        assert not pairs & HELD_OUT_PAIRS
        assert {c for c, _ in pairs} == set(COLOURS) and {s for _, s in pairs} == set(SHAPES)
    test = splits["test"]
    assert 0.4 < sum(test.unseen) / len(test) < 0.6
    reader = load_scenes("reader", count=300)  # the judges' split: every pair
    assert {(o.colour, o.shape) for scene in reader.objects for o in scene} == {(c, s) for c in COLOURS for s in SHAPES}
    for scene, unseen in zip(test.objects, test.unseen):
        assert unseen == any((o.colour, o.shape) in HELD_OUT_PAIRS for o in scene)


def test_masks_agree_with_attributes_and_pixels(splits):
    s = splits["train"]
    for image, scene, masks in zip(s.images, s.objects, s.masks):
        assert 1 <= len(scene) <= 3 and masks.shape == (len(scene), 32, 32)
        assert int(masks.sum(0).max()) <= 1  # objects do not overlap
        assert len({(o.colour, o.shape) for o in scene}) == len(scene)
        for obj, mask in zip(scene, masks):
            assert mask.any()
            pixels = image.permute(1, 2, 0)[mask].double()
            assert torch.allclose(pixels.mean(0), torch.tensor(COLOURS[obj.colour], dtype=torch.float64), atol=6)
            ys, xs = torch.nonzero(mask, as_tuple=True)
            assert abs(xs.double().mean() + 0.5 - obj.x) < 1.5  # the mask sits where the object is
            assert obj.radius == pytest.approx(SIZES[obj.size] * 32)
        background = ~masks.any(0)
        assert int(image.permute(1, 2, 0)[background].max()) < 40


def test_shapes_are_told_apart_by_their_masks():
    from attnlab.data.scenes import SceneObject

    areas = {shape: int(mask_of(SceneObject(shape, "red", "large", 16, 16, 10), 32).sum()) for shape in SHAPES}
    assert areas["circle"] == pytest.approx(np.pi * 100, rel=0.05)
    assert areas["square"] == pytest.approx(18 * 18, rel=0.1)
    assert areas["triangle"] == pytest.approx(20 * 22 / 2, rel=0.1)


PHRASE = re.compile(r"a (small|large) (\w+) (circle|square|triangle)")


def test_captions_agree_with_objects_and_positions(splits):
    s = splits["test"]
    for scene, captions in zip(s.objects, s.captions):
        by_phrase = {(o.size, o.colour, o.shape): o for o in scene}
        assert len(captions) >= 2
        for caption in captions:
            named = [by_phrase[m.groups()] for m in PHRASE.finditer(caption)]  # KeyError = a false phrase
            assert named
            for relation, check in (("to the left of", lambda a, b: a.x < b.x), ("to the right of", lambda a, b: a.x > b.x),
                                    ("above", lambda a, b: a.y < b.y), ("below", lambda a, b: a.y > b.y)):
                if f" {relation} " in caption:
                    a, b = named
                    assert check(a, b), caption
        # every object is mentioned by some caption
        assert {id(o) for o in scene} <= {id(by_phrase[m.groups()]) for c in captions for m in PHRASE.finditer(c)}


def test_bad_arguments():
    with pytest.raises(ValueError, match="split"):
        load_scenes("dev")
    with pytest.raises(ValueError, match="size"):
        load_scenes("train", size=48)
    with pytest.raises(ValueError, match="count"):
        load_scenes("train", count=0)


def test_64_pixel_scenes():
    s = load_scenes("valid", size=64, count=4)
    assert s.images.shape == (4, 3, 64, 64) and s.masks[0].shape[1:] == (64, 64)
