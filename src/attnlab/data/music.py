"""Music as token sequences: the Music Transformer's two encodings, and where music comes from.

**Performance events** (Oore et al. 2018, used by Huang et al. 2018 §4 for piano): 388
events, plus pad/start/end (``PERFORMANCE_VOCAB_SIZE`` = 391 tokens):

==============  ======  ================================================================
event           count   meaning
==============  ======  ================================================================
NOTE_ON         128     a note of pitch p starts (at the current velocity)
NOTE_OFF        128     the note of pitch p ends
TIME_SHIFT      100     time moves on by k × 10 ms, k = 1 .. 100 (longer gaps: several)
VELOCITY        32      the following NOTE_ONs have velocity bin b (MIDI velocity // 4)
==============  ======  ================================================================

Times are quantised to 10 ms (each onset and offset to the nearest step, so a round trip
keeps them within 5 ms; a note is at least one step long: one shorter than that becomes the
step that holds its onset, within 10 ms), velocities to their bin (decoded
to the bin's centre, ``4·b + 2``). A VELOCITY event is written only when the bin changes;
at a time step note-offs come before note-ons.

*Sustain pedal*: while controller 64 is >= 64 on a track, a note released by the key keeps
sounding until the pedal goes up (or until the same pitch is struck again), as a piano
does; the encoding writes the extended offsets (Oore et al.; Magenta's performance
encoding does the same). *Overlapping notes of one pitch*: a MIDI pitch can sound only
once, so a note struck again before it ended is cut at the new onset. Drum tracks are
skipped; all other tracks are merged (a piano performance).

Augmentation (Huang et al. §4): transposition by up to ±3 semitones and time stretches of
up to ±5 %, applied to the notes before quantising (:func:`augment_notes`).

**JSB Chorales** (Huang et al. §4.1, the Coconet data): four voices on a 16th-note grid,
serialised time step by time step, soprano alto tenor bass (S1 A1 T1 B1 S2 A2 ...), one
token per MIDI pitch and a rest token (``JSB_VOCAB_SIZE`` = 132: pad, start, end, rest,
pitches 0..127). :func:`serialize_chorale` / :func:`deserialize_chorale` convert a
``(T, 4)`` grid with NaN rests and back; :func:`load_jsb_chorales` reads the splits.

Sources of performances: a folder of the user's ``.mid`` files (:func:`load_midi_folder`),
and music21's corpus of Bach chorales (:func:`load_bach_chorales`; ``pip install
music21``, optional; its parse is slow, so the notes are cached under the data root).
Invalid MIDI files (truncated, not MIDI) raise :class:`MusicFileError` naming the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import sys
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "PAD", "START", "END", "NUM_SPECIAL", "PERFORMANCE_VOCAB_SIZE", "JSB_VOCAB_SIZE", "JSB_REST", "Note",
    "MusicFileError", "DataUnavailable", "read_midi_notes", "notes_from_midi_bytes", "notes_to_midi", "midi_bytes",
    "write_midi", "seconds", "describe_notes",
    "encode_performance", "decode_performance", "augment_notes", "describe_event", "serialize_chorale",
    "deserialize_chorale", "chorale_to_notes", "load_jsb_chorales", "jsb_path", "convert_published_jsb", "write_jsb", "load_midi_folder",
    "load_bach_chorales",
]

PAD, START, END = 0, 1, 2
NUM_SPECIAL = 3

# Performance events, after the special tokens.
NOTE_ON = NUM_SPECIAL                       # 3 .. 130
NOTE_OFF = NOTE_ON + 128                    # 131 .. 258
TIME_SHIFT = NOTE_OFF + 128                 # 259 .. 358: k = 1 .. 100 steps of 10 ms
VELOCITY = TIME_SHIFT + 100                 # 359 .. 390
PERFORMANCE_VOCAB_SIZE = VELOCITY + 32      # 391 = 388 events + 3 special
STEPS_PER_SECOND = 100
MAX_SHIFT = 100
DEFAULT_VELOCITY = 64

# JSB Chorales: pad, start, end, rest, then one token per MIDI pitch.
JSB_REST = NUM_SPECIAL
JSB_PITCH = JSB_REST + 1
JSB_VOCAB_SIZE = JSB_PITCH + 128
JSB_STEP_SECONDS = 0.125  # a 16th note at 120 quarter notes a minute, for listening
JSB_VOICES = ("soprano", "alto", "tenor", "bass")


class MusicFileError(ValueError):
    """A music file that cannot be read: the message names the file."""


class DataUnavailable(ValueError):
    """A named music source that is not installed here: the message says how to get it."""


@dataclass(frozen=True)
class Note:
    """One note: MIDI pitch, onset and offset in seconds, MIDI velocity (1..127)."""

    pitch: int
    start: float
    end: float
    velocity: int


# -- MIDI files --------------------------------------------------------------------------
def _sustained(notes: list[Note], pedal: list[tuple[float, bool]]) -> list[Note]:
    """Notes of one track with their offsets extended while the sustain pedal is down."""
    if not pedal:
        return notes
    pedal = sorted(pedal)
    times = [t for t, _ in pedal]
    out = []
    for note in notes:
        # pedal state at the note's release: the last pedal event at or before it
        index = np.searchsorted(times, note.end, side="right") - 1
        end = note.end
        if index >= 0 and pedal[index][1]:
            end = next((t for t, down in pedal[index + 1:] if not down), note.end)  # never released: as played
        out.append(Note(note.pitch, note.start, max(end, note.end), note.velocity))
    return out


def _one_sounding_per_pitch(notes: Iterable[Note]) -> list[Note]:
    """Cut a note struck again before it ended at the new onset; of notes struck together
    keep the longest; drop notes that end up empty."""
    by_pitch: dict[int, list[Note]] = {}
    for note in sorted(notes, key=lambda n: (n.pitch, n.start, -n.end)):
        by_pitch.setdefault(note.pitch, []).append(note)
    out = []
    for pitch_notes in by_pitch.values():
        for current, following in zip(pitch_notes, pitch_notes[1:] + [None]):
            end = current.end if following is None else min(current.end, following.start)
            if end > current.start:
                out.append(Note(current.pitch, current.start, end, current.velocity))
    return sorted(out, key=lambda n: (n.start, n.pitch))


def notes_from_midi_bytes(data: bytes, name: str = "<bytes>", *, sustain: bool = True) -> list[Note]:
    """The notes of a MIDI file's bytes (all non-drum tracks merged, sustain pedal applied)."""
    import pretty_midi

    try:
        midi = pretty_midi.PrettyMIDI(io.BytesIO(data))
    except Exception as error:  # mido raises OSError, EOFError, KeyError, ValueError ... on bad files
        reason = str(error) or type(error).__name__
        raise MusicFileError(f"{name}: not a readable MIDI file ({reason})") from None
    notes = []
    for instrument in midi.instruments:
        if instrument.is_drum:
            continue
        track = [Note(int(n.pitch), float(n.start), float(n.end), int(n.velocity)) for n in instrument.notes
                 if n.end > n.start]
        if sustain:
            pedal = [(float(c.time), c.value >= 64) for c in instrument.control_changes if c.number == 64]
            track = _sustained(track, pedal)
        notes.extend(track)
    return _one_sounding_per_pitch(notes)


def read_midi_notes(path: str | os.PathLike, *, sustain: bool = True) -> list[Note]:
    """The notes of a MIDI file; :class:`MusicFileError` naming the file when it is not one."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise MusicFileError(f"{path}: cannot read ({error.strerror or error})") from None
    if not data.startswith(b"MThd"):
        raise MusicFileError(f"{path}: not a MIDI file (it does not start with the 'MThd' header)")
    return notes_from_midi_bytes(data, str(path), sustain=sustain)


def notes_to_midi(notes: Sequence[Note], *, program: int = 0):
    """A ``pretty_midi.PrettyMIDI`` with the notes on one instrument (0 = acoustic grand piano);
    notes of one pitch that overlap are cut as the module docstring says."""
    import pretty_midi

    midi = pretty_midi.PrettyMIDI(resolution=480, initial_tempo=120.0)
    instrument = pretty_midi.Instrument(program=program)
    instrument.notes = [pretty_midi.Note(velocity=n.velocity, pitch=n.pitch, start=n.start, end=n.end)
                        for n in _one_sounding_per_pitch(notes)]  # one channel sounds a pitch once
    midi.instruments.append(instrument)
    return midi


def midi_bytes(notes: Sequence[Note], *, program: int = 0) -> bytes:
    """The notes as a standard MIDI file's bytes."""
    buffer = io.BytesIO()
    notes_to_midi(notes, program=program).write(buffer)
    return buffer.getvalue()


def write_midi(notes: Sequence[Note], path: str | os.PathLike, *, program: int = 0) -> Path:
    """Write the notes as a MIDI file, atomically (a temporary file renamed into place)."""
    from attnlab.files import atomic_write_bytes

    path = Path(path)
    atomic_write_bytes(path, midi_bytes(notes, program=program))
    return path


# -- performance events ------------------------------------------------------------------
def _velocity_bin(velocity: int) -> int:
    return min(max(int(velocity), 0), 127) // 4


def encode_performance(notes: Sequence[Note]) -> list[int]:
    """Notes -> performance-event token ids (without start/end; see the module docstring)."""
    events: list[tuple[int, int, int, int]] = []  # (step, 0 = off / 1 = on, pitch, velocity)
    for note in notes:
        if not 0 <= note.pitch < 128:
            raise ValueError(f"note pitch {note.pitch} is outside MIDI's 0..127")
        on, off = int(round(note.start * STEPS_PER_SECOND)), int(round(note.end * STEPS_PER_SECOND))
        if off <= on:  # shorter than a step: the step that starts before the onset (both within 10 ms)
            on = int(math.floor(note.start * STEPS_PER_SECOND))
            off = on + 1
        events.append((on, 1, note.pitch, note.velocity))
        events.append((off, 0, note.pitch, note.velocity))
    events.sort()
    tokens: list[int] = []
    now, velocity = 0, None
    for step, is_on, pitch, note_velocity in events:
        while step > now:
            shift = min(step - now, MAX_SHIFT)
            tokens.append(TIME_SHIFT + shift - 1)
            now += shift
        if is_on:
            bin_ = _velocity_bin(note_velocity)
            if bin_ != velocity:
                tokens.append(VELOCITY + bin_)
                velocity = bin_
            tokens.append(NOTE_ON + pitch)
        else:
            tokens.append(NOTE_OFF + pitch)
    return tokens


def decode_performance(tokens: Iterable[int]) -> list[Note]:
    """Performance-event token ids -> notes. Tolerant of what a model may generate: pad and
    start are skipped, end stops, a NOTE_OFF without its note is ignored, a NOTE_ON of a
    sounding pitch ends it first, notes still sounding at the end end there (at least 10 ms)."""
    notes: list[Note] = []
    sounding: dict[int, tuple[int, int]] = {}  # pitch -> (onset step, velocity)
    now, velocity = 0, DEFAULT_VELOCITY

    def finish(pitch: int) -> None:
        onset, note_velocity = sounding.pop(pitch)
        notes.append(Note(pitch, onset / STEPS_PER_SECOND, max(now, onset + 1) / STEPS_PER_SECOND, note_velocity))

    for token in tokens:
        token = int(token)
        if token == END:
            break
        if token < NUM_SPECIAL or token >= PERFORMANCE_VOCAB_SIZE:
            continue
        if token < NOTE_OFF:
            pitch = token - NOTE_ON
            if pitch in sounding:
                finish(pitch)
            sounding[pitch] = (now, velocity)
        elif token < TIME_SHIFT:
            if token - NOTE_OFF in sounding:
                finish(token - NOTE_OFF)
        elif token < VELOCITY:
            now += token - TIME_SHIFT + 1
        else:
            velocity = 4 * (token - VELOCITY) + 2
    for pitch in sorted(sounding):
        finish(pitch)
    return sorted(notes, key=lambda n: (n.start, n.pitch))


def describe_event(token: int) -> str:
    """A readable name of a performance token, e.g. ``NOTE_ON(60)``, ``TIME_SHIFT(250ms)``."""
    if token < NUM_SPECIAL:
        return ("PAD", "START", "END")[token]
    if token < NOTE_OFF:
        return f"NOTE_ON({token - NOTE_ON})"
    if token < TIME_SHIFT:
        return f"NOTE_OFF({token - NOTE_OFF})"
    if token < VELOCITY:
        return f"TIME_SHIFT({(token - TIME_SHIFT + 1) * 10}ms)"
    if token < PERFORMANCE_VOCAB_SIZE:
        return f"VELOCITY({token - VELOCITY})"
    raise ValueError(f"token {token} is outside the performance vocabulary [0, {PERFORMANCE_VOCAB_SIZE})")


def augment_notes(notes: Sequence[Note], *, transpose: int = 0, stretch: float = 1.0) -> list[Note]:
    """Notes transposed by ``transpose`` semitones (|t| <= 3) and with every time multiplied
    by ``stretch`` (0.95 .. 1.05), Huang et al. §4; notes pushed outside 0..127 are dropped."""
    if not -3 <= transpose <= 3:
        raise ValueError(f"transpose={transpose} must be within ±3 semitones")
    if not 0.95 <= stretch <= 1.05:
        raise ValueError(f"stretch={stretch} must be within 5% of 1 (0.95 .. 1.05)")
    return [Note(n.pitch + transpose, n.start * stretch, n.end * stretch, n.velocity) for n in notes
            if 0 <= n.pitch + transpose < 128]


# -- JSB Chorales ------------------------------------------------------------------------
def serialize_chorale(grid: np.ndarray) -> list[int]:
    """``(T, 4)`` MIDI pitches (soprano, alto, tenor, bass; NaN = rest) -> ``4T`` tokens,
    time step by time step (S1 A1 T1 B1 S2 ...)."""
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 2 or grid.shape[1] != 4:
        raise ValueError(f"a chorale is a (T, 4) grid of pitches, got shape {grid.shape}")
    flat = grid.reshape(-1)
    rest = np.isnan(flat)
    pitches = np.where(rest, 0, flat)
    if not (np.all(pitches == np.round(pitches)) and np.all((pitches >= 0) & (pitches < 128))):
        raise ValueError("chorale pitches must be whole MIDI numbers in 0..127 (NaN for a rest)")
    return np.where(rest, JSB_REST, JSB_PITCH + pitches.astype(np.int64)).tolist()


def deserialize_chorale(tokens: Sequence[int]) -> np.ndarray:
    """Inverse of :func:`serialize_chorale` (start/end/pad are dropped; a trailing incomplete
    time step is dropped) -> ``(T, 4)`` float32 with NaN rests."""
    values = [t for t in tokens if t >= JSB_REST]
    if any(t >= JSB_VOCAB_SIZE for t in values):
        raise ValueError(f"token outside the JSB vocabulary [0, {JSB_VOCAB_SIZE})")
    values = values[:len(values) // 4 * 4]
    flat = np.array([np.nan if t == JSB_REST else t - JSB_PITCH for t in values], dtype=np.float32)
    return flat.reshape(-1, 4)


def chorale_to_notes(grid: np.ndarray, *, step_seconds: float = JSB_STEP_SECONDS, velocity: int = 80) -> list[Note]:
    """A ``(T, 4)`` grid as notes: a voice holding the same pitch on consecutive steps is one
    note (the grid does not mark re-articulation, as in Coconet's data)."""
    notes = []
    grid = np.asarray(grid, dtype=np.float64)
    for voice in range(grid.shape[1]):
        start = None
        for t in range(grid.shape[0] + 1):
            pitch = grid[t, voice] if t < grid.shape[0] else np.nan
            if start is not None and (np.isnan(pitch) or pitch != grid[start, voice]):
                notes.append(Note(int(grid[start, voice]), start * step_seconds, t * step_seconds, velocity))
                start = None
            if start is None and not np.isnan(pitch):
                start = t
    return sorted(notes, key=lambda n: (n.start, n.pitch))


JSB_FILE = Path("jsb_chorales") / "jsb16th_separated.npz"
JSB_SOURCE = ("github.com/czhuang/JSB-Chorales-dataset (Jsb16thSeparated.npz, Boulanger-Lewandowski's splits "
              "on a 16th-note grid), saved without pickles as jsb16th_separated.npz with arrays "
              "train_steps (N, 4), train_lengths, valid_steps, valid_lengths")


def jsb_path(data_dir: str | os.PathLike | None = None) -> Path:
    """Where the JSB Chorales file is read: ``DATA_DIR/jsb_chorales/jsb16th_separated.npz``
    (``data_dir`` default: ``$ATTNLAB_DATA``, else ``~/.cache/attnlab/data``)."""
    from attnlab.data.registry import data_root

    return Path(data_dir if data_dir is not None else data_root()) / JSB_FILE


def load_jsb_chorales(split: str, data_dir: str | os.PathLike | None = None) -> list[np.ndarray]:
    """The chorales of ``split`` ("train" or "valid") as ``(T, 4)`` float32 grids (NaN = rest)."""
    if split not in ("train", "valid"):
        raise ValueError(f"JSB Chorales split {split!r}: choose train or valid (the test split is not used here)")
    path = jsb_path(data_dir)
    if not path.is_file():
        raise DataUnavailable(f"JSB Chorales not found at {path}: `attnlab data get jsb` downloads the published "
                              f"file and converts it ({JSB_SOURCE}; `--from FILE` converts a copy you have), "
                              "or point ATTNLAB_DATA / --data-dir at the directory that holds jsb_chorales/")
    try:
        with np.load(path, allow_pickle=False) as archive:
            steps, lengths = archive[f"{split}_steps"], archive[f"{split}_lengths"]
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as error:  # EOFError: an empty file
        raise MusicFileError(f"{path}: not a readable JSB Chorales archive ({error})") from None
    if steps.ndim != 2 or steps.shape[1] != 4 or lengths.ndim != 1 or int(lengths.sum()) != steps.shape[0]:
        raise MusicFileError(f"{path}: {split}_steps {steps.shape} and {split}_lengths (sum "
                             f"{int(lengths.sum())}) do not fit together")
    return [chorale.astype(np.float32) for chorale in np.split(steps, np.cumsum(lengths)[:-1])]


JSB_MAX_MEMBER_BYTES = 64 << 20  # the published arrays hold 0.75 MB; refuse anything far larger unread


def convert_published_jsb(source: str | os.PathLike) -> dict[str, np.ndarray]:
    """The published ``Jsb16thSeparated.npz`` (czhuang/JSB-Chorales-dataset, Coconet's format)
    as the arrays :func:`load_jsb_chorales` reads: ``{split}_steps`` ``(N, 4)`` float32 (NaN =
    rest) and ``{split}_lengths`` int64, for train and valid (the test split is left out, as
    everywhere in attnlab). That file stores each split as an object array of float16
    ``(T, 4)`` arrays, i.e. a pickle: it is read with an unpickler that builds numpy arrays
    and nothing else (never ``allow_pickle=True``), after checking each member's size.
    Raises :class:`MusicFileError` naming the file when it is not that archive."""
    from attnlab.data.images import _ArraysOnly

    path = Path(source)
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for split in ("train", "valid"):
                member = archive.getinfo(f"{split}.npy")
                if member.file_size > JSB_MAX_MEMBER_BYTES:
                    raise ValueError(f"{split}.npy unpacks to {member.file_size:,} bytes (at most "
                                     f"{JSB_MAX_MEMBER_BYTES:,} expected)")
                with archive.open(member) as handle:
                    version = np.lib.format.read_magic(handle)
                    if version not in ((1, 0), (2, 0)):
                        raise ValueError(f"{split}.npy is .npy format {version}, not 1.0 or 2.0")
                    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                        np.lib.format.read_array_header_2_0
                    shape, _, dtype = read_header(handle)
                    if not dtype.hasobject or len(shape) != 1:
                        raise ValueError(f"{split}.npy holds {dtype} {shape}, not a list of chorales")
                    chorales = _ArraysOnly(io.BytesIO(handle.read()), encoding="latin1").load()
                if not isinstance(chorales, np.ndarray) or chorales.shape != shape:
                    raise ValueError(f"{split}.npy: the pickle does not hold the {shape} array its header names")
                grids = [np.asarray(grid, dtype=np.float32) for grid in chorales]
                for index, grid in enumerate(grids):
                    if not isinstance(chorales[index], np.ndarray) or grid.ndim != 2 or grid.shape[1] != 4:
                        raise ValueError(f"{split} chorale {index} is not a (T, 4) grid of pitches")
                    serialize_chorale(grid)  # whole MIDI pitches 0..127 or NaN, else ValueError
                arrays[f"{split}_steps"] = np.concatenate(grids) if grids else np.zeros((0, 4), np.float32)
                arrays[f"{split}_lengths"] = np.array([len(grid) for grid in grids], dtype=np.int64)
    except (OSError, EOFError, KeyError, ValueError, TypeError, IndexError, pickle.UnpicklingError,
            zipfile.BadZipFile) as error:
        raise MusicFileError(f"{path}: not the published Jsb16thSeparated.npz ({error})") from None
    return arrays


def write_jsb(arrays: dict[str, np.ndarray], path: str | os.PathLike) -> Path:
    """Write :func:`convert_published_jsb`'s arrays as the pickle-free archive attnlab reads
    (``np.savez_compressed``, atomically)."""
    from attnlab.files import atomic_write

    def save(temporary: str) -> None:
        with open(temporary, "wb") as handle:
            np.savez_compressed(handle, **arrays)

    return atomic_write(path, save)


# -- performance sources -----------------------------------------------------------------
def load_midi_folder(folder: str | os.PathLike, *, sustain: bool = True) -> list[tuple[str, list[Note]]]:
    """Every ``.mid``/``.midi`` file under ``folder`` (sorted), as ``(path, notes)``.
    A file that is not valid MIDI raises :class:`MusicFileError` naming it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MusicFileError(f"{folder}: not a directory of MIDI files")
    paths = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".mid", ".midi") and p.is_file())
    if not paths:
        raise MusicFileError(f"{folder}: no .mid or .midi files in it")
    pieces = [(str(p), read_midi_notes(p, sustain=sustain)) for p in paths]
    return [(name, notes) for name, notes in pieces if notes]


def _notes_to_json(pieces: list[tuple[str, list[Note]]]) -> str:
    return json.dumps([[name, [[n.pitch, n.start, n.end, n.velocity] for n in notes]] for name, notes in pieces])


def _notes_from_json(text: str) -> list[tuple[str, list[Note]]]:
    return [(name, [Note(int(p), float(s), float(e), int(v)) for p, s, e, v in notes]) for name, notes in
            json.loads(text)]


def load_bach_chorales(cache_dir: str | os.PathLike | None = None, *, limit: int | None = None,
                       progress: bool = False) -> list[tuple[str, list[Note]]]:
    """music21's Bach chorales as notes (``(name, notes)``), parsed once and cached as JSON
    under ``cache_dir`` (default: the data root's ``music21_cache/``).

    music21 is optional (``pip install music21``, about 67 MB); without it this raises
    :class:`DataUnavailable` saying so. Each score is written as MIDI by music21 and read
    back with :func:`notes_from_midi_bytes`.
    """
    from attnlab.data.registry import data_root
    from attnlab.files import atomic_write_bytes

    try:
        import music21
    except ImportError:
        raise DataUnavailable("the Bach chorales come from music21's corpus, which is not installed: "
                              "pip install music21 (about 67 MB), or train on a folder of .mid files") from None
    cache_dir = Path(cache_dir) if cache_dir is not None else data_root() / "music21_cache"
    key = hashlib.sha256(f"bach-chorales {music21.__version__} {limit}".encode()).hexdigest()[:16]
    cache = cache_dir / f"bach_chorales_{key}.json"
    if cache.is_file():
        return _notes_from_json(cache.read_text(encoding="utf-8"))
    from tqdm import tqdm

    pieces, skipped = [], []
    scores = music21.corpus.chorales.Iterator(returnType="filename")
    names = list(scores)[:limit] if limit else list(scores)
    for name in tqdm(names, desc="parsing Bach chorales (music21, cached afterwards)", disable=not progress):
        try:
            score = music21.corpus.parse(name)
            data = io.BytesIO()
            midi_file = music21.midi.translate.music21ObjectToMidiFile(score)
            data.write(midi_file.writestr())
            notes = notes_from_midi_bytes(data.getvalue(), f"music21 corpus {name}")
        except (music21.exceptions21.Music21Exception, ValueError) as error:
            # A few corpus files have repeats music21 cannot expand: skip them, counted.
            skipped.append(f"{name} ({type(error).__name__})")
            continue
        if notes:
            pieces.append((str(name), notes))
    if skipped:
        print(f"attnlab: skipped {len(skipped)} of {len(names)} Bach chorales that music21 could not turn into MIDI: "
              + ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else ""), file=sys.stderr)
    cache_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(cache, _notes_to_json(pieces).encode())
    return pieces


def seconds(notes: Sequence[Note]) -> float:
    """Duration of a piece (the last offset), 0 for none."""
    return max((n.end for n in notes), default=0.0)


def describe_notes(notes: Sequence[Note]) -> str:
    return f"{len(notes)} notes, {seconds(notes):.1f} s" + (
        f", pitches {min(n.pitch for n in notes)}..{max(n.pitch for n in notes)}" if notes else "")
