"""Decoding: greedy and beam search for encoder–decoder models."""

from attnlab.generation.search import Hypothesis, beam_search, greedy_search, length_penalty

__all__ = ["Hypothesis", "beam_search", "greedy_search", "length_penalty"]
