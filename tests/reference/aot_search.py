"""The check every encoder–decoder's ahead-of-time search step meets (translation, captions):
beam search and greedy search through the package give the eager search's hypotheses. (A
shared check, not a reference: it runs attnlab's own searches both ways.)"""

from __future__ import annotations

import pytest


def assert_search_through_the_package(model, batches, *, beam: int, nbest: int, **options) -> None:
    """For each batch of sources: the same ``nbest`` hypotheses by beam search with
    ``compile="aot"`` as without (scores within float rounding), and the same greedy tokens
    for the first batch."""
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
