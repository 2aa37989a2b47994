"""Decoding: greedy and beam search for encoder–decoder models; sampling for decoder-only LMs."""

from attnlab.generation.images import complete_images, sample_images
from attnlab.generation.sampling import choose_next, filter_logits, generate, generate_text
from attnlab.generation.search import Hypothesis, beam_search, greedy_search, length_penalty

__all__ = ["Hypothesis", "beam_search", "greedy_search", "length_penalty", "choose_next", "filter_logits", "generate",
           "generate_text", "sample_images", "complete_images"]
