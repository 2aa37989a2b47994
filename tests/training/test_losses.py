"""Label-smoothed cross-entropy: closed form, padding, agreement with torch."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.training.losses import label_smoothed_cross_entropy


def test_matches_the_closed_form_on_a_small_example():
    # Two tokens, vocabulary of 3, epsilon 0.1: the smoothed target puts
    # 1 - eps + eps/V on the gold class and eps/V on the others.
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.0, 1.0, 3.0]])
    target = torch.tensor([0, 1])
    epsilon, vocab = 0.1, 3
    expected_loss, expected_nll = 0.0, 0.0
    for row, gold in zip(logits.tolist(), target.tolist()):
        log_z = math.log(sum(math.exp(x) for x in row))
        log_p = [x - log_z for x in row]
        q = [1 - epsilon + epsilon / vocab if j == gold else epsilon / vocab for j in range(vocab)]
        expected_loss += -sum(qj * lpj for qj, lpj in zip(q, log_p))
        expected_nll += -log_p[gold]

    result = label_smoothed_cross_entropy(logits, target, epsilon=epsilon)
    assert result.loss_sum.item() == pytest.approx(expected_loss, rel=1e-6)
    assert result.nll_sum.item() == pytest.approx(expected_nll, rel=1e-6)
    assert result.num_tokens == 2


def test_padding_positions_do_not_count():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 7)
    target = torch.tensor([[3, 1, 0, 0], [2, 0, 0, 0]])  # 0 is padding
    result = label_smoothed_cross_entropy(logits, target, ignore_index=0)
    # Changing the scores at padded positions changes nothing.
    noisy = logits.clone()
    noisy[target == 0] = torch.randn_like(noisy[target == 0]) * 100
    other = label_smoothed_cross_entropy(noisy, target, ignore_index=0)
    assert result.num_tokens == 3
    assert torch.equal(result.loss_sum, other.loss_sum)
    # And it equals the loss over only the kept positions.
    kept = label_smoothed_cross_entropy(logits[target != 0], target[target != 0], ignore_index=0)
    assert torch.allclose(result.loss_sum, kept.loss_sum)


def test_gradients_do_not_reach_padded_positions():
    logits = torch.randn(1, 3, 5, requires_grad=True)
    target = torch.tensor([[4, -100, 2]])
    label_smoothed_cross_entropy(logits, target).loss_sum.backward()
    assert torch.count_nonzero(logits.grad[0, 1]) == 0
    assert torch.count_nonzero(logits.grad[0, 0]) > 0


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 4),
    length=st.integers(1, 6),
    vocab=st.integers(2, 9),
    epsilon=st.sampled_from([0.0, 0.1, 0.3]),
    seed=st.integers(0, 2**16),
)
def test_agrees_with_torch_cross_entropy_label_smoothing(batch, length, vocab, epsilon, seed):
    # torch's label_smoothing uses the same uniform-over-V convention.
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, length, vocab, generator=generator, dtype=torch.float64)
    target = torch.randint(0, vocab, (batch, length), generator=generator)
    target[torch.rand(batch, length, generator=generator) < 0.3] = -100
    result = label_smoothed_cross_entropy(logits, target, epsilon=epsilon)
    reference = F.cross_entropy(
        logits.reshape(-1, vocab), target.reshape(-1), reduction="sum", label_smoothing=epsilon
    )
    nll = F.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1), reduction="sum")
    assert result.num_tokens == int((target != -100).sum())
    assert torch.allclose(result.loss_sum, reference, atol=1e-5)
    assert torch.allclose(result.nll_sum, nll, atol=1e-5)


def composed_reference(logits, target, epsilon, ignore_index):
    """The formula written plainly with autograd ops (what the fused function replaces)."""
    vocab = logits.shape[-1]
    flat, flat_target = logits.reshape(-1, vocab), target.reshape(-1)
    keep = flat_target != ignore_index
    log_probs = torch.log_softmax(flat[keep], dim=-1)
    nll = -log_probs.gather(-1, flat_target[keep][:, None]).squeeze(-1)
    return ((1 - epsilon) * nll + epsilon / vocab * -log_probs.sum(-1)).sum(), nll.sum()


@pytest.mark.parametrize("shape, vocab, epsilon, upstream", [((3, 7), 11, 0.1, 0.7), ((1, 1), 2, 0.0, 1.0),
                                                             ((5, 4), 97, 0.3, -2.5), ((2, 3), 5, 0.1, 0.0)])
def test_values_and_gradients_equal_the_composed_formula_in_float64(shape, vocab, epsilon, upstream):
    generator = torch.Generator().manual_seed(vocab)
    logits = (3 * torch.randn(*shape, vocab, generator=generator, dtype=torch.float64)).requires_grad_()
    target = torch.randint(0, vocab, shape, generator=generator)
    target[torch.rand(shape, generator=generator) < 0.3] = 0  # padding id 0
    target.view(-1)[0] = 1  # at least one kept token
    result = label_smoothed_cross_entropy(logits, target, epsilon=epsilon, ignore_index=0)
    (upstream * result.loss_sum).backward()
    ours = logits.grad.clone()
    logits.grad = None
    expected_loss, expected_nll = composed_reference(logits, target, epsilon, 0)
    (upstream * expected_loss).backward()
    assert result.loss_sum.dtype == torch.float64
    assert torch.allclose(result.loss_sum, expected_loss, rtol=1e-12, atol=1e-12)
    assert torch.allclose(result.nll_sum, expected_nll, rtol=1e-12, atol=1e-12)
    assert torch.allclose(ours, logits.grad, rtol=1e-10, atol=1e-12)
    assert torch.count_nonzero(ours[target == 0]) == 0


def test_gradcheck_of_the_fused_gradient():
    logits = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([1, -100, 5, 0])
    assert torch.autograd.gradcheck(lambda x: label_smoothed_cross_entropy(x, target, epsilon=0.2).loss_sum,
                                    (logits,))


def test_infinite_scores_at_ignored_positions_do_not_poison_the_loss():
    scores = torch.randn(3, 5)
    scores[1] = float("inf")  # row 1 is padding
    scores.requires_grad_()
    result = label_smoothed_cross_entropy(scores, torch.tensor([2, -100, 4]))
    result.loss_sum.backward()
    assert torch.isfinite(result.loss_sum) and torch.isfinite(result.nll_sum)
    assert torch.isfinite(scores.grad).all() and torch.count_nonzero(scores.grad[1]) == 0


def test_bf16_logits_are_scored_in_float32():
    logits = torch.randn(3, 5).to(torch.bfloat16)
    result = label_smoothed_cross_entropy(logits, torch.tensor([1, 2, 3]))
    assert result.loss_sum.dtype == torch.float32


def test_rejects_bad_inputs():
    logits = torch.randn(2, 3, 5)
    with pytest.raises(ValueError, match="epsilon"):
        label_smoothed_cross_entropy(logits, torch.zeros(2, 3, dtype=torch.long), epsilon=1.0)
    with pytest.raises(ValueError, match="shape"):
        label_smoothed_cross_entropy(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="target id 5"):
        label_smoothed_cross_entropy(logits, torch.full((2, 3), 5))
