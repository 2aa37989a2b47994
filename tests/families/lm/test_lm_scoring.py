"""Held-out scoring of a token sequence (evaluation/windows.py: scoring_windows, score_windows; families/lm/task.py:
evaluate_text), shared by evaluate-lm and evaluate-music: every token after the first is
scored exactly once, and the batched, padded score equals the model run on each window
alone in float64."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab import create_model
from attnlab.evaluation.windows import scoring_windows
from attnlab.families.lm.task import evaluate_text


@pytest.mark.parametrize("length, context, stride", [(2, 1, None), (10, 4, None), (10, 4, 1), (10, 4, 3),
                                                     (11, 4, 4), (37, 8, 5), (5, 16, None), (5, 16, 2)])
def test_every_token_after_the_first_is_scored_once_with_its_window_before_it(length, context, stride):
    sequence = list(range(100, 100 + length))
    windows = scoring_windows(sequence, context=context, stride=stride)
    scored = []
    for inputs, targets in windows:
        assert 1 <= len(inputs) <= context and len(targets) == len(inputs)
        first = sequence.index(inputs[0])
        assert inputs == sequence[first:first + len(inputs)]  # a contiguous window
        for position, target in enumerate(targets):
            if target != -100:
                assert target == sequence[first + position + 1]  # the next token after the input
                scored.append(target)
                if stride is not None and first + position + 1 > context:
                    assert position + 1 >= context - stride  # at least context - stride tokens before it
    assert sorted(scored) == sequence[1:]


def test_bad_context_and_stride_are_refused():
    with pytest.raises(ValueError, match="context=0"):
        scoring_windows([1, 2, 3], context=0)
    with pytest.raises(ValueError, match="stride=5"):
        scoring_windows([1, 2, 3], context=4, stride=5)


@pytest.mark.parametrize("context, stride, batch_size", [(8, None, 3), (8, 3, 2), (16, 5, 8)])
def test_batched_score_equals_each_window_alone_in_float64(context, stride, batch_size):
    torch.manual_seed(0)
    model = create_model("lm_tiny").eval()
    ids = torch.randint(0, 64, (45,)).tolist()
    got = evaluate_text(model, ids, context=context, stride=stride, batch_size=batch_size)
    reference = model.double()
    total, count = 0.0, 0
    for inputs, targets in scoring_windows(ids, context=context, stride=stride):
        with torch.no_grad():
            logits = reference(torch.tensor([inputs]))[0]
        for position, target in enumerate(targets):
            if target != -100:
                total -= float(F.log_softmax(logits[position], -1)[target])
                count += 1
    assert got["tokens"] == count == len(ids) - 1
    assert got["nll"] == pytest.approx(total / count, rel=1e-5)
    assert got["bits_per_token"] == pytest.approx(got["nll"] / math.log(2))
    assert got["perplexity"] == pytest.approx(math.exp(got["nll"]))
