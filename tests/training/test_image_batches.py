"""Image batches: augmentation (shifts, flips) and exact resumption."""

import torch

from attnlab.data.images import ImageSet
from attnlab.training.image_batches import ImageBatches, random_hflip, random_shift


def _set(n=37, size=6):
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 1, size, size), generator=generator, dtype=torch.uint8)
    return ImageSet("toy", "train", images, torch.arange(n) % 3, ["a", "b", "c"])


def test_random_shift_moves_each_image_within_the_range():
    images = torch.arange(2 * 1 * 5 * 5, dtype=torch.float32).reshape(2, 1, 5, 5) + 1
    assert torch.equal(random_shift(images, 0, torch.Generator()), images)
    shifted = random_shift(images, 2, torch.Generator().manual_seed(3))
    for original, moved in zip(images, shifted):
        padded = torch.nn.functional.pad(original, (2,) * 4)
        candidates = [padded[:, dy:dy + 5, dx:dx + 5] for dy in range(5) for dx in range(5)]
        assert any(torch.equal(moved, c) for c in candidates)


def test_random_hflip_mirrors_some_images_and_keeps_the_rest():
    images = torch.arange(64 * 1 * 2 * 3).reshape(64, 1, 2, 3)
    assert torch.equal(random_hflip(images, torch.Generator(), p=1.0), images.flip(-1))
    assert torch.equal(random_hflip(images, torch.Generator(), p=0.0), images)
    out = random_hflip(images, torch.Generator().manual_seed(0))
    mirrored = [torch.equal(o, i.flip(-1)) for o, i in zip(out, images)]
    assert all(m or torch.equal(o, i) for m, o, i in zip(mirrored, out, images))
    assert 10 < sum(mirrored) < 54  # about half


def test_flipped_batches_resume_exactly():
    data = _set()
    source = ImageBatches(data, 8, seed=2, max_shift=1, hflip=True)
    stream = iter(source)
    next(stream)
    state = source.state_dict()
    rest = list(stream)
    resumed = ImageBatches(data, 8, seed=2, max_shift=1, hflip=True)
    resumed.load_state_dict(state)
    for a, b in zip(rest, list(resumed)):
        assert torch.equal(a["images"], b["images"])
    unflipped = ImageBatches(data, 8, seed=2, max_shift=1)
    unflipped.load_state_dict(state)
    assert any(not torch.equal(a["images"], b["images"]) for a, b in zip(rest, list(unflipped)))


def test_batches_resume_exactly_and_cover_each_epoch_once():
    data = _set()
    source = ImageBatches(data, 8, seed=5, max_shift=1)
    stream = iter(source)
    seen = [next(stream) for _ in range(2)]
    state = source.state_dict()
    rest = list(stream)
    resumed = ImageBatches(data, 8, seed=5, max_shift=1)
    resumed.load_state_dict(state)
    again = list(resumed)
    assert len(rest) == len(again) == len(source) - 2
    for a, b in zip(rest, again):
        assert torch.equal(a["images"], b["images"]) and torch.equal(a["labels"], b["labels"])
    plain = ImageBatches(data, 8, shuffle=False, drop_last=False)
    labels = torch.cat([b["labels"] for b in plain])
    assert torch.equal(labels, data.labels) and len(seen[0]["labels"]) == 8
    next_epoch = list(source)  # a new permutation
    assert not torch.equal(next_epoch[0]["labels"], rest[0]["labels"]) or len(next_epoch) == 0
