"""`attend` gives one answer on every path: values the fused kernel and the explicit
softmax would treat differently (NaN) are refused, as are non-finite arguments."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention.core import attend


def _qkv(dtype=torch.float32):
    generator = torch.Generator().manual_seed(3)
    return [torch.randn(2, 3, 5, 7, generator=generator).to(dtype) for _ in range(3)]


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_inputs_are_refused_on_both_paths(need_weights, which, value):
    tensors = _qkv()
    tensors[which][1, 2, 3, 4] = value
    with pytest.raises(ValueError, match=f"attend: {'qkv'[which]} holds NaN"):
        attend(*tensors, need_weights=need_weights)


def test_bias_may_block_keys_with_minus_inf_but_not_hold_nan():
    q, k, v = _qkv()
    bias = torch.zeros(5, 5)
    bias[:, 0] = float("-inf")
    fused, _ = attend(q, k, v, bias=bias)
    explicit, _ = attend(q, k, v, bias=bias, need_weights=True)
    torch.testing.assert_close(fused, explicit)
    bias[0, 1] = float("nan")
    with pytest.raises(ValueError, match="bias holds NaN"):
        attend(q, k, v, bias=bias)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), "0.5"])
def test_non_finite_scale_is_refused(scale):
    with pytest.raises(ValueError, match="scale="):
        attend(*_qkv(), scale=scale)


@pytest.mark.parametrize("dropout_p", [2.0, 1.0, -0.1, float("nan")])
def test_dropout_outside_zero_one_is_refused(dropout_p):
    with pytest.raises(ValueError, match="dropout_p="):
        attend(*_qkv(), dropout_p=dropout_p)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_tensors_are_refused(dtype):
    with pytest.raises(ValueError, match="must be a floating-point tensor"):
        attend(*_qkv(dtype))
