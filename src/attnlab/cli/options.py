"""Small argument helpers shared by the CLI verbs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["parse_overrides"]


def parse_overrides(items: Iterable[str], flag: str = "--set") -> dict[str, Any]:
    """``["num_layers=4", "dropout=0.3", "activation=gelu"]`` -> ``{"num_layers": 4, ...}``.

    Values become int, float, bool (true/false) or stay strings; the model config
    then checks each field's name and type and names the field in its error.
    """
    overrides: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name or not text:
            raise ValueError(f"{flag} {item!r}: expected FIELD=VALUE, e.g. {flag} dropout=0.3")
        value: Any
        for convert in (int, float):
            try:
                value = convert(text)
                break
            except ValueError:
                continue
        else:
            value = {"true": True, "false": False}.get(text.lower(), text)
        overrides[name.strip()] = value
    return overrides
