"""generation/candidates.py: a beam search step's candidates (top_candidates, search_candidates).
The package's own selection (aot.candidates_fused) is checked against search_candidates in
tests/generation/test_aot.py."""

from __future__ import annotations

import pytest
import torch

from attnlab.generation.candidates import search_candidates, top_candidates


@pytest.mark.parametrize("rows, n, m", [(1, 32000, 8), (3, 4 * 8001, 8), (5, 64 * 128, 8), (2, 64 * 16 * 8 + 63, 8),
                                        (2, 1000, 8), (1, 50, 4)])
def test_top_candidates_gives_the_values_and_indices_of_topk(rows, n, m):
    generator = torch.Generator().manual_seed(rows * n + m)
    scores = torch.randn(rows, n, generator=generator)
    scores[0, : n // 2] = float("-inf")  # a first step: every beam but the first -inf
    scores[-1, -3:] = 10.0 + torch.arange(3.0)  # the largest in the tail after the last whole chunk
    values, index = top_candidates(scores, m)
    expected = scores.topk(m, dim=1)
    assert torch.equal(values, expected.values)
    assert torch.equal(index, expected.indices)  # distinct values: the same positions
    assert torch.equal(scores.gather(1, index), values)


def test_top_candidates_with_fewer_real_scores_than_asked_and_ties():
    scores = torch.full((2, 32000), float("-inf"))
    scores[0, 31990] = 1.0  # one finite score, in the tail-free last chunk
    scores[1, [5, 20000, 31999]] = 2.0  # three equal scores in three chunks
    values, index = top_candidates(scores, 8)
    assert values[0, 0] == 1.0 and int(index[0, 0]) == 31990 and bool(torch.isinf(values[0, 1:]).all())
    assert values[1, :3].tolist() == [2.0] * 3 and sorted(index[1, :3].tolist()) == [5, 20000, 31999]
    assert torch.equal(scores.gather(1, index), values)


def test_search_candidates_scores_each_hypothesis_by_its_beam_and_names_beam_and_token():
    """Each source's m best of beam_scores[row] + log_probs[row, token] over its k rows, as (score, the
    row within the source, token); a first step's one row per source broadcasts over the k scores;
    in_place adds the scores into the log-probabilities' buffer."""
    generator = torch.Generator().manual_seed(0)
    sources, k, vocab = 3, 4, 500
    log_probs = torch.log_softmax(torch.randn(sources * k, vocab, generator=generator), dim=-1)
    beam_scores = -torch.rand(sources * k, generator=generator) * 3
    values, beams, tokens = search_candidates(log_probs, beam_scores, k, 2 * k)
    every = (log_probs + beam_scores[:, None]).view(sources, k * vocab)
    expected = every.topk(2 * k, dim=1)
    assert torch.equal(values, expected.values)
    assert torch.equal(beams * vocab + tokens, expected.indices)
    first = log_probs[::k].clone()  # one row per source: every hypothesis the same (a first step)
    values, beams, tokens = search_candidates(first, beam_scores, k, 2 * k)
    assert torch.equal(values, (first.view(sources, 1, vocab) + beam_scores.view(sources, k, 1)).view(
        sources, k * vocab).topk(2 * k, dim=1).values)
    buffer = log_probs.clone()
    in_place = search_candidates(buffer, beam_scores, k, 2 * k, in_place=True)
    assert torch.equal(in_place[0], search_candidates(log_probs, beam_scores, k, 2 * k)[0])
    assert torch.equal(buffer, log_probs + beam_scores[:, None])
