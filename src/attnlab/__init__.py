"""attnlab: the Transformer family, exact to the papers."""

from attnlab.models.registry import create_model, list_presets, load_model

__all__ = ["create_model", "list_presets", "load_model"]
__version__ = "0.1.0"
