"""LoRA in the training-run lifecycle: ``--lora R`` on every ``attnlab train TASK`` with ``--init``.

:mod:`attnlab.cli.training_run` calls these at four points, so every family (and the toy family
of the tests) gets LoRA with nothing of its own:

- the options (:func:`lora_from_args`): the ``--lora*`` values checked (training/lora.py's checks,
  which name the flags), ``--lora`` without ``--init`` refused;
- with ``--init`` opened (:func:`check_lora_fits`): the rank against every adapted layer and the
  targets against the model, on a meta-device copy, before any data is read;
- before the model is built (:func:`plan_lora`): what trains in full beside the adapters (the
  family's new parameters, e.g. a ViT's new head), ``--resume`` against the checkpoint's record
  (the same LoRA config or a refusal), ``--lora-keep``'s output rule, and the record
  (``lora_run.json``, attnlab.models.registry.LORA_RUN_FILE) added to the run's files: OUT and
  every checkpoint carry it, so a checkpoint (base weights and adapters, unmerged) opens as a
  model merged, wherever it is opened (attnlab.load, ``--init``, ``attnlab average``);
- at the end, before the family saves (:func:`finish_lora`): the adapters apart (``--lora-keep``:
  OUT/lora, :func:`attnlab.training.lora.save_lora`), then merged, so OUT/model is a plain model.

The adapters themselves are applied by the lifecycle (:func:`attnlab.training.lora.apply_lora`)
after the model is built from ``--init`` and before the Trainer.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["LORA_DIR", "lora_from_args", "check_lora_fits", "plan_lora", "finish_lora"]

LORA_DIR = "lora"
"""OUT/lora: the adapters apart with ``--lora-keep`` (lora.safetensors + lora.json)."""


def lora_from_args(args):
    """The run's :class:`attnlab.training.lora.LoraConfig` (None without ``--lora``)."""
    from attnlab.cli.options import lora_config_from_args

    lora = lora_config_from_args(args)
    if lora is not None and not getattr(args, "init", None):
        raise ValueError(f"--lora {lora.rank} needs --init DIR: LoRA adapts a trained model (name the model to start "
                         "from with --init, or leave --lora out to train every weight)")
    return lora


def check_lora_fits(lora, model) -> None:
    """lora.py's checks of ``lora`` against ``model``'s layers (a rank larger than a layer, targets
    it lacks), on a copy built on the meta device (nothing allocated, ``model`` untouched)."""
    import torch

    from attnlab.models.registry import model_class_for
    from attnlab.training.lora import apply_lora

    with torch.device("meta"):
        probe = model_class_for(model.config)(model.config)
    apply_lora(probe, lora)


def _flags(lora) -> str:
    if lora is None:
        return "no --lora"
    return (f"--lora {lora.rank} --lora-alpha {lora.lora_alpha:g} --lora-targets {','.join(lora.targets)}"
            f" --lora-dropout {lora.dropout:g}")


def plan_lora(task, run, data, old_config, config, lora) -> tuple[str, ...]:
    """Before the model is built: the parameter names that train in full beside the adapters;
    ``--resume`` is checked against the checkpoint's record, ``--lora-keep``'s directory against
    the output rule, and the record is added to ``run.files``. Refusals name the flags."""
    from attnlab.models.registry import LORA_RUN_FILE
    from attnlab.training.lora import LORA_CONFIG_FILE, LORA_WEIGHTS_FILE, lora_record, read_lora_record

    saved = run.previous / LORA_RUN_FILE if run.previous is not None else None
    if saved is not None and (lora is not None or saved.is_file()):
        before, trainable = read_lora_record(saved) if saved.is_file() else (None, ())
        if before is None or lora is None or before.to_dict() != lora.to_dict():
            raise ValueError(f"--resume: the run in {run.out} was trained with {_flags(before)} ({run.previous.name}); "
                             f"this command asks for {_flags(lora)}; give the flags it was started with (--resume "
                             "continues the same run)")
    elif lora is None:
        return ()
    else:
        trainable = tuple(sorted({prefix.rstrip(".")
                                  for prefix in task.new_parameters(run, data, old_config, config)}))
    keep = run.out / LORA_DIR
    if run.args.lora_keep and (keep.exists() or keep.is_symlink()):
        theirs = keep.is_symlink() or not keep.is_dir() \
            or any(entry.name not in (LORA_CONFIG_FILE, LORA_WEIGHTS_FILE) for entry in keep.iterdir())
        if theirs or not (run.previous is not None or run.args.force):
            raise ValueError(f"--lora-keep: {keep} exists" + (" and holds what attnlab did not write; move it away or"
                                                                " choose another --out" if theirs else
                                                                " (adapters of an earlier run); pass --force to "
                                                                "replace them, or choose another --out"))
    run.files[LORA_RUN_FILE] = (json.dumps(lora_record(lora, trainable), indent=2) + "\n").encode()
    return tuple(trainable)


def finish_lora(run, model) -> str:
    """After training, before the family saves: ``--lora-keep``'s adapters apart, then merged (OUT/model
    is a plain model directory, without the record); the line the run says."""
    from attnlab.models.registry import LORA_RUN_FILE
    from attnlab.training.lora import merge_lora, save_lora

    kept = save_lora(model, run.out / LORA_DIR) if run.args.lora_keep else None
    merge_lora(model)
    run.files.pop(LORA_RUN_FILE, None)
    return "LoRA: adapters merged into the saved model" + (
        f"; kept apart in {kept} (attnlab.training.lora.load_lora onto the --init model)" if kept else "")
