"""``attend`` against the naive float64 reference, on both code paths."""

import re

import pytest
import torch
from reference.attention import naive_attention, reference_causal_mask

from attnlab.attention import attend, attend_unchecked, causal_mask

# (B, H, Lq, Lk, D, Dv): odd sizes, Lq < Lk, Lq > Lk, Lq == Lk, single query/key, Dv != D.
SHAPES = [
    (1, 1, 1, 1, 3, 3),
    (1, 2, 5, 7, 8, 8),
    (3, 1, 13, 17, 3, 5),
    (3, 2, 5, 17, 8, 3),
    (1, 2, 13, 7, 3, 3),
    (3, 2, 1, 7, 8, 8),
    (3, 1, 5, 1, 8, 2),
    (1, 1, 13, 13, 8, 8),
    (3, 2, 13, 17, 8, 8),
]
MASKS = ["none", "key_padding", "causal", "random", "broadcast_random"]
BIASES = ["none", "full", "per_head"]


def shape_id(shape):
    return "B{}H{}Lq{}Lk{}D{}Dv{}".format(*shape)


def make_qkv(shape, dtype=torch.float64):
    batch, heads, query_len, key_len, width, value_width = shape
    return (torch.randn(batch, heads, query_len, width, dtype=dtype),
            torch.randn(batch, heads, key_len, width, dtype=dtype),
            torch.randn(batch, heads, key_len, value_width, dtype=dtype))


def make_mask(kind, shape):
    """A boolean mask of the given kind; "random" ones include fully masked rows."""
    batch, heads, query_len, key_len = shape[:4]
    if kind == "none":
        return None
    if kind == "key_padding":
        lengths = torch.randint(0, key_len + 1, (batch,))
        lengths[0] = key_len  # at least one full row; others may be empty (length 0)
        if batch > 1:
            lengths[-1] = 0
        return (torch.arange(key_len)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, Lk)
    if kind == "causal":
        if key_len >= query_len:
            return reference_causal_mask(query_len, key_len)
        # Lq > Lk: causal alignment is undefined; use the lower triangle, whose first
        # rows are fine and whose shape still exercises the (Lq, Lk) broadcast.
        return torch.ones(query_len, key_len, dtype=torch.bool).tril()
    if kind == "random":
        mask = torch.rand(batch, heads, query_len, key_len) < 0.6
        mask[0, 0, 0] = False  # a fully masked row
        return mask
    if kind == "broadcast_random":
        mask = torch.rand(batch, 1, query_len, key_len) < 0.5
        mask[-1, 0, -1] = False
        return mask
    raise ValueError(kind)


def make_bias(kind, shape, dtype=torch.float64):
    batch, heads, query_len, key_len = shape[:4]
    if kind == "none":
        return None
    if kind == "full":
        return 2.0 * torch.randn(batch, heads, query_len, key_len, dtype=dtype)
    if kind == "per_head":  # (H, Lq, Lk), like relative-position or ALiBi biases
        return 2.0 * torch.randn(heads, query_len, key_len, dtype=dtype)
    raise ValueError(kind)


def empty_rows(mask, shape):
    """``(B, H, Lq)`` True where the query may attend no key."""
    batch, heads, query_len, key_len = shape[:4]
    if mask is None:
        return torch.zeros(batch, heads, query_len, dtype=torch.bool)
    return ~torch.broadcast_to(mask, (batch, heads, query_len, key_len)).any(-1)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("bias_kind", BIASES)
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_attend_equals_naive_reference(shape, mask_kind, bias_kind, need_weights):
    q, k, v = make_qkv(shape)
    mask, bias = make_mask(mask_kind, shape), make_bias(bias_kind, shape)
    expected_out, expected_weights = naive_attention(q, k, v, mask=mask, bias=bias)

    out, weights = attend(q, k, v, mask=mask, bias=bias, need_weights=need_weights)

    assert out.shape == expected_out.shape
    assert not out.isnan().any()
    torch.testing.assert_close(out, expected_out, atol=1e-12, rtol=1e-10)
    if not need_weights:
        assert weights is None
        return
    assert weights.shape == shape[:4]
    torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=1e-10)
    row_sums = weights.sum(-1)
    empty = empty_rows(mask, shape)
    torch.testing.assert_close(row_sums, torch.where(empty, 0.0, 1.0).double(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_fused_and_explicit_paths_agree_in_float32(shape, mask_kind):
    q, k, v = make_qkv(shape, torch.float32)
    mask, bias = make_mask(mask_kind, shape), make_bias("full", shape, torch.float32)
    fused, _ = attend(q, k, v, mask=mask, bias=bias)
    explicit, _ = attend(q, k, v, mask=mask, bias=bias, need_weights=True)
    assert fused.dtype == explicit.dtype == torch.float32
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    expected, _ = naive_attention(q, k, v, mask=mask, bias=bias)
    torch.testing.assert_close(fused.double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_fully_masked_rows_give_zeros_and_finite_gradients(need_weights):
    shape = (2, 2, 5, 7, 8, 8)
    q, k, v = (t.requires_grad_() for t in make_qkv(shape))
    mask = torch.rand(2, 2, 5, 7) < 0.5
    mask[0, 1, 2] = False
    mask[1, :, 4] = False
    mask[0, 0, 0] = True
    bias = make_bias("full", shape)

    out, weights = attend(q, k, v, mask=mask, bias=bias, need_weights=need_weights)

    empty = empty_rows(mask, shape)
    assert empty[0, 1, 2] and empty[1, 0, 4] and not empty[0, 0, 0]
    assert not out.isnan().any()
    assert (out[empty] == 0).all()
    assert (out[~empty].abs().sum(-1) > 0).all()
    if need_weights:
        assert (weights[empty] == 0).all()
    out.sum().backward()
    for tensor in (q, k, v):
        assert torch.isfinite(tensor.grad).all()
    assert (q.grad[empty] == 0).all()  # a query that sees nothing has no gradient


@pytest.mark.parametrize("with_mask", [False, True])
def test_minus_infinity_bias_masks_like_a_mask_on_both_paths(with_mask):
    """An additive -inf bias forbids a key; a row forbidden everywhere is empty: zeros,
    finite gradients, and the same answer on both paths."""
    shape = (2, 2, 5, 7, 4, 3)
    bias = make_bias("full", shape)
    bias[torch.rand(2, 2, 5, 7) < 0.3] = float("-inf")
    bias[0, 1, 3] = float("-inf")            # empty through the bias alone
    mask = torch.rand(2, 1, 5, 7) < 0.7 if with_mask else None
    if with_mask:
        bias[1, 0, 2, :4] = float("-inf")
        mask[1, 0, 2, 4:] = False            # empty through bias and mask together
    inputs = make_qkv(shape)
    expected, expected_weights = naive_attention(*inputs, mask=mask, bias=bias)
    empty = expected_weights.sum(-1) == 0
    assert empty[0, 1, 3] and (empty[1, 0, 2] or not with_mask)
    outputs = []
    for need_weights in (False, True):
        q, k, v = (t.clone().requires_grad_() for t in inputs)
        out, weights = attend(q, k, v, mask=mask, bias=bias, need_weights=need_weights)
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)
        if need_weights:
            torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=1e-10)
        out.sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
        outputs.append(out)
    torch.testing.assert_close(outputs[0], outputs[1], atol=1e-12, rtol=1e-10)


def test_all_keys_masked_everywhere_gives_zeros():
    q, k, v = make_qkv((2, 1, 3, 4, 5, 5))
    mask = torch.zeros(4, dtype=torch.bool)  # (Lk,): broadcasts to every row
    for need_weights in (False, True):
        out, weights = attend(q, k, v, mask=mask, need_weights=need_weights)
        assert torch.equal(out, torch.zeros_like(out))
        if need_weights:
            assert torch.equal(weights, torch.zeros_like(weights))


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("scale", [0.37, 1.0, 2.5])
def test_scale_argument(scale, need_weights):
    shape = (3, 2, 5, 7, 3, 8)
    q, k, v = make_qkv(shape)
    mask = make_mask("random", shape)
    expected, _ = naive_attention(q, k, v, mask=mask, scale=scale)
    out, _ = attend(q, k, v, mask=mask, scale=scale, need_weights=need_weights)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)
    default, _ = attend(q, k, v, mask=mask, need_weights=need_weights)
    assert not torch.allclose(out, default)  # the argument is really used (D = 3, 1/sqrt(3) != scale)


def test_default_scale_is_one_over_sqrt_width():
    q, k, v = make_qkv((1, 1, 4, 6, 8, 8))
    out, _ = attend(q, k, v, scale=8 ** -0.5)
    default, _ = attend(q, k, v)
    torch.testing.assert_close(out, default, atol=1e-14, rtol=0)


@pytest.mark.parametrize("length", [1, 5, 13])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_is_causal_equals_explicit_causal_mask(length, need_weights, with_bias):
    shape = (3, 2, length, length, 8, 5)
    q, k, v = make_qkv(shape)
    bias = make_bias("full", shape) if with_bias else None
    expected_out, expected_weights = naive_attention(q, k, v, mask=reference_causal_mask(length, length), bias=bias)

    out, weights = attend_unchecked(q, k, v, bias=bias, is_causal=True, need_weights=need_weights)
    masked_out, _ = attend(q, k, v, mask=causal_mask(length), bias=bias, need_weights=need_weights)

    torch.testing.assert_close(out, expected_out, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(out, masked_out, atol=1e-12, rtol=1e-10)
    if need_weights:
        torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=1e-10)
        assert (weights.triu(1) == 0).all()


def test_is_causal_rejects_a_mask_or_unequal_lengths():
    q, k, v = make_qkv((1, 1, 3, 5, 4, 4))
    with pytest.raises(ValueError, match="is_causal"):
        attend_unchecked(q, k, v, is_causal=True)
    q, k, v = make_qkv((1, 1, 3, 3, 4, 4))
    with pytest.raises(ValueError, match="is_causal"):
        attend_unchecked(q, k, v, is_causal=True, mask=causal_mask(3))


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_dropout_is_applied_to_the_output_but_weights_are_before_dropout(need_weights):
    shape = (2, 2, 9, 11, 8, 8)
    q, k, v = make_qkv(shape)
    clean, clean_weights = attend(q, k, v, need_weights=need_weights)
    dropped, dropped_weights = attend(q, k, v, dropout_p=0.5, need_weights=need_weights)
    assert not torch.allclose(clean, dropped)
    if need_weights:
        torch.testing.assert_close(dropped_weights, clean_weights, atol=0, rtol=0)
    # Dropout keeps the expectation: over many independent draws (copies along the batch)
    # the mean approaches the clean output.
    draws = 1000
    many = [t.repeat(draws, 1, 1, 1) for t in (q, k, v)]
    mean = attend(*many, dropout_p=0.5, need_weights=need_weights)[0].view(draws, *clean.shape).mean(0)
    torch.testing.assert_close(mean, clean, atol=0.15, rtol=0)


# ---------------------------------------------------------------- errors at the boundary

@pytest.mark.parametrize("mask_shape", [(5, 8), (4, 7), (2, 1, 1, 7), (3, 2, 5, 7, 1), (1, 1, 1, 1, 7), (3, 3, 5, 7),
                                        (6,)])
def test_attend_rejects_masks_that_do_not_broadcast(mask_shape):
    q, k, v = make_qkv((3, 2, 5, 7, 4, 4))
    mask = torch.ones(mask_shape, dtype=torch.bool)
    with pytest.raises(ValueError, match=re.escape(f"mask of shape {tuple(mask_shape)}")):
        attend(q, k, v, mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_attend_rejects_non_boolean_masks(dtype):
    q, k, v = make_qkv((1, 1, 2, 3, 4, 4))
    with pytest.raises(ValueError, match=str(dtype)):
        attend(q, k, v, mask=torch.ones(2, 3, dtype=dtype))


@pytest.mark.parametrize("bias_shape", [(5, 8), (2, 1, 1, 7), (3, 2, 5, 7, 1), (4, 5, 7)])
def test_attend_rejects_biases_that_do_not_broadcast(bias_shape):
    q, k, v = make_qkv((3, 2, 5, 7, 4, 4))
    with pytest.raises(ValueError, match=re.escape(f"bias of shape {tuple(bias_shape)}")):
        attend(q, k, v, bias=torch.zeros(bias_shape, dtype=torch.float64))


@pytest.mark.parametrize("good_shape", [(), (7,), (5, 7), (1, 7), (5, 1), (2, 5, 7), (3, 1, 1, 7), (1, 2, 5, 7), (3, 2, 5, 7)])
def test_attend_accepts_broadcastable_masks_and_biases(good_shape):
    shape = (3, 2, 5, 7, 4, 4)
    q, k, v = make_qkv(shape)
    mask = torch.rand(good_shape) < 0.7
    bias = torch.randn(good_shape, dtype=torch.float64)
    for given in (dict(mask=mask), dict(bias=bias), dict(mask=mask, bias=bias)):
        expected, _ = naive_attention(q, k, v, **given)
        for need_weights in (False, True):
            out, _ = attend(q, k, v, need_weights=need_weights, **given)
            torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("q_shape,k_shape,v_shape,words", [
    ((2, 2, 5, 4), (2, 2, 7, 4), (2, 2, 6, 4), "length"),    # keys and values of different lengths
    ((2, 2, 5, 4), (2, 2, 7, 3), (2, 2, 7, 4), "width"),     # queries and keys of different widths
    ((2, 2, 5, 4), (3, 2, 7, 4), (3, 2, 7, 4), "batch"),     # batch sizes differ
    ((2, 2, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4), "heads"),     # head counts differ
    ((2, 2, 5, 4), (2, 2, 7, 4), (1, 2, 7, 4), "batch"),     # keys and values of different batch
    ((2, 5, 4), (2, 7, 4), (2, 7, 4), "dimensions"),         # not (B, H, L, D)
])
def test_attend_rejects_mismatched_qkv(q_shape, k_shape, v_shape, words):
    q, k, v = torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape)
    for need_weights in (False, True):
        with pytest.raises(ValueError, match=words):
            attend(q, k, v, need_weights=need_weights)


def dense_reference(q, k, v, mask, bias):
    """Differentiable float64 attention with full-matrix masks: a blocked score is -1e300
    (exp gives exactly 0, no -inf in the graph) and an empty row's weights are zeroed by the
    mask itself, so its output and its gradients are 0."""
    full = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if bias is not None:
        scores = scores + bias
    allowed = torch.ones(full, dtype=torch.bool) if mask is None else torch.broadcast_to(mask, full)
    weights = torch.softmax(torch.where(allowed, scores, torch.tensor(-1e300, dtype=scores.dtype)), -1) * allowed
    return weights @ v


@pytest.mark.parametrize("shape", [(1, 2, 5, 7, 8, 8), (3, 2, 13, 17, 8, 3), (2, 1, 6, 6, 4, 4)], ids=shape_id)
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("bias_kind", ["full", "per_head"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["no-weights", "weights"])
@pytest.mark.parametrize("finite_bias", [False, True], ids=["any-bias", "finite-bias"])
def test_a_bias_that_needs_a_gradient_gives_the_reference_values_and_gradients(shape, mask_kind, bias_kind,
                                                                                need_weights, finite_bias):
    """A bias that needs a gradient (relative logits in training) takes the explicit path on
    a CPU, masks added as 0/-inf: out and the gradients of q, k, v and the bias equal the
    dense float64 reference, fully masked rows included (zeros, zero gradients); with
    ``finite_bias`` (empty rows from the mask alone) too."""
    q, k, v = (t.requires_grad_() for t in make_qkv(shape))
    mask = make_mask(mask_kind, shape)
    bias = make_bias(bias_kind, shape).requires_grad_()
    grad_out = torch.randn(shape[0], shape[1], shape[2], shape[5], dtype=torch.float64)

    out, weights = attend_unchecked(q, k, v, mask=mask, bias=bias, need_weights=need_weights,
                                    finite_bias=finite_bias)
    assert (weights is not None) == need_weights
    got = torch.autograd.grad(out, (q, k, v, bias), grad_out)
    expected_out = dense_reference(q, k, v, mask, bias)
    expected = torch.autograd.grad(expected_out, (q, k, v, bias), grad_out)

    # float64 throughout; the two differ only in summation order (~1e-15 relative).
    torch.testing.assert_close(out, expected_out, rtol=1e-10, atol=1e-12)
    for name, a, b in zip("qkv", got, expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=f"gradient of {name}")
    torch.testing.assert_close(got[3], expected[3], rtol=1e-10, atol=1e-12, msg="gradient of the bias")
    empty = empty_rows(mask, shape)
    assert (out[empty] == 0).all() and (got[0][empty] == 0).all()


def test_finite_bias_changes_nothing_without_a_gradient():
    """Inference (no gradient: the fused path) with ``finite_bias=True`` equals the default."""
    shape = (2, 2, 5, 7, 8, 8)
    q, k, v = make_qkv(shape)
    mask = make_mask("random", shape)
    bias = make_bias("full", shape)
    for need_weights in (False, True):
        plain = attend_unchecked(q, k, v, mask=mask, bias=bias, need_weights=need_weights)
        finite = attend_unchecked(q, k, v, mask=mask, bias=bias, need_weights=need_weights, finite_bias=True)
        torch.testing.assert_close(finite[0], plain[0], rtol=0, atol=0)
        expected, _ = naive_attention(q, k, v, mask=mask, bias=bias)
        torch.testing.assert_close(finite[0], expected, rtol=1e-10, atol=1e-12)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # 1/sqrt(width): a shape, constant per trace
def test_a_trace_without_empty_rows_still_zeroes_them_later():
    """The CPU shortcut that skips the empty-row guard when no row is empty is a branch on
    data: a graph traced (as ONNX export does) on an input without empty rows must keep
    the guard for inputs that have them."""
    shape = (1, 2, 3, 5, 4, 4)
    q, k, v = make_qkv(shape)

    def run(q, k, v, mask):  # the explicit path: an unguarded empty row would be NaN there
        return attend_unchecked(q, k, v, mask=mask, need_weights=True)

    traced = torch.jit.trace(run, (q, k, v, torch.ones(1, 1, 3, 5, dtype=torch.bool)))
    mask = torch.ones(1, 1, 3, 5, dtype=torch.bool)
    mask[0, 0, 1] = False
    out, weights = traced(q, k, v, mask)
    expected_out, expected_weights = naive_attention(q, k, v, mask=mask)
    assert (out[:, :, 1] == 0).all() and (weights[:, :, 1] == 0).all()
    torch.testing.assert_close(out, expected_out, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-10, atol=1e-12)


ONE_QUERY_SHAPES = [shape for shape in SHAPES if shape[2] == 1] + [(4, 3, 1, 40, 16, 16)]


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("shape", ONE_QUERY_SHAPES, ids=shape_id)
def test_one_query_as_sums_equals_the_naive_reference(shape, mask_kind):
    """The form a folded package's one-query self-attention is exported in (sums that inductor
    fuses, not SDPA), taken by attend_unchecked only inside one_query_sums(); a query with no
    allowed key gives zeros. A folded export alone (cross-attention, a window) and everything
    else call the fused kernel."""
    from unittest import mock

    from attnlab.attention import core
    from attnlab.linear import products_for_folding

    # float64 throughout (make_qkv's default; the sums accumulate in it too): the file's usual
    # float64 tolerances, ~1e-16 a rounding step, hold on any CPU.
    q, k, v = make_qkv(shape)
    mask = make_mask(mask_kind, shape)
    expected, _ = naive_attention(q, k, v, mask=mask)
    with mock.patch.object(core, "_one_query", wraps=core._one_query) as one_query:
        with core.one_query_sums():
            out, _ = attend_unchecked(q, k, v, mask=mask)
        with products_for_folding():
            fused, _ = attend_unchecked(q, k, v, mask=mask)
        plain, _ = attend_unchecked(q, k, v, mask=mask)
    assert one_query.call_count == 1  # inside one_query_sums only
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(fused, expected, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(plain, expected, atol=1e-12, rtol=1e-10)
