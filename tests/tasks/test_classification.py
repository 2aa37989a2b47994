"""Classification task: augmentation, resumable batches, loss logs, evaluation."""

import torch

from attnlab.data.images import ImageSet
from attnlab.tasks.classification import (ImageBatches, classification_loss, evaluate_classifier, normalize,
                                          random_hflip, random_shift)


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


def test_loss_sums_and_correct_count():
    class Fixed(torch.nn.Module):
        def forward(self, images):
            return torch.stack([images.mean((1, 2, 3)), -images.mean((1, 2, 3))], dim=1)

    batch = {"images": normalize(torch.tensor([[[[255]]], [[[0]]], [[[255]]]], dtype=torch.uint8)),
             "labels": torch.tensor([0, 0, 1])}
    loss_sum, count, logs = classification_loss(Fixed(), batch, label_smoothing=0.0)
    logits = Fixed()(batch["images"])
    expected = torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum")
    torch.testing.assert_close(loss_sum, expected)
    assert count == 3 and int(logs["correct"]) == 1


def test_evaluation_confusion_matrix():
    data = _set(n=9)

    class Guess(torch.nn.Module):  # predicts class 0 for everything
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, images):
            return torch.tensor([5.0, 0.0, 0.0]).expand(len(images), 3) + self.w

    evaluation = evaluate_classifier(Guess(), data)
    assert evaluation.confusion.tolist() == [[3, 0, 0], [3, 0, 0], [3, 0, 0]]
    assert abs(evaluation.accuracy - 1 / 3) < 1e-12 and evaluation.per_class == [1.0, 0.0, 0.0]
