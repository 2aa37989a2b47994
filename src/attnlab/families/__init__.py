"""The model families, each registered once: what the command line, ``attnlab evaluate``,
the explorer, ``export-onnx`` and ``attnlab.load`` know about a family comes from here.

A family is a package ``attnlab.families.<name>`` whose ``__init__`` calls
:func:`register_family` with one :class:`Family` record: its name, the ``family`` its
models' ``config.json`` carries, the verbs it adds, its ``train`` task, its evaluator, its
pipeline (``attnlab.load``), its attention maps and source (the explorer), its ONNX graph
(or why it has none) and the directories of other libraries it reads. The record names code as
``"module:attribute"`` strings, imported only when used, so listing the families (and
``attnlab --help``) imports no model code and no torch.

It sits at the bottom of the layering (tests/test_layering.py), beside :mod:`attnlab.files`
(the one module it reads with), and finds the built-in family packages through
:data:`BUILTIN` with :mod:`importlib`. A family outside attnlab registers itself the same
way, from its own package, or through the ``attnlab.families`` entry-point group
(``[project.entry-points."attnlab.families"] mine = "mypackage.attnlab_family"``: importing
the module registers it).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

__all__ = ["Family", "register_family", "unregister_family", "families", "get_family", "family_for_config",
           "family_for_directory", "used_with", "all_verbs", "resolve", "BUILTIN"]

# The family packages attnlab ships, in the order the command line lists them.
BUILTIN = ("translation", "lm", "bert", "text_classification", "vit", "caption", "text_to_image", "image", "music")

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_VERB = re.compile(r"^[a-z][a-z0-9-]*$")
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass(frozen=True)
class Family:
    """One model family, as everything that serves all families sees it.

    ``verbs`` maps a verb name to the module that implements it (``HELP``,
    ``add_arguments(parser)``, ``run(args) -> int``); ``train`` is the module of
    ``attnlab train <task>``; ``evaluate`` names the verb (one of ``verbs``) that
    ``attnlab evaluate --model DIR`` runs for a directory of this family. ``pipeline``,
    ``attention``, ``explore``, ``onnx`` and every entry of ``recognise`` are
    ``"module:attribute"``: the :class:`attnlab.pipelines.Pipeline` subclass,
    ``maps(model, **inputs) -> {group: [per-layer (B, heads, Lq, Lk)]}`` (what
    :func:`attnlab.viz.explorer.maps.attention_maps` gives for its models),
    ``loader(directory, device) -> AttentionSource`` (the explorer), ``graph(model) ->
    OnnxGraph`` (:mod:`attnlab.interop.onnx_export`), and ``recognise(directory) -> bool`` for
    directories another library wrote (HuggingFace BERT, MarianMT) that this family reads.
    ``exporters`` maps an ``attnlab export --format`` (``hf``, ``timm``) to the
    ``"module:function"`` that exports its models' directories (``export(pipeline) ->
    attnlab.interop.export.Export``), beside the core's converters in
    :data:`attnlab.interop.export.EXPORTERS`.
    ``onnx_parts`` names the parts its graph also exports beside it (``OnnxGraph.parts``;
    ``export-onnx -o OUT.onnx`` writes ``OUT.<part>.onnx``). ``not_exported`` says why a
    family without ``onnx`` has no ONNX graph; ``parts_not_exported`` maps the config family
    of a model that is a part of this family, not a family (text-to-image's VQ-VAE), to why
    ONNX export leaves it out.
    """

    name: str
    config_family: str
    title: str
    verbs: Mapping[str, str] = field(default_factory=dict)
    train: str | None = None
    task: str | None = None
    evaluate: str | None = None
    pipeline: str | None = None
    attention: str | None = None
    explore: str | None = None
    onnx: str | None = None
    onnx_parts: tuple[str, ...] = ()
    not_exported: str | None = None
    parts_not_exported: Mapping[str, str] = field(default_factory=dict)
    exporters: Mapping[str, str] = field(default_factory=dict)
    recognise: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if not _NAME.match(self.name):
            raise ValueError(f"family name {self.name!r}: use lower-case letters, digits and _")
        if not isinstance(self.config_family, str) or not self.config_family:
            raise ValueError(f"family {self.name!r}: config_family must name config.json's 'family'")
        object.__setattr__(self, "verbs", MappingProxyType(dict(self.verbs)))
        object.__setattr__(self, "aliases", MappingProxyType(dict(self.aliases)))
        object.__setattr__(self, "parts_not_exported", MappingProxyType(dict(self.parts_not_exported)))
        object.__setattr__(self, "exporters", MappingProxyType(dict(self.exporters)))
        object.__setattr__(self, "recognise", tuple(self.recognise))
        object.__setattr__(self, "onnx_parts", tuple(self.onnx_parts))
        if self.task is None and self.train is not None:
            object.__setattr__(self, "task", self.name.replace("_", "-"))
        for verb in [*self.verbs, *self.aliases]:
            if not _VERB.match(verb):
                raise ValueError(f"family {self.name!r}: verb name {verb!r}: use lower-case letters, digits and -")
        for alias, verb in self.aliases.items():
            if verb not in self.verbs:
                raise ValueError(f"family {self.name!r}: alias {alias!r} names {verb!r}, not one of its verbs")
        if self.evaluate is not None and self.evaluate not in self.verbs and self.evaluate != "evaluate":
            raise ValueError(f"family {self.name!r}: its evaluator {self.evaluate!r} is not one of its verbs")
        targets = {"pipeline": self.pipeline, "attention": self.attention, "explore": self.explore, "onnx": self.onnx,
                   **{f"recognise[{i}]": target for i, target in enumerate(self.recognise)},
                   **{f"exporters[{fmt!r}]": target for fmt, target in self.exporters.items()}}
        for what, value in targets.items():
            if value is not None and not _TARGET.match(value):
                raise ValueError(f"family {self.name!r}: {what} = {value!r} is not 'module:attribute'")
        if self.onnx is not None and self.not_exported is not None:
            raise ValueError(f"family {self.name!r}: give onnx or not_exported, not both")
        for part in self.onnx_parts:
            if not isinstance(part, str) or not _NAME.match(part):
                raise ValueError(f"family {self.name!r}: ONNX part name {part!r}: use lower-case letters, digits and _")
        if self.onnx_parts and self.onnx is None:
            raise ValueError(f"family {self.name!r}: onnx_parts without an onnx graph")

    # -- what the record names, imported when asked for ---------------------------------
    def pipeline_class(self):
        return None if self.pipeline is None else resolve(self.pipeline)

    def attention_maps(self, model, **inputs):
        """``{group: [per-layer (B, heads, Lq, Lk)]}`` of ``model`` on ``inputs``, by the
        function its registration names (``attention``)."""
        if self.attention is None:
            raise ValueError(f"{type(model).__name__} does not expose its attention yet: the {self.title} family's "
                             "registration names no attention function")
        return resolve(self.attention)(model, **inputs)

    def attention_source(self, directory: Path, device: str = "cpu"):
        """The explorer's :class:`AttentionSource` for a model directory of this family."""
        if self.explore is None:
            raise ValueError(f"{directory}: the explorer does not show {self.title} models")
        return resolve(self.explore)(Path(directory), device)

    def onnx_graph(self, model):
        if self.onnx is None:
            why = self.not_exported or "no ONNX graph is defined for it"
            raise ValueError(f"ONNX export does not cover {self.title} models: {why}")
        return resolve(self.onnx)(model)

    def recognises(self, directory: Path) -> bool:
        return any(resolve(target)(Path(directory)) for target in self.recognise)


_FAMILIES: dict[str, Family] = {}
_LOADED = False


def register_family(family: Family) -> Family:
    """Make ``family`` known to every command and API that serves all families. A name,
    a config family (its own or a part's), a train task or a verb claimed twice is an error
    (ValueError)."""
    if not isinstance(family, Family):
        raise TypeError(f"register_family takes a Family, got {type(family).__name__}")
    for other in _FAMILIES.values():
        if other.name == family.name:
            if other == family:
                return other  # re-importing a family package is harmless
            raise ValueError(f"family {family.name!r} is registered twice")
        if other.config_family == family.config_family:
            raise ValueError(f"families {other.name!r} and {family.name!r} both claim config family "
                             f"{family.config_family!r}")
        claimed = ({other.config_family, *other.parts_not_exported}
                   & {family.config_family, *family.parts_not_exported})
        if claimed:
            raise ValueError(f"families {other.name!r} and {family.name!r} both name the model family(ies) "
                             f"{sorted(claimed)}")
        if family.task is not None and other.task == family.task:
            raise ValueError(f"families {other.name!r} and {family.name!r} both train as {family.task!r}")
        clash = (set(other.verbs) | set(other.aliases)) & (set(family.verbs) | set(family.aliases))
        if clash:
            raise ValueError(f"families {other.name!r} and {family.name!r} both offer the verb(s) {sorted(clash)}")
    _FAMILIES[family.name] = family
    return family


def unregister_family(name: str) -> None:
    """Forget a family (tests register a toy family and remove it again)."""
    _FAMILIES.pop(name, None)


def _load() -> None:
    """Import the built-in family packages (and entry points) once: importing registers."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for name in BUILTIN:
        importlib.import_module(f"{__name__}.{name}")
    try:
        from importlib.metadata import entry_points

        plugins = entry_points(group="attnlab.families")
    except Exception:  # noqa: BLE001 - broken metadata of another package must not stop attnlab
        plugins = ()
    for plugin in plugins:
        try:
            plugin.load()
        except Exception as error:  # noqa: BLE001
            import warnings

            warnings.warn(f"attnlab: the family plug-in {plugin.name!r} ({plugin.value}) failed to load: {error}",
                          stacklevel=2)


def families() -> list[Family]:
    """Every registered family: the built-in ones in :data:`BUILTIN` order, then others."""
    _load()
    order = {name: index for index, name in enumerate(BUILTIN)}
    return sorted(_FAMILIES.values(), key=lambda f: (order.get(f.name, len(order)), f.name))


def get_family(name: str) -> Family:
    """The family called ``name`` (ValueError listing the known ones otherwise)."""
    _load()
    if name not in _FAMILIES:
        raise ValueError(f"unknown family {name!r}; known families: {', '.join(f.name for f in families())}")
    return _FAMILIES[name]


def family_for_config(config_family: str) -> Family | None:
    """The family whose models' ``config.json`` says ``"family": config_family``."""
    for family in families():
        if family.config_family == config_family:
            return family
    return None


def family_for_directory(directory) -> Family | None:
    """The family of a model directory: a directory another library wrote that a family
    recognises (checked first), else the ``family`` field of its attnlab ``config.json``.
    None when neither names a registered family (the caller says what is wrong)."""
    from attnlab.files import read_config_json

    directory = Path(directory)
    if not directory.is_dir():
        return None
    for family in families():
        if family.recognise and family.recognises(directory):
            return family
    value = (read_config_json(directory) or {}).get("family")
    return family_for_config(value) if isinstance(value, str) else None


def used_with(config_family: str) -> str:
    """For a message about a model of the wrong family: ``"; a 'vit' model (Vision
    Transformer) is used with attnlab classify"`` (empty for an unknown family)."""
    family = family_for_config(config_family)
    if family is None or not family.verbs:
        return ""
    return f"; a {config_family!r} model ({family.title}) is used with attnlab {next(iter(family.verbs))}"


def all_verbs() -> dict[str, tuple[Family, str]]:
    """``{verb: (family, module)}`` over every family, aliases included (an alias maps to
    its verb's module)."""
    verbs = {}
    for family in families():
        for verb, module in family.verbs.items():
            verbs[verb] = (family, module)
        for alias, verb in family.aliases.items():
            verbs[alias] = (family, family.verbs[verb])
    return verbs


def resolve(target: str):
    """The object a ``"module:attribute"`` string names (ImportError/AttributeError naming it)."""
    module_name, _, attribute = target.partition(":")
    value = importlib.import_module(module_name)
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise AttributeError(f"{target}: {module_name} has no {attribute}") from None
    return value
