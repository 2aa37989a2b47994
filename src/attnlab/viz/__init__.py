"""Visualisation: attention heatmaps."""

from attnlab.viz.attention import plot_attention_grid

__all__ = ["plot_attention_grid"]
