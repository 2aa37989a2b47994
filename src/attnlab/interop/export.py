"""Models leave attnlab: ``attnlab export --model DIR --format hf|timm -o OUT``.

An exporter turns a loaded model directory (``attnlab.load``'s pipeline: the model, its
tokenizer or class names, the directory it came from) into an :class:`Export`: the target
library's ``config.json``, its ``model.safetensors`` (the other library's parameter names)
and tokenizer files. It first checks the model's config field by field against what the
target architecture computes and raises ValueError naming every difference it cannot
express (pre-LN where the format is post-LN, relative or local attention, positions the
format lacks, a tokenizer it cannot carry exactly...): an export never loads into something
that computes another function. Nothing is written by an exporter; the verb writes the
:class:`Export` into a fresh directory (:func:`attnlab.files.atomic_directory`).

Exporters are found per ``(format, config family)``: the core's converters are in
:data:`EXPORTERS` (:func:`register_exporter` adds one); a family's own exporter (the BERT
text classifier's) lives in its package, named by its registration
(``Family.exporters``, attnlab.families), which :func:`exporter_for` reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

__all__ = ["EXPORTERS", "FORMATS", "NEEDS", "Export", "StateReader", "exporter_for", "json_bytes", "refuse_differences",
           "register_exporter"]

FORMATS = {"hf": "HuggingFace transformers", "timm": "timm"}

# (format, config family) -> "module:function" taking the pipeline, returning an Export
EXPORTERS: dict[tuple[str, str], str] = {
    ("hf", "decoder_lm"): "attnlab.interop.export_hf:gpt2_export",
    ("hf", "bert"): "attnlab.interop.export_hf:bert_export",
    ("hf", "transformer"): "attnlab.interop.export_hf:marian_export",
    ("hf", "vit"): "attnlab.interop.export_timm:hf_vit_export",
    ("timm", "vit"): "attnlab.interop.export_timm:timm_export",
}

# optional packages an exporter needs (checked before anything is read: options.require_packages);
# the text classifier's exporter (its family's registration) is bert_export's with a head: the same needs
NEEDS: dict[tuple[str, str], tuple[str, ...]] = {("hf", "decoder_lm"): ("tokenizers",), ("hf", "bert"): ("tokenizers",),
                                                 ("hf", "bert_classifier"): ("tokenizers",)}


def register_exporter(format: str, config_family: str, target: str, *, needs: tuple[str, ...] = ()) -> None:
    """Make ``attnlab export --format FORMAT`` cover models whose ``config.json`` says
    ``"family": config_family``; ``target`` is ``"module:function"``, the function taking
    the directory's pipeline and returning an :class:`Export` (ValueError for what it
    cannot express); ``needs``: optional packages it imports. A pair registered twice with
    another target is an error."""
    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r}; formats: {', '.join(FORMATS)}")
    known = EXPORTERS.get((format, config_family))
    if known is not None and known != target:
        raise ValueError(f"--format {format} of {config_family!r} models is already exported by {known}")
    EXPORTERS[(format, config_family)] = target
    NEEDS[(format, config_family)] = tuple(needs)


def exporter_for(format: str, config_family: str) -> Callable:
    """The exporter of ``config_family`` models to ``format``: the core's (:data:`EXPORTERS`)
    or the one the family's registration names (ValueError saying which families the
    format covers when there is none)."""
    from attnlab.families import families, resolve

    if format not in FORMATS:
        raise ValueError(f"--format {format}: unknown format; choose one of {', '.join(FORMATS)}")
    exporters = {**{(fmt, family.config_family): target for family in families()
                    for fmt, target in family.exporters.items()}, **EXPORTERS}
    target = exporters.get((format, config_family))
    if target is None:
        covered = sorted(family for fmt, family in exporters if fmt == format)
        raise ValueError(f"--format {format}: {FORMATS[format]} has no layout for a {config_family!r} model; "
                         f"it covers {', '.join(repr(f) for f in covered)}")
    return resolve(target)


@dataclass
class Export:
    """What an export writes: ``tensors`` (-> ``model.safetensors``, the target's names),
    ``files`` (name -> bytes: ``config.json``, tokenizer files, ...), the class that opens
    it (``opens_with``) and notes the verb prints (how pixels map, what was left out)."""

    tensors: dict[str, Tensor]
    files: dict[str, bytes]
    opens_with: str
    notes: list[str] = field(default_factory=list)

    def write(self, directory: str | Path) -> list[str]:
        """Write every file into ``directory`` (a fresh one: the verb's temporary directory)."""
        from safetensors.torch import save_file

        directory = Path(directory)
        # each tensor its own copy: slices of a fused projection and tables used twice share storage
        tensors = {name: value.detach().clone(memory_format=torch.contiguous_format)
                   for name, value in self.tensors.items()}
        save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
        for name, data in self.files.items():
            (directory / name).write_bytes(data)
        return sorted(["model.safetensors", *self.files])


def json_bytes(values: Mapping) -> bytes:
    return (json.dumps(values, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


class StateReader:
    """A model's state dict as an exporter reads it: every tensor it takes is marked, a tied
    tensor is checked to be the very one it is tied to, and :meth:`check_all_read` refuses a
    model holding weights the layout has no place for (a head added to a config family the
    exporter predates must not be dropped silently: the export would compute something else)."""

    def __init__(self, model):
        self.state = model.state_dict()
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> Tensor:
        self.read.add(name)
        return self.state[name]

    def __contains__(self, name: str) -> bool:
        return name in self.state

    def tied(self, name: str, to: str) -> bool:
        """Whether ``name`` is the same tensor as ``to`` (then it counts as read)."""
        same = name in self.state and self.state[name].data_ptr() == self.state[to].data_ptr()
        if same:
            self.read.add(name)
        return same

    def check_all_read(self, layout: str) -> None:
        rest = sorted(set(self.state) - self.read)
        shown = ", ".join(rest[:6]) + (f" and {len(rest) - 6} more" if len(rest) > 6 else "")
        refuse_differences([f"weights the layout has no place for: {shown}"] if rest else [], layout)


def refuse_differences(problems: list[str], layout: str) -> None:
    """Raise one ValueError naming every difference ``layout`` cannot express (none: return)."""
    if problems:
        raise ValueError(f"{layout} cannot express this model exactly, so nothing was exported: "
                         + "; ".join(problems))
