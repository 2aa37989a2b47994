"""Music modelling as a training task: pieces -> token streams -> windows -> the LM loss.

The Music Transformer is a language model over music tokens, so the task is
the language models' with music data: every piece becomes ``[START] tokens [END]``,
the pieces are joined into one stream, training reads random windows of it
(:class:`~attnlab.data.text.TextWindows`) and the loss is :func:`~attnlab.training.losses.lm_loss`.
``attnlab train music`` (:mod:`attnlab.families.music.train`) is a thin shell over these pieces.

Sources (``--data``): ``jsb`` (JSB Chorales, the paper's serialisation, train/valid
splits), ``bach`` (music21's chorales as performance events; the last 10 % of pieces
validate) or a folder of ``.mid`` files (likewise). Performance training pieces are
augmented as in the paper: every transposition by -3..+3 semitones and time stretches of
0.95, 1.0 and 1.05. JSB training chorales are not augmented unless asked
(``jsb_transpose=K``, ``--transpose K``: every chorale also transposed by ±1..K semitones,
whole chorales shifted on the grid; the validation chorales stay as they are).

Evaluation (:func:`evaluate_nll`): negative log-likelihood in nats per music token of
each validation piece, cut into consecutive chunks of ``context`` tokens that are each
predicted on their own (the first chunk after START); the END token is not scored.
Scoring at a context of 2L for a model trained on windows of L measures how it holds up
past its trained length.

With ``stride=S`` (``evaluate-music --stride S``) the chunks overlap instead: windows of
``context`` tokens whose ends advance by S, each scoring only the tokens the previous
window did not, so every token is scored once, with at least ``context - S`` tokens of the
piece before it (all of them near the start): a chunk's first tokens are no longer
predicted from nothing, as they never are when the model plays a piece through. It costs
about ``context / S`` times the chunked evaluation.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnlab.data import music
from attnlab.evaluation.windows import score_windows, scoring_windows
from attnlab.training.losses import lm_loss

__all__ = ["load_music_model", "MUSIC_FILE", "data_record", "recorded_data", "MusicData", "load_music_data",
           "music_stream", "evaluate_nll", "lm_loss", "TRANSPOSITIONS", "STRETCHES", "primer_tokens",
           "tokens_to_notes"]

TRANSPOSITIONS = (-3, -2, -1, 0, 1, 2, 3)
STRETCHES = (0.95, 1.0, 1.05)
MUSIC_FILE = "music.json"
"""A music model directory's record of its training data: ``{"data": "jsb" | "bach" | an
absolute MIDI folder, "data_dir": the absolute data directory or null}``."""


def data_record(source: str, data_dir: str | os.PathLike | None) -> bytes:
    """``music.json`` for a model trained on ``--data source --data-dir data_dir``: the
    data's name and where it was found, as absolute paths (so generate-music's
    ``jsb-valid:N`` and evaluate-music find it again without ``--data-dir``)."""
    import json

    from attnlab.data.registry import data_root

    if source in ("jsb", "bach"):
        root = data_dir if data_dir is not None else (data_root() if source == "jsb" else None)
        record = {"data": source, "data_dir": None if root is None else os.path.abspath(root)}
    else:
        record = {"data": os.path.abspath(source), "data_dir": None}
    return (json.dumps(record, indent=2) + "\n").encode()


def recorded_data(directory: str | os.PathLike) -> dict:
    """What ``directory/music.json`` says (``{}`` for a model saved before it was written);
    ValueError naming the file when it is not such a record."""
    path = os.path.join(directory, MUSIC_FILE)
    if not os.path.isfile(path):
        return {}
    from attnlab.files import read_json_object
    from attnlab.tasks import MAX_TASK_FILE_BYTES

    try:  # size-capped, depth-safe (a music.json nested 100k deep is one line naming it)
        record = read_json_object(path, max_bytes=MAX_TASK_FILE_BYTES, what="a record of the training data")
    except OSError as error:
        raise ValueError(f"{path}: not a readable record of the training data ({error})") from None
    if not isinstance(record, dict) or not all(isinstance(record.get(key), (str, type(None)))
                                               for key in ("data", "data_dir")):
        raise ValueError(f"{path}: expected {{\"data\": ..., \"data_dir\": ...}} with strings or null")
    return {key: record.get(key) for key in ("data", "data_dir")}


def load_music_model(directory, *, device="cpu"):
    """A saved Music Transformer (its config names the token encoding); ValueError for
    another kind of model."""
    from attnlab.models.registry import load_model

    model = load_model(directory, device=device)
    if getattr(model.config, "encoding", None) is None:
        raise ValueError(f"--model {directory}: a {model.config.family} model, not a Music Transformer "
                         "(train one with attnlab train music)")
    return model


@dataclass
class MusicData:
    """Token sequences of one source (without start/end), and what they are."""

    encoding: str  # "jsb" or "performance"
    train: list[list[int]]
    valid: list[list[int]]
    description: str
    fingerprint: str


def _fingerprint(pieces: Sequence[Sequence[int]]) -> str:
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(torch.tensor(piece, dtype=torch.int32).numpy().tobytes())
        digest.update(b"|")
    return digest.hexdigest()


def load_music_data(source: str, *, data_dir: str | os.PathLike | None = None, augment: bool = True,
                    valid_fraction: float = 0.1, progress: bool = False, jsb_transpose: int = 0) -> MusicData:
    """``source``: "jsb", "bach" or a directory of MIDI files (see the module docstring).
    ``jsb_transpose`` K > 0 adds every JSB training chorale transposed by -K..-1 and
    1..K semitones (a transposition that would leave MIDI 0..127 is skipped)."""
    if isinstance(jsb_transpose, bool) or not isinstance(jsb_transpose, int) or not 0 <= jsb_transpose <= 12:
        raise ValueError(f"--transpose={jsb_transpose!r} must be a whole number of semitones in 0..12")
    if source not in ("jsb", "bach") and not os.path.isdir(source):
        raise ValueError(f"--data {source}: not jsb, bach or a directory of MIDI files")
    if source == "jsb":
        chorales = music.load_jsb_chorales("train", data_dir)
        train = []
        for shift in sorted(range(-jsb_transpose, jsb_transpose + 1), key=abs):  # the originals first
            for grid in chorales:
                shifted = np.asarray(grid, dtype=np.float64) + shift
                sounding = shifted[~np.isnan(shifted)]
                if shift == 0 or (sounding.min(initial=0) >= 0 and sounding.max(initial=0) <= 127):
                    train.append(music.serialize_chorale(shifted))
        valid = [music.serialize_chorale(c) for c in music.load_jsb_chorales("valid", data_dir)]
        augmented = f" (+ transpositions up to ±{jsb_transpose}: {len(train)} training sequences)" if jsb_transpose \
            else ""
        description = (f"JSB Chorales ({len(chorales)} train / {len(valid)} valid chorales{augmented}, 16th grid, "
                       "S A T B)")
        return MusicData("jsb", train, valid, description, _fingerprint(train + valid))
    if jsb_transpose:
        raise ValueError("--transpose is for --data jsb; performance data is augmented already (see --no-augment)")
    if source == "bach":
        cache = None if data_dir is None else os.path.join(data_dir, "music21_cache")
        pieces = music.load_bach_chorales(cache, progress=progress)
        name = "music21's Bach chorales"
    else:
        pieces = music.load_midi_folder(source)
        name = f"MIDI files in {source}"
    if len(pieces) < 2:
        raise ValueError(f"{name}: {len(pieces)} piece(s) with notes; need at least 2 (one to validate on)")
    count_valid = max(1, int(round(len(pieces) * valid_fraction)))
    train_notes, valid_notes = pieces[:-count_valid], pieces[-count_valid:]
    train = []
    for _, notes in train_notes:
        variants = [(t, s) for t in TRANSPOSITIONS for s in STRETCHES] if augment else [(0, 1.0)]
        for transpose, stretch in variants:
            tokens = music.encode_performance(music.augment_notes(notes, transpose=transpose, stretch=stretch))
            if tokens:
                train.append(tokens)
    valid = [music.encode_performance(notes) for _, notes in valid_notes]
    description = (f"{name}: {len(train_notes)} train pieces" + (" x 21 augmentations" if augment else "")
                   + f", {len(valid_notes)} valid pieces, performance events")
    return MusicData("performance", train, valid, description, _fingerprint(train + valid))


def music_stream(pieces: Sequence[Sequence[int]]) -> torch.Tensor:
    """``[START] piece [END]`` for every piece, joined into one 1-D stream of ids."""
    stream = []
    for piece in pieces:
        stream.append(music.START)
        stream.extend(piece)
        stream.append(music.END)
    return torch.tensor(stream, dtype=torch.long)


@torch.no_grad()
def evaluate_nll(model, pieces: Sequence[Sequence[int]], *, context: int, batch_size: int = 8,
                 device=None, stride: int | None = None) -> dict:
    """Nats per music token of ``pieces`` (see the module docstring): consecutive chunks of
    ``context`` tokens, or with ``stride`` overlapping windows whose ends advance by that
    many tokens (each token scored once). Returns ``{"nll": ..., "tokens": ...,
    "context": ...}`` (and ``"stride"`` when given)."""
    if context < 1:
        raise ValueError(f"context={context} must be >= 1")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be a whole number >= 1")
    if context > model.config.max_positions:
        raise ValueError(f"context={context} exceeds the model's max_positions={model.config.max_positions}")
    if stride is not None and not 1 <= stride <= context:
        raise ValueError(f"stride={stride} must be between 1 and the context ({context})")
    windows = []  # every piece scored from its START, as the model plays it
    for piece in pieces:
        windows.extend(scoring_windows([music.START, *piece], context=context, stride=stride))
    total, count = score_windows(model, windows, batch_size=batch_size, pad_id=model.config.pad_id, device=device)
    result = {"nll": total / count if count else math.nan, "tokens": count, "context": context}
    if stride is not None:
        result["stride"] = stride
    return result


def primer_tokens(encoding: str, primer: str | None, *, data_dir=None, primer_steps: int = 16,
                  max_tokens: int | None = None) -> list[int]:
    """The prompt for generation: ``[START]`` plus the primer's tokens.

    ``primer``: a MIDI file (performance models; its last ``max_tokens`` events are kept), or
    ``jsb-valid:N`` (JSB models: the first ``primer_steps`` time steps of validation chorale N).
    """
    prompt = [music.START]
    if primer is None:
        return prompt
    if primer.startswith("jsb-valid:"):
        if encoding != "jsb":
            raise ValueError(f"--primer {primer}: a JSB chorale primes a JSB model; this model's encoding is "
                             f"{encoding} (give a MIDI file)")
        if isinstance(primer_steps, bool) or not isinstance(primer_steps, int) or primer_steps < 1:
            raise ValueError(f"--primer-steps={primer_steps!r} must be a whole number of steps, at least 1")
        text = primer.split(":", 1)[1].strip()
        if not re.fullmatch(r"[+-]?[0-9]+", text):  # not a number at all: said before the data is looked for
            raise ValueError(f"--primer {primer}: give jsb-valid:N with N a chorale number (0, 1, ...)")
        chorales = music.load_jsb_chorales("valid", data_dir)
        if not text.isdigit() or int(text) >= len(chorales):  # no counting from the end
            raise ValueError(f"--primer {primer}: give jsb-valid:N with N in 0..{len(chorales) - 1}")
        return prompt + music.serialize_chorale(chorales[int(text)][:primer_steps])
    if encoding != "performance":
        raise ValueError(f"--primer {primer}: a MIDI primer needs a performance-event model; this model's encoding "
                         "is jsb (prime it with jsb-valid:N)")
    tokens = music.encode_performance(music.read_midi_notes(primer))
    if max_tokens is not None and len(tokens) > max_tokens:
        tokens = tokens[-max_tokens:]
    return prompt + tokens


def tokens_to_notes(encoding: str, tokens: Sequence[int]) -> list[music.Note]:
    """Generated tokens (start/end/pad allowed) as notes."""
    if encoding == "performance":
        return music.decode_performance(tokens)
    body = []
    for token in tokens:
        if token == music.END:
            break
        if token >= music.JSB_REST:
            body.append(token)
    return music.chorale_to_notes(music.deserialize_chorale(body))
