"""Training checkpoints without pickle: safetensors for tensors, JSON for the rest.

A checkpoint is a directory ``<root>/step_<NNNNNNNN>/`` holding::

    model.safetensors            model weights (``safetensors.torch.save_model``:
                                 tied weights are stored once and re-tied on load)
    config.json                  the model config, when given; with it the
                                 checkpoint is also a loadable model directory
    <extra files>                e.g. tokenizer files, copied verbatim
    training_state.json          step, optimizer/scheduler structure and scalars,
                                 data position, RNG states, ...
    training_state.safetensors   every tensor of the training state, keyed by
                                 its path in the structure (e.g. ``optimizer/state/0/exp_avg``)

Arbitrary nested training state (dicts with any JSON-able keys, lists, tuples,
tensors, numbers, strings, None) is split into the two ``training_state`` files
by :func:`encode_state` and put back by :func:`decode_state`. Loading never
unpickles anything, so a checkpoint from an untrusted source can at worst fail
to load; truncated or foreign files raise ``ValueError`` naming the file.

Directories are written into a hidden temporary sibling, fsynced and renamed
into place, so a crash leaves either the previous set of checkpoints or the new
complete one, never a half-written ``step_*`` directory.
"""

from __future__ import annotations

import base64
import json
import math
import os
import random
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import safetensors
import safetensors.torch
import torch

from attnlab.files import atomic_directory as _atomic_directory
from attnlab.files import json_safe, needs_space, tensors_size
from attnlab.files import recover_directory, remove_stale_temporaries
from attnlab.training.distributed import DistributedContext, gather_bytes

__all__ = [
    "MODEL_FILE",
    "CONFIG_FILE",
    "STATE_JSON_FILE",
    "STATE_TENSORS_FILE",
    "checkpoint_dir",
    "list_checkpoints",
    "latest_checkpoint",
    "save_checkpoint",
    "load_training_state",
    "load_model_weights",
    "average_checkpoints",
    "write_model_directory",
    "check_replaceable_model_directory",
    "average_checkpoints_to_directory",
    "encode_state",
    "decode_state",
    "capture_rng_state",
    "restore_rng_state",
    "RESUME_FREE",
    "changed_settings",
    "save_training_checkpoint",
    "load_training_checkpoint",
]

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
STATE_JSON_FILE = "training_state.json"
STATE_TENSORS_FILE = "training_state.safetensors"
_FORMAT = "attnlab.training_state"
_FORMAT_VERSION = 1
_MAX_STEP = 10**12  # far beyond any run; a larger step is a corrupt or hostile file
_STEP_DIR = re.compile(r"^step_(\d+)$")
# Files that belong to training only; everything else in a checkpoint describes the model.
_TRAINING_ONLY_FILES = {MODEL_FILE, STATE_JSON_FILE, STATE_TENSORS_FILE}


# --------------------------------------------------------------------------- #
# Nested state  <->  (JSON, tensors)
# --------------------------------------------------------------------------- #
# JSON cannot say "tuple", "int key" or "infinity", and must not hold tensors, so
# those are written as single-key tagged objects. Plain dicts with string keys
# stay plain so the JSON remains readable.
_TENSOR, _TUPLE, _ITEMS, _FLOAT = "__tensor__", "__tuple__", "__items__", "__float__"
_TAGS = {_TENSOR, _TUPLE, _ITEMS, _FLOAT}


def encode_state(state: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """Split nested ``state`` into a JSON-able structure and a flat dict of tensors.

    Tensors are replaced by ``{"__tensor__": key}`` where ``key`` is their path
    (``"optimizer/state/0/exp_avg"``). Raises ``ValueError`` naming the path of
    any value that is neither a tensor nor plain data.
    """
    tensors: dict[str, torch.Tensor] = {}
    seen_storage: set[int] = set()

    def add_tensor(path: str, tensor: torch.Tensor) -> dict[str, str]:
        tensor = tensor.detach().cpu().contiguous()
        # safetensors refuses tensors that share memory; copy the rare aliased one.
        if tensor.numel():
            pointer = tensor.untyped_storage().data_ptr()
            if pointer in seen_storage:
                tensor = tensor.clone()
            seen_storage.add(tensor.untyped_storage().data_ptr())
        key = path or "."
        if key in tensors:  # only possible when a dict mixes e.g. 0 and "0" as keys
            key = f"{key}~{len(tensors)}"
        tensors[key] = tensor
        return {_TENSOR: key}

    def encode(value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            return add_tensor(path, value)
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)):
            value = float(value)
            return value if math.isfinite(value) else {_FLOAT: repr(value)}
        if isinstance(value, tuple):
            return {_TUPLE: [encode(item, f"{path}/{i}") for i, item in enumerate(value)]}
        if isinstance(value, list):
            return [encode(item, f"{path}/{i}") for i, item in enumerate(value)]
        if isinstance(value, Mapping):
            if all(isinstance(key, str) for key in value) and not (_TAGS & set(value)):
                return {key: encode(item, f"{path}/{key}") for key, item in value.items()}
            return {
                _ITEMS: [
                    [encode(key, f"{path}/<key>"), encode(item, f"{path}/{key}")]
                    for key, item in value.items()
                ]
            }
        raise ValueError(
            f"training state at {path or '/'!r} has a {type(value).__name__}, which cannot be "
            "stored without pickle; use tensors, numbers, strings, lists, tuples, dicts or None"
        )

    return encode(state, ""), tensors


def decode_state(encoded: Any, tensors: Mapping[str, torch.Tensor], *, source: str = "state") -> Any:
    """Inverse of :func:`encode_state`. ``source`` names the file in error messages."""

    def decode(value: Any) -> Any:
        if isinstance(value, list):
            return [decode(item) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (tag, payload), = value.items()
            if tag == _TENSOR:
                if payload not in tensors:
                    raise ValueError(f"{source}: refers to tensor {payload!r}, which the tensor file lacks")
                return tensors[payload]
            if tag == _TUPLE:
                return tuple(decode(item) for item in payload)
            if tag == _ITEMS:
                return {decode(key): decode(item) for key, item in payload}
            if tag == _FLOAT:
                return float(payload)
        return {key: decode(item) for key, item in value.items()}

    try:
        return decode(encoded)
    except (TypeError, ValueError, AttributeError) as error:
        if isinstance(error, ValueError) and str(error).startswith(source):
            raise
        raise ValueError(f"{source}: malformed training state ({error})") from error


# --------------------------------------------------------------------------- #
# RNG state (JSON only, so it can also travel between processes as bytes)
# --------------------------------------------------------------------------- #
def _bytes_to_text(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.cpu().numpy().tobytes()).decode("ascii")


def _text_to_bytes(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def capture_rng_state() -> dict[str, Any]:
    """The Python, NumPy (legacy global) and torch (CPU and CUDA) RNG states as JSON-able data."""
    version, internal, gauss_next = random.getstate()
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state: dict[str, Any] = {
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
        "numpy": {
            "kind": kind,
            "keys": keys.tolist(),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": _bytes_to_text(torch.get_rng_state()),
    }
    if torch.cuda.is_available():
        state["cuda"] = [_bytes_to_text(s) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`capture_rng_state` captured."""
    try:
        python = state["python"]
        random.setstate((python["version"], tuple(python["internal"]), python["gauss_next"]))
        numpy = state["numpy"]
        np.random.set_state(
            (
                numpy["kind"],
                np.asarray(numpy["keys"], dtype=np.uint32),
                numpy["position"],
                numpy["has_gauss"],
                numpy["cached_gaussian"],
            )
        )
        torch.set_rng_state(_text_to_bytes(state["torch"]))
        if "cuda" in state and torch.cuda.is_available():
            cuda_states = [_text_to_bytes(s) for s in state["cuda"]]
            if len(cuda_states) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(cuda_states)
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"rng state is malformed ({error!r})") from error


RESUME_FREE = frozenset({"max_steps", "max_minutes", "progress_bar", "progress_unit", "tensorboard", "out_dir",
                         "log_every", "validate_every", "checkpoint_every", "keep_last", "tune_malloc",
                         "max_nonfinite_updates", "checkpoint_every_minutes"})
"""The training settings (``TrainConfig`` fields) that may change on resume without changing
what is trained."""


def changed_settings(config: Any, saved_config: Any, run_info: Any, saved_run_info: Any) -> list[str]:
    """``"key before -> now"`` for each training setting (``config``, a ``TrainConfig.to_dict()``,
    less :data:`RESUME_FREE`) and each ``run_info`` entry (the data) that differs from the
    checkpoint's (``saved_*``, as stored); keys on one side only, and anything not a dict,
    are left out."""
    changed = []
    for current, before, free in ((config, saved_config, RESUME_FREE), (run_info, saved_run_info, ())):
        if isinstance(current, dict) and isinstance(before, dict):
            changed += [f"{key} {before[key]!r} -> {current[key]!r}" for key in sorted(current)
                        if key in before and key not in free and json_safe(current[key]) != json_safe(before[key])]
    return changed


# --------------------------------------------------------------------------- #
# Files
# --------------------------------------------------------------------------- #
def _write_json(path: Path, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as file:
        json.dump(data, file, indent=1, allow_nan=False)
        file.write("\n")


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except FileNotFoundError:
        raise ValueError(f"{path}: file is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from error


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise ValueError(f"{path}: file is missing")
    try:
        return safetensors.torch.load_file(path)
    except Exception as error:  # safetensors raises its own SafetensorError and others
        raise ValueError(f"{path}: not a valid safetensors file ({error})") from error


def _model_file(path: str | os.PathLike) -> Path:
    """Accept a checkpoint/model directory or a ``.safetensors`` file."""
    path = Path(path)
    return path / MODEL_FILE if path.is_dir() else path


# --------------------------------------------------------------------------- #
# Checkpoint directories
# --------------------------------------------------------------------------- #
def checkpoint_dir(root: str | os.PathLike, step: int) -> Path:
    """Where the checkpoint of ``step`` lives under ``root``."""
    if step < 0:
        raise ValueError(f"step must be non-negative, got {step!r}")
    return Path(root) / f"step_{step:08d}"


def list_checkpoints(root: str | os.PathLike) -> list[Path]:
    """Complete checkpoints under ``root``, oldest step first (temporary directories are ignored)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        # A symlink is never one of ours: rotation must not reach through it into another directory.
        if match and child.is_dir() and not child.is_symlink() and (child / STATE_JSON_FILE).is_file():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The checkpoint with the highest step under ``root``, or ``None`` when there is none."""
    checkpoints = list_checkpoints(root)
    return checkpoints[-1] if checkpoints else None


def save_checkpoint(
    root: str | os.PathLike,
    step: int,
    model: torch.nn.Module,
    training_state: Mapping[str, Any],
    *,
    model_config: Mapping[str, Any] | None = None,
    extra_files: Sequence[str | os.PathLike] = (),
    keep_last: int | None = None,
) -> Path:
    """Write ``<root>/step_<step>/`` atomically and prune to the newest ``keep_last``.

    Args:
        model: the bare module (unwrap DistributedDataParallel first).
        training_state: nested plain data and tensors (see :func:`encode_state`).
        model_config: written as ``config.json`` so the checkpoint is a model directory.
        extra_files: files copied in by name, e.g. the tokenizer.
        keep_last: how many checkpoints to keep, counting this one; ``None`` keeps all.
    """
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be at least 1 or None, got {keep_last!r}")
    root = Path(root)
    final = checkpoint_dir(root, step)
    bad = _first_non_finite(model.state_dict())
    if bad is not None:
        # Never write (and then rotate good checkpoints out for) weights that diverged.
        raise ValueError(f"step {step}: model weight {bad!r} holds NaN or infinity; not saving a checkpoint "
                         f"of a diverged model (the earlier checkpoints under {root} are kept)")
    encoded, tensors = encode_state(dict(training_state))
    header = {"format": _FORMAT, "version": _FORMAT_VERSION, "step": step, "state": encoded}
    # Temporary directories left by a crashed run are invisible to list_checkpoints; remove
    # them, but only those of dead processes (a live writer's are its checkpoints in flight).
    remove_stale_temporaries(root, ".step_*.tmp-*")
    with _atomic_directory(final) as directory:  # a full disk: DiskFull naming the file and the space it needed
        with needs_space(directory / MODEL_FILE, tensors_size(model.state_dict())):
            safetensors.torch.save_model(model, str(directory / MODEL_FILE))
        with needs_space(directory / STATE_TENSORS_FILE, tensors_size(tensors)):
            safetensors.torch.save_file(tensors, str(directory / STATE_TENSORS_FILE), metadata={"format": "pt"})
        _write_json(directory / STATE_JSON_FILE, header)
        if model_config is not None:
            _write_json(directory / CONFIG_FILE, dict(model_config))
        for extra in extra_files:
            extra = Path(extra)
            if extra.name in _TRAINING_ONLY_FILES or extra.name == CONFIG_FILE:
                raise ValueError(f"extra_files: {extra} would overwrite the checkpoint's own {extra.name}")
            if not extra.is_file():
                raise ValueError(f"extra_files: {extra} is not a file")
            shutil.copyfile(extra, directory / extra.name)
    if keep_last is not None:
        for old in list_checkpoints(root)[:-keep_last]:
            shutil.rmtree(old)
    return final


def save_training_checkpoint(root: str | os.PathLike, step: int, model: torch.nn.Module, *, optimizer, scheduler,
                             data, context: DistributedContext, train_config: Mapping[str, Any],
                             run_info: Mapping[str, Any] | None = None,
                             schedule_fit: Mapping[str, Any] | None = None,
                             model_config: Mapping[str, Any] | None = None,
                             extra_files: Sequence[str | os.PathLike] = (),
                             keep_last: int | None = None) -> Path | None:
    """A training run's checkpoint of ``step`` (:func:`save_checkpoint`): the model, and what
    a resumed run needs: ``optimizer``, ``scheduler`` and ``data`` (the batch source's
    position) state, every rank's RNG state (so each rank's dropout continues exactly),
    the world size, ``train_config`` and, when given, ``run_info`` and ``schedule_fit``.
    Collective: call on every rank; rank 0 writes and gets the path (other ranks None);
    nobody returns before the checkpoint is complete on disk."""
    rng_states = gather_bytes(json.dumps(capture_rng_state()).encode(), context)
    path = None
    if context.is_main:
        state = {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "data": data.state_dict(),
            "rng": [json.loads(state) for state in rng_states],
            "world_size": context.world_size,
            "train_config": dict(train_config),
        }
        if run_info is not None:
            state["run_info"] = run_info
        if schedule_fit is not None:
            state["schedule_fit"] = schedule_fit
        path = save_checkpoint(root, step, model, state, model_config=model_config, extra_files=extra_files,
                               keep_last=keep_last)
    context.barrier()
    return path


def load_training_checkpoint(path: str | os.PathLike, model: torch.nn.Module, *, optimizer, scheduler,
                             data) -> dict[str, Any]:
    """Restore the weights of ``model``, the ``optimizer`` and ``scheduler`` state and the data
    position (``data.load_state_dict``) from the checkpoint ``path`` that
    :func:`save_training_checkpoint` wrote; returns its training state (``step``, ``rng``,
    ``world_size``, ``train_config``, ``run_info``, ``schedule_fit``) for the rest. A state
    that does not fit is a ValueError naming ``path``."""
    state = load_training_state(path)
    load_model_weights(path, model)
    try:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        data.load_state_dict(state["data"])
    except (KeyError, TypeError, RuntimeError) as error:
        raise ValueError(f"{path}: training state does not fit this model/optimizer ({error!r})") from error
    return state


def load_training_state(path: str | os.PathLike) -> dict[str, Any]:
    """The training state saved in checkpoint directory ``path``, plus its ``"step"``."""
    path = Path(path)
    header = _read_json(path / STATE_JSON_FILE)
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise ValueError(f"{path / STATE_JSON_FILE}: not an attnlab training state (no format {_FORMAT!r})")
    if header.get("version") != _FORMAT_VERSION:
        raise ValueError(
            f"{path / STATE_JSON_FILE}: format version {header.get('version')!r} is not {_FORMAT_VERSION}"
        )
    tensors = _read_safetensors(path / STATE_TENSORS_FILE)
    state = decode_state(header.get("state"), tensors, source=str(path / STATE_JSON_FILE))
    if not isinstance(state, dict):
        raise ValueError(f"{path / STATE_JSON_FILE}: training state is not a mapping")
    step = header.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < _MAX_STEP:
        raise ValueError(f"{path / STATE_JSON_FILE}: step {step!r} is not an integer in [0, {_MAX_STEP})")
    state["step"] = step
    return state


def load_model_weights(path: str | os.PathLike, model: torch.nn.Module, *, strict: bool = True) -> None:
    """Load ``model.safetensors`` (from a directory, or the file itself) into ``model`` in place."""
    file = _model_file(path)
    if not file.is_file():
        raise ValueError(f"{file}: file is missing")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    try:
        safetensors.torch.load_model(model, str(file), strict=strict, device=str(device))
    except Exception as error:  # header/size errors from safetensors, key mismatches from torch
        detail = _mismatch_summary(file, model) or str(error)
        raise ValueError(f"{file}: cannot load into {type(model).__name__} ({detail})") from error


def _mismatch_summary(file: Path, model: torch.nn.Module) -> str | None:
    """One line on how the file's tensors differ from the model's (names and shapes read
    from the header only), instead of torch's list of every key; None if it cannot tell."""
    try:
        with safetensors.safe_open(str(file), framework="pt") as weights:
            stored = {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}
    except Exception:
        return None
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    missing = sorted(set(expected) - set(stored))
    unexpected = sorted(set(stored) - set(expected))
    reshaped = sorted(name for name in set(expected) & set(stored) if expected[name] != stored[name])
    if not (missing or unexpected or reshaped):
        return None
    parts = [f"{len(names)} {what}" + (f" (e.g. {names[0]!r})" if names else "")
             for what, names in (("missing", missing), ("unexpected", unexpected)) if names]
    if reshaped:
        name = reshaped[0]
        parts.append(f"{len(reshaped)} of another shape (e.g. {name!r}: {stored[name]} in the file, "
                     f"{expected[name]} in the model)")
    return ", ".join(parts) + "; are these another model's weights?"


def _first_non_finite(tensors: Mapping[str, torch.Tensor]) -> str | None:
    """The name of the first floating-point tensor holding NaN or infinity, or None."""
    for key, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return key
    return None


# --------------------------------------------------------------------------- #
# Averaging
# --------------------------------------------------------------------------- #
def average_checkpoints(paths: Sequence[str | os.PathLike]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the model weights of several checkpoints.

    The Transformer paper (section 6.1) averages the last 5 (base) or 20 (big)
    checkpoints. Floating-point tensors are averaged in float64 and cast back
    to their dtype; other tensors (integer buffers) are taken from the first
    checkpoint. Tied weights appear once, as in the files.

    Args:
        paths: checkpoint or model directories, or ``.safetensors`` files.
    """
    if not paths:
        raise ValueError("paths: need at least one checkpoint to average")
    files = [_model_file(path) for path in paths]
    first = _current_names(_read_safetensors(files[0]), files[0])
    _refuse_non_finite(first, files[0])
    sums = {key: t.double() if t.is_floating_point() else t for key, t in first.items()}
    for file in files[1:]:
        tensors = _current_names(_read_safetensors(file), file)
        _refuse_non_finite(tensors, file)
        if tensors.keys() != first.keys():
            difference = sorted(tensors.keys() ^ first.keys())
            raise ValueError(f"{file}: tensor names differ from {files[0]} (e.g. {difference[:3]})")
        for key, tensor in tensors.items():
            if tensor.shape != first[key].shape or tensor.dtype != first[key].dtype:
                raise ValueError(
                    f"{file}: tensor {key!r} is {tensor.dtype}{tuple(tensor.shape)}, "
                    f"but {first[key].dtype}{tuple(first[key].shape)} in {files[0]}"
                )
            if tensor.is_floating_point():
                sums[key] += tensor.double()
    return {
        key: (total / len(files)).to(first[key].dtype) if first[key].is_floating_point() else total
        for key, total in sums.items()
    }


def _current_names(tensors: dict[str, torch.Tensor], file: Path) -> dict[str, torch.Tensor]:
    """The weights of an attnlab model directory under today's parameter names: a run that
    was resumed across a version that renamed parameters keeps checkpoints with both the old
    and the new names, and their average must not fail on it. A checkpoint of a LoRA run
    (its ``lora_run.json``) has its adapters merged into the weights first. Files outside a
    model directory (a bare .safetensors) are taken as they are."""
    directory = file.parent
    if not (directory / CONFIG_FILE).is_file() or not _is_attnlab_model(directory):
        return tensors
    from attnlab.linear import merge_low_rank
    from attnlab.models.registry import load_config, lora_run_scale, model_class_for

    scale = lora_run_scale(directory)
    if scale is not None:  # a checkpoint of a LoRA run: average the merged weights (B A is not linear)
        tensors = merge_low_rank(tensors, scale, source=str(file))

    try:
        config = load_config(directory)
    except ValueError:
        return tensors  # a config attnlab cannot read: compare the names as written
    model_class = model_class_for(config)
    if not model_class.legacy_names:
        return tensors
    with torch.device("meta"):
        model = model_class(config)
    return model.upgrade_state_dict(tensors)


def _refuse_non_finite(tensors: Mapping[str, torch.Tensor], file: Path) -> None:
    bad = _first_non_finite(tensors)
    if bad is not None:
        raise ValueError(f"{file}: tensor {bad!r} holds NaN or infinity; refusing to average it")


def _is_attnlab_model(directory: Path) -> bool:
    """Whether ``directory/config.json`` claims a registered attnlab model family (checkpoints
    of other modules trained with the Trainer carry configs attnlab cannot load)."""
    from attnlab.models.registry import known_families

    try:
        config = _read_json(directory / CONFIG_FILE)
    except ValueError:
        return True  # unreadable: let load_model say why
    return not isinstance(config, dict) or config.get("family") in known_families()


def check_replaceable_model_directory(out_dir: str | os.PathLike) -> None:
    """Raise ValueError unless ``out_dir`` may be (re)written as a model directory.

    Allowed: a missing or empty directory, or an attnlab model directory (``config.json``
    and ``model.safetensors``) holding only plain files, which a new model replaces as a
    whole. Anything else (a file, a symlink, a directory with other contents, the
    current directory, ...) holds what attnlab did not write, and is refused.
    """
    out_dir = Path(out_dir)
    if out_dir.is_symlink():
        raise ValueError(f"{out_dir}: is a symlink; give a real directory for the model")
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise ValueError(f"{out_dir}: exists and is not a directory; refusing to replace it")
    entries = sorted(out_dir.iterdir())
    if not entries:
        return
    names = {entry.name for entry in entries}
    if not {CONFIG_FILE, MODEL_FILE} <= names:
        raise ValueError(f"{out_dir}: exists, is not empty and is not an attnlab model directory (it has no "
                         f"{CONFIG_FILE} + {MODEL_FILE}); refusing to replace it: choose a new or empty directory")
    for entry in entries:
        if entry.is_symlink() or not entry.is_file():
            raise ValueError(f"{out_dir}: holds {entry.name!r}, which is not a plain file attnlab writes into a model "
                             "directory; refusing to replace the directory: move it away or choose another one")


def write_model_directory(
    state_dict: Mapping[str, torch.Tensor],
    out_dir: str | os.PathLike,
    *,
    copy_from: str | os.PathLike | None = None,
    replace: bool = False,
) -> Path:
    """Write ``model.safetensors`` (and the model files of ``copy_from``) atomically to ``out_dir``.

    ``copy_from`` is a checkpoint or model directory whose ``config.json`` and
    other model files (tokenizer, ...) are copied; training state is not. An existing
    ``out_dir`` must pass :func:`check_replaceable_model_directory`, unless ``replace``
    (the caller checked it, e.g. ``--force``): then it is replaced as a whole.
    """
    out_dir = Path(out_dir)
    sources: list[Path] = []
    if copy_from is not None:
        copy_from = Path(copy_from)
        if not (copy_from / CONFIG_FILE).is_file():
            raise ValueError(
                f"{copy_from / CONFIG_FILE}: file is missing; a model directory needs it "
                "(give the Trainer a model_config)"
            )
        from attnlab.models.registry import LORA_RUN_FILE  # the weights written here are merged

        sources = [f for f in copy_from.iterdir()
                   if f.is_file() and f.name not in _TRAINING_ONLY_FILES and f.name != LORA_RUN_FILE]
        for source in sources:
            if source.is_symlink():
                raise ValueError(f"{source}: is a symlink (to {os.readlink(source)}); refusing to copy what it "
                                 "points to into a model directory")
    recover_directory(out_dir)
    if not replace:
        check_replaceable_model_directory(out_dir)
    with _atomic_directory(out_dir) as directory:
        tensors = {key: tensor.contiguous() for key, tensor in state_dict.items()}
        with needs_space(directory / MODEL_FILE, tensors_size(tensors)):
            safetensors.torch.save_file(tensors, str(directory / MODEL_FILE), metadata={"format": "pt"})
        for source in sources:
            shutil.copyfile(source, directory / source.name)
        if copy_from is not None and _is_attnlab_model(copy_from):
            from attnlab.models.registry import load_model

            try:  # publish only a directory that loads
                load_model(directory)
            except ValueError as error:
                message = str(error).replace(str(directory), str(copy_from))
                raise ValueError(f"{out_dir}: not written, the result would not load: {message}") from None
    return out_dir


def average_checkpoints_to_directory(
    paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *, replace: bool = False
) -> Path:
    """Average ``paths`` and write a model directory (config and model files from the first);
    ``replace``: see :func:`write_model_directory`."""
    if not paths:
        raise ValueError("paths: need at least one checkpoint to average")
    averaged = average_checkpoints(paths)
    return write_model_directory(averaged, out_dir, copy_from=paths[0], replace=replace)
