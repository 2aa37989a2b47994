"""models.base.check_weights, the one weight check every loader runs (issue 39, point 7)."""

import pytest
import torch

from attnlab.models.base import check_weights


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_one_non_finite_value_is_refused_naming_the_tensor(dtype, bad):
    tensor = torch.ones(7, 5, dtype=dtype)
    tensor[3, 2] = bad
    with pytest.raises(ValueError, match=r"weights\.safetensors: tensor 'h\.0\.w' holds NaN or infinity"):
        check_weights({"ok": torch.zeros(3), "h.0.w": tensor}, "weights.safetensors")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_finite_values_whose_sum_overflows_are_accepted(dtype):
    """The fast path sums; a sum that overflows must not refuse finite weights."""
    big = torch.full((4,), torch.finfo(dtype).max, dtype=dtype)
    assert not torch.isfinite(big.sum())
    check_weights({"big": big}, "x")


def test_integers_are_refused_unless_a_named_buffer():
    with pytest.raises(ValueError, match=r"tensor 'w' has dtype int64; weights must be floating point"):
        check_weights({"w": torch.arange(3)}, "x")
    check_weights({"embeddings.position_ids": torch.arange(3)}, "x", buffers=("position_ids",))
    with pytest.raises(ValueError, match="has dtype bool"):
        check_weights({"mask": torch.ones(2, dtype=torch.bool)}, "x", buffers=("position_ids",))
