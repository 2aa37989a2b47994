"""Classification task: loss logs, evaluation."""

import torch

from attnlab.data.images import ImageSet, normalize
from attnlab.families.vit.task import classification_loss, evaluate_classifier


def _set(n=37, size=6):
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 1, size, size), generator=generator, dtype=torch.uint8)
    return ImageSet("toy", "train", images, torch.arange(n) % 3, ["a", "b", "c"])


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
