"""The in-memory batch source and its resumable position."""

import json

import pytest
import torch

from attnlab.training.batches import BatchSource, ListBatchSource


def _numbered(count):
    return [{"index": torch.tensor(i)} for i in range(count)]


def _take(source, count):
    taken, iterator = [], iter(source)
    while len(taken) < count:
        try:
            taken.append(int(next(iterator)["index"]))
        except StopIteration:
            iterator = iter(source)  # the next epoch, as the trainer does
    return taken


def test_each_epoch_covers_every_batch_once_in_a_new_order():
    source = ListBatchSource(_numbered(6), seed=3)
    assert isinstance(source, BatchSource)
    first, second = _take(source, 6), _take(source, 6)
    assert sorted(first) == sorted(second) == list(range(6))
    assert first != second


def test_unshuffled_order_is_list_order():
    assert _take(ListBatchSource(_numbered(3), shuffle=False), 5) == [0, 1, 2, 0, 1]


def test_position_restores_exactly_even_across_epochs():
    source = ListBatchSource(_numbered(5), seed=1)
    for stop in (0, 3, 5, 7):
        reference = ListBatchSource(_numbered(5), seed=1)
        expected = _take(reference, stop + 6)[stop:]
        source = ListBatchSource(_numbered(5), seed=1)
        _take(source, stop)
        state = json.loads(json.dumps(source.state_dict()))
        resumed = ListBatchSource(_numbered(5), seed=1)
        resumed.load_state_dict(state)
        assert _take(resumed, 6) == expected, stop


def test_does_not_touch_the_global_rng():
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    _take(ListBatchSource(_numbered(4)), 9)
    assert torch.equal(torch.rand(1), expected)


def test_rejects_empty_input_and_bad_state():
    with pytest.raises(ValueError, match="batches"):
        ListBatchSource([])
    with pytest.raises(ValueError, match="state"):
        ListBatchSource(_numbered(2)).load_state_dict({"epoch": 0, "position": 9})
