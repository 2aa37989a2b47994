"""Masks: one convention (True = may attend), checked element by element."""

import re

import pytest
import torch
from reference.attention import reference_band_mask, reference_causal_mask, reference_key_padding_mask

from attnlab.attention import band_mask, causal_mask, check_mask, combine_masks, key_padding_mask, lengths_mask


def test_key_padding_mask_marks_real_tokens():
    ids = torch.tensor([[5, 3, 0, 0], [0, 7, 0, 2], [0, 0, 0, 0]])
    mask = key_padding_mask(ids, pad_id=0)
    assert mask.dtype == torch.bool
    assert mask.shape == (3, 1, 1, 4)
    assert torch.equal(mask, reference_key_padding_mask(ids, 0))


@pytest.mark.parametrize("pad_id", [0, 1, 3])
def test_key_padding_mask_on_random_ids(pad_id):
    ids = torch.randint(0, 5, (3, 13))
    assert torch.equal(key_padding_mask(ids, pad_id), reference_key_padding_mask(ids, pad_id))


def test_lengths_mask_equals_padding_mask_of_right_padded_ids():
    lengths = torch.tensor([0, 1, 5, 7])
    ids = torch.tensor([[9] * int(n) + [0] * (7 - int(n)) for n in lengths])
    mask = lengths_mask(lengths, 7)
    assert mask.shape == (4, 1, 1, 7)
    assert torch.equal(mask, key_padding_mask(ids, 0))


@pytest.mark.parametrize("query_len", [1, 2, 5, 13])
@pytest.mark.parametrize("extra_keys", [0, 1, 4, 12])
def test_causal_mask_aligns_queries_to_the_last_keys(query_len, extra_keys):
    key_len = query_len + extra_keys
    mask = causal_mask(query_len, key_len)
    assert mask.dtype == torch.bool and mask.shape == (query_len, key_len)
    assert torch.equal(mask, reference_causal_mask(query_len, key_len))
    assert mask[-1].all()  # the last query is the newest position: it sees every key
    if extra_keys == 0:
        assert torch.equal(causal_mask(query_len), mask)
        assert torch.equal(mask, torch.ones(query_len, query_len, dtype=torch.bool).tril())


def test_causal_mask_of_a_single_new_query_allows_the_whole_past():
    assert torch.equal(causal_mask(1, 9), torch.ones(1, 9, dtype=torch.bool))


def test_causal_mask_rejects_fewer_keys_than_queries():
    with pytest.raises(ValueError, match="key_len=3"):
        causal_mask(5, 3)


@pytest.mark.parametrize("query_len,key_len", [(1, 1), (5, 5), (5, 9), (1, 7), (13, 17)])
@pytest.mark.parametrize("before,after", [(0, 0), (1, 0), (2, 3), (0, 4), (20, 0)])
def test_band_mask_equals_reference(query_len, key_len, before, after):
    mask = band_mask(query_len, key_len, before=before, after=after)
    assert mask.dtype == torch.bool and mask.shape == (query_len, key_len)
    assert torch.equal(mask, reference_band_mask(query_len, key_len, before, after))


def test_wide_band_without_lookahead_is_the_causal_mask():
    assert torch.equal(band_mask(5, 9, before=100), causal_mask(5, 9))


def test_combine_masks_is_a_broadcasting_and():
    padding = torch.tensor([[True, True, False], [True, False, False]])[:, None, None, :]  # (2, 1, 1, 3)
    causal = causal_mask(3)                                                                  # (3, 3)
    combined = combine_masks(padding, None, causal)
    assert combined.shape == (2, 1, 3, 3)
    for b in range(2):
        for i in range(3):
            for j in range(3):
                assert combined[b, 0, i, j] == (bool(padding[b, 0, 0, j]) and j <= i)


def test_combine_masks_skips_none():
    mask = torch.rand(2, 3) < 0.5
    assert combine_masks() is None
    assert combine_masks(None, None) is None
    assert torch.equal(combine_masks(None, mask), mask)
    assert torch.equal(combine_masks(mask, None, mask), mask)


@pytest.mark.parametrize("shape", [(), (7,), (5, 7), (1, 7), (5, 1), (2, 5, 7), (1, 2, 5, 7), (3, 1, 1, 7),
                                   (3, 2, 5, 7)])
def test_check_mask_accepts_broadcastable_shapes(shape):
    check_mask(torch.ones(shape, dtype=torch.bool), 3, 2, 5, 7)


@pytest.mark.parametrize("shape", [(6,), (5, 6), (4, 7), (3, 5, 7), (2, 1, 1, 7), (3, 2, 5, 7, 1), (1, 3, 2, 5, 7)])
def test_check_mask_names_the_shape_that_does_not_broadcast(shape):
    with pytest.raises(ValueError, match=re.escape(f"of shape {shape}")) as error:
        check_mask(torch.ones(shape, dtype=torch.bool), 3, 2, 5, 7, name="memory_mask")
    assert "memory_mask" in str(error.value)
    assert "(3, 2, 5, 7)" in str(error.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_check_mask_rejects_non_boolean_dtypes(dtype):
    with pytest.raises(ValueError, match=re.escape(str(dtype))):
        check_mask(torch.ones(5, 7, dtype=dtype), 3, 2, 5, 7)
