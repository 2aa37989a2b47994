"""The check every encoder–decoder's ahead-of-time search step meets (translation, captions):
beam search and greedy search through the package give the eager search's hypotheses. (A
shared check, not a reference: it runs attnlab's own searches both ways.)"""

from __future__ import annotations

import pytest


def assert_search_through_the_package(model, batches, *, beam: int, nbest: int, **options) -> None:
    """For each batch of sources: the same ``nbest`` hypotheses by beam search with
    ``compile="aot"`` as without (scores within float rounding), and the same greedy tokens and
    beam-1 hypotheses for the first batch."""
    from attnlab.generation import beam_search, greedy_search

    for sources in batches:
        compiled = beam_search(model, sources, beam_size=beam, nbest=nbest, compile="aot", **options)
        eager = beam_search(model, sources, beam_size=beam, nbest=nbest, **options)
        assert [[h.tokens for h in x] for x in compiled] == [[h.tokens for h in x] for x in eager]
        for hyps, others in zip(compiled, eager):
            for h, g in zip(hyps, others):
                assert h.score == pytest.approx(g.score, abs=1e-4)
    assert [h.tokens for h in greedy_search(model, batches[0], compile="aot", **options)] == \
        [h.tokens for h in greedy_search(model, batches[0], **options)]
    # beam 1 goes through greedy's package (log-probabilities, not candidates)
    assert [[h.tokens for h in x] for x in beam_search(model, batches[0], beam_size=1, compile="aot", **options)] == \
        [[h.tokens for h in x] for x in beam_search(model, batches[0], beam_size=1, **options)]


def assert_candidates_match(candidates, log_probs, beam_scores, beam: int, **tolerance) -> None:
    """A beam search package's ``(scores, beams, tokens)``, each ``(B, T, m)`` over T teacher-forced
    steps, against :func:`~attnlab.generation.candidates.search_candidates` of the eager log-probabilities
    ``(B·beam, T, V)`` with the same ``beam_scores`` ``(B·beam,)``: the same scores within
    ``tolerance``, and each (beam, token) the package names scored its value by the eager
    log-probabilities (of two nearly tied candidates, which comes first may differ)."""
    import torch

    from attnlab.generation.candidates import search_candidates

    values, beams, tokens = candidates
    sources, steps, m = values.shape
    vocab = log_probs.shape[-1]
    for t in range(steps):
        expected, _, _ = search_candidates(log_probs[:, t], beam_scores, beam, m)
        torch.testing.assert_close(values[:, t], expected, **tolerance)
        scored = log_probs[:, t].reshape(sources, beam, vocab) + beam_scores.view(sources, beam, 1)
        named = scored[torch.arange(sources)[:, None], beams[:, t], tokens[:, t]]
        torch.testing.assert_close(named, values[:, t], **tolerance)
