import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.data import TokenBatchSampler, TranslationBatches, collate_translation, filter_by_length

lengths = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=1, max_size=300)


def padded_size(batch, src, tgt, added=1):
    return len(batch) * (max(max(src[i], tgt[i]) for i in batch) + added)


@settings(max_examples=60, deadline=None)
@given(pairs=lengths, max_tokens=st.integers(61, 2000), max_sentences=st.none() | st.integers(1, 50),
       seed=st.integers(0, 2**32 - 1))
def test_batches_respect_max_tokens_and_cover_every_example_once(pairs, max_tokens, max_sentences, seed):
    src, tgt = zip(*pairs)
    sampler = TokenBatchSampler(src, tgt, max_tokens, max_sentences=max_sentences, seed=seed)
    for epoch in range(3):
        batches = list(sampler)
        assert len(batches) == len(sampler)
        assert sorted(i for batch in batches for i in batch) == list(range(len(pairs)))
        for batch in batches:
            assert padded_size(batch, src, tgt) <= max_tokens
            if max_sentences is not None:
                assert len(batch) <= max_sentences
        assert sampler.state_dict() == {"epoch": epoch + 1, "position": 0}


def test_bound_holds_for_the_collated_tensors():
    rng = np.random.default_rng(0)
    examples = [(rng.integers(4, 100, rng.integers(1, 40)).tolist(), rng.integers(4, 100, rng.integers(1, 40)).tolist())
                for _ in range(500)]
    sampler = TokenBatchSampler([len(s) for s, _ in examples], [len(t) for _, t in examples], max_tokens=256)
    loader = torch.utils.data.DataLoader(examples, batch_sampler=sampler, collate_fn=collate_translation)
    seen = 0
    for batch in loader:
        assert batch["src"].numel() <= 256 and batch["tgt_in"].numel() <= 256
        seen += len(batch["src"])
    assert seen == 500


def test_bucketing_groups_similar_lengths():
    rng = np.random.default_rng(1)
    src = rng.integers(1, 100, 2000)
    sampler = TokenBatchSampler(src, src, max_tokens=1000)
    batches = sampler.batches(0)
    real = sum(src[batch].sum() + len(batch) for batch in batches)
    padded = sum(padded_size(batch, src, src) for batch in batches)
    assert real / padded > 0.95  # sorted, then cut: little padding (random batches: about 0.5)


def test_shuffle_is_seeded_and_differs_across_epochs():
    src = list(range(1, 201))
    tgt = src[::-1]
    a = TokenBatchSampler(src, tgt, max_tokens=600, seed=3)
    b = TokenBatchSampler(src, tgt, max_tokens=600, seed=3)
    other_seed = TokenBatchSampler(src, tgt, max_tokens=600, seed=4)
    assert a.batches(0) == b.batches(0) and a.batches(5) == b.batches(5)
    assert a.batches(0) != a.batches(1)
    assert a.batches(0) != other_seed.batches(0)
    assert list(a) == b.batches(0) and list(a) == b.batches(1)  # iteration walks the epochs


def test_ties_are_regrouped_each_epoch():
    sampler = TokenBatchSampler([5] * 100, [5] * 100, max_tokens=60, seed=0)  # 10 per batch
    groups = lambda epoch: {frozenset(batch) for batch in sampler.batches(epoch)}
    assert groups(0) != groups(1)


def test_without_shuffle_batches_come_shortest_first():
    sampler = TokenBatchSampler([9, 1, 5, 3], [0, 0, 0, 0], max_tokens=10, shuffle=False)
    assert sampler.batches(0) == sampler.batches(7) == [[1, 3], [2], [0]]


def test_resume_mid_epoch_gives_the_same_batches():
    src = np.random.default_rng(2).integers(1, 50, 400)
    uninterrupted = TokenBatchSampler(src, src, max_tokens=300, seed=9)
    expected = [batch for _ in range(2) for batch in uninterrupted]

    first = TokenBatchSampler(src, src, max_tokens=300, seed=9)
    taken = []
    for batch in first:
        taken.append(batch)
        if len(taken) == 7:
            break
    state = first.state_dict()
    assert state == {"epoch": 0, "position": 7}

    resumed = TokenBatchSampler(src, src, max_tokens=300, seed=9)
    resumed.load_state_dict(state)
    taken += list(resumed) + list(resumed)
    assert taken[: len(expected)] == expected
    assert resumed.state_dict() == {"epoch": 2, "position": 0}


def test_bad_state_is_rejected():
    sampler = TokenBatchSampler([1, 2, 3], [1, 2, 3], max_tokens=4)
    with pytest.raises(ValueError, match="position=99"):
        sampler.load_state_dict({"epoch": 0, "position": 99})


def test_example_too_long_for_max_tokens_is_an_error():
    with pytest.raises(ValueError, match=r"index 2, has src_len=3, tgt_len=10.*max_length=9"):
        TokenBatchSampler([1, 2, 3, 12], [1, 2, 10, 1], max_tokens=10)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (([1, 2], [1]), dict(max_tokens=10), "src_lengths has 2 entries but tgt_lengths has 1"),
        (([], []), dict(max_tokens=10), "no examples"),
        (([1, -1], [1, 1]), dict(max_tokens=10), "negative length -1 at index 1"),
        (([1], [1]), dict(max_tokens=0), "max_tokens=0"),
        (([1], [1]), dict(max_tokens=5, seed=-1), "seed=-1"),
    ],
)
def test_bad_sampler_arguments(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenBatchSampler(*args, **kwargs)


def test_length_filter_counts_what_it_drops():
    src = [0, 5, 300, 10, 10, 2, 4]
    tgt = [5, 5, 10, 200, 11, 30, 4]
    result = filter_by_length(src, tgt, max_length=100, min_length=1, max_ratio=3)
    assert result.kept == [1, 4, 6]
    assert (result.too_short, result.too_long, result.bad_ratio, result.dropped) == (1, 2, 1, 4)
    assert filter_by_length(src, tgt).kept == [1, 2, 3, 4, 5, 6]
    with pytest.raises(ValueError, match="max_ratio=0.5"):
        filter_by_length(src, tgt, max_ratio=0.5)


def test_collate_pads_and_adds_bos_eos():
    batch = collate_translation([([10, 11, 12], [20]), ([13], [21, 22, 23])])
    assert batch["src"].tolist() == [[10, 11, 12, 2], [13, 2, 0, 0]]
    assert batch["tgt_in"].tolist() == [[1, 20, 0, 0], [1, 21, 22, 23]]
    assert batch["tgt_out"].tolist() == [[20, 2, 0, 0], [21, 22, 23, 2]]
    assert all(tensor.dtype == torch.long for tensor in batch.values())


def test_collate_custom_ids_and_empty_batch():
    batch = collate_translation([([5], [])], pad_id=7, bos_id=8, eos_id=9)
    assert [batch[k].tolist() for k in ("src", "tgt_in", "tgt_out")] == [[[5, 9]], [[8]], [[9]]]
    with pytest.raises(ValueError, match="empty batch"):
        collate_translation([])


def test_translation_batches_are_a_resumable_batch_source():
    rng = np.random.default_rng(4)
    examples = [(rng.integers(4, 50, rng.integers(1, 20)).tolist(), rng.integers(4, 50, rng.integers(1, 20)).tolist())
                for _ in range(300)]
    source = TranslationBatches(examples, max_tokens=120, seed=2)
    batches = source.sampler.batches(0)
    for batch, indices in zip(source, batches):
        assert torch.equal(batch["tgt_out"], collate_translation([examples[i] for i in indices])["tgt_out"])
        assert batch["src"].numel() <= 120
    assert source.state_dict() == {"epoch": 1, "position": 0}

    iterator = iter(source)
    head = [next(iterator)["src"] for _ in range(5)]
    resumed = TranslationBatches(examples, max_tokens=120, seed=2)
    resumed.load_state_dict(source.state_dict())
    tail = [batch["src"] for batch in resumed]
    assert len(head) + len(tail) == len(source)
    expected = [collate_translation([examples[i] for i in b])["src"] for b in source.sampler.batches(1)]
    assert all(torch.equal(x, y) for x, y in zip(head + tail, expected))

    batches_module = pytest.importorskip("attnlab.training.batches")
    assert isinstance(source, batches_module.BatchSource)
