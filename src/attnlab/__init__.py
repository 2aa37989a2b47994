"""attnlab: the Transformer family, exact to the papers.

The top-level names are imported lazily so that ``import attnlab`` (and the CLI's
``--help``) does not pay for importing torch.
"""

__version__ = "0.1.0"
__all__ = ["create_model", "list_presets", "load_model", "get_preset", "load"]


def __getattr__(name: str):
    if name == "load":  # a model directory -> its family's pipeline (attnlab.pipelines, docs/api.md)
        from attnlab.pipelines import load

        return load
    if name in __all__:
        from attnlab.models import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
