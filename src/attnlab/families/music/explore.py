"""The Music Transformer in the explorer: causal self-attention over a primer and,
with ``generate=N``, the N events it continues with (greedy, stopping at END).

The primer (``analyse``'s text) is one of:

* token ids, e.g. ``60 64 67`` or ``[60, 64, 67]`` (``[START]`` is put in front);
* ``example:N`` — the N-th MIDI file of the repository's ``examples/midi`` (performance models);
* ``jsb-valid:N`` — the first 16 steps of JSB validation chorale N (JSB models; the data
  the model's ``music.json`` records, else ``$ATTNLAB_DATA``);
* ``start`` — the ``[START]`` token alone (with ``generate``: what the model plays unprompted);
* a MIDI file path, only where the caller reads local files (``files=True``: ``attnlab
  explore --html``), never in the served page.

Tokens are named by the encoding's vocabulary: performance events as
:func:`attnlab.data.music.describe_event` (``NOTE_ON(60)``, ``TIME_SHIFT(250ms)``), JSB
tokens as step, voice and pitch (``3 S C5 (72)``, ``3 A rest``).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from attnlab.viz.explorer.inputs import EXAMPLES
from attnlab.viz.explorer.maps import Analysis, AttentionGroup, attention_maps

__all__ = ["MusicSource", "token_labels", "load_source"]

NAMES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
MAX_GENERATE = 256
_IDS = re.compile(r"^\[?\s*\d+(\s*[,\s]\s*\d+)*\s*\]?$")


def pitch_name(pitch: int) -> str:
    return f"{NAMES[pitch % 12]}{pitch // 12 - 1}"


def token_labels(encoding: str, tokens: list[int]) -> list[str]:
    """A readable name per token of a prompt (``[START]`` first) and its continuation."""
    from attnlab.data import music

    labels = []
    voice = 0  # JSB: position within the current time step (soprano, alto, tenor, bass)
    for token in tokens:
        if token < music.NUM_SPECIAL:
            labels.append(("PAD", "START", "END")[token])
        elif encoding == "performance":
            labels.append(music.describe_event(token))
        else:
            step, part = divmod(voice, 4)
            name = "rest" if token == music.JSB_REST else f"{pitch_name(token - music.JSB_PITCH)} ({token - music.JSB_PITCH})"
            labels.append(f"{step} {music.JSB_VOICES[part][0].upper()} {name}")
            voice += 1
    return labels


def example_midi() -> list[Path]:
    folder = EXAMPLES / "midi"
    return sorted(folder.glob("*.mid")) if folder.is_dir() else []


class MusicSource:
    """A Music Transformer: causal self-attention over the primer's tokens (and the ones it generates)."""

    family = "music_transformer"
    generates = True

    def __init__(self, pipeline, *, max_tokens: int = 1024):
        self.pipeline = pipeline
        c = pipeline.model.config
        self.encoding = c.encoding
        self.max_tokens = min(max_tokens, c.max_positions)
        self.description = (f"Music Transformer ({c.encoding} events): {c.num_layers} layers x {c.num_heads} heads, "
                            f"d_model={c.d_model}")
        self.default_text = self._default()

    def choose_default(self, directory) -> None:
        """The default primer (issue 39, point 4): ``jsb-valid:0``, the model's own first
        held-out chorale, for a model trained on JSB whose data is at hand (music.json); else
        the shipped one, with a note saying it is not from the model's data."""
        from attnlab.families.music.task import MUSIC_FILE, recorded_data
        from attnlab.viz.explorer.maps import note_default

        try:
            data = recorded_data(directory).get("data")
            if data != "jsb":
                raise ValueError(f"{Path(directory) / MUSIC_FILE} records {data or 'no data'}; the served page "
                                 "reads no MIDI files" if data else f"its directory has no {MUSIC_FILE}")
            self.prompt("jsb-valid:0")  # the data is at hand and fits the model
        except (ValueError, OSError) as error:
            note_default(self, f"default primer: {self.default_text!r}, not from this model's data ({error})")
        else:
            self.default_text = "jsb-valid:0"
            note_default(self, "default primer: jsb-valid:0, the first of the model's own held-out JSB chorales")

    @property
    def hint(self) -> str:
        """What the served page's text box takes."""
        named = "example:N (examples/midi)" if self.encoding == "performance" else "jsb-valid:N (JSB chorales)"
        return f"a primer: token ids (e.g. 60 64 67), {named}, or start"

    def _default(self) -> str:
        if self.encoding == "performance" and example_midi():
            return "example:0"
        if self.encoding == "jsb":
            # a C major chord held for two steps (soprano, alto, tenor, bass), as token ids
            from attnlab.data.music import JSB_PITCH

            return " ".join(str(JSB_PITCH + p) for p in (72, 67, 64, 48) * 2)
        return "start"

    def _data_dir(self) -> str | None:
        from attnlab.families.music.task import recorded_data

        directory = self.pipeline.directory
        return None if directory is None else recorded_data(directory).get("data_dir")

    def prompt(self, text: str, *, files: bool = False, room: int = 0) -> list[int]:
        """The prompt ``[START] + tokens`` that ``text`` names (see the module docstring),
        leaving ``room`` positions of the model's context free."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("give a primer: token ids, example:N, jsb-valid:N or start")
        text = text.strip()
        pipeline, keep = self.pipeline, self.max_tokens - 1 - room
        if text.lower() == "start":
            return pipeline.prompt(None)
        if _IDS.match(text):
            tokens = pipeline.prompt([int(t) for t in re.findall(r"\d+", text)])
        elif text.startswith("jsb-valid:"):
            tokens = pipeline.prompt(text, data_dir=self._data_dir())
        elif text.startswith("example:"):
            examples = example_midi()
            if self.encoding != "performance":
                raise ValueError(f"{text}: the MIDI examples prime a performance-event model; this one is "
                                 f"{self.encoding} (give jsb-valid:N or token ids)")
            index = text.split(":", 1)[1].strip()
            if not examples:
                raise ValueError(f"{text}: this installation has no examples/midi; give token ids")
            if not (index.isascii() and index.isdigit()) or int(index) >= len(examples):
                raise ValueError(f"{text}: give example:N with N in 0..{len(examples) - 1} "
                                 f"({', '.join(p.name for p in examples)})")
            tokens = pipeline.prompt(str(examples[int(index)]), primer_tokens=max(1, keep))
        elif files:
            if not Path(text).is_file():
                raise ValueError(f"{text}: no such MIDI file (or give token ids, example:N, jsb-valid:N or start)")
            tokens = pipeline.prompt(text, primer_tokens=max(1, keep))
        else:
            raise ValueError(f"{text[:80]!r}: give token ids (e.g. 60 64 67), example:N, jsb-valid:N or start "
                             "(the served explorer reads no files)")
        if len(tokens) + room > self.max_tokens:
            raise ValueError(f"the primer has {len(tokens)} tokens (with START) and the explorer shows at most "
                             f"{self.max_tokens}" + (f", {room} of them generated" if room else ""))
        return tokens

    def generated_limit(self, text: str) -> int:
        """How many tokens may be generated after ``text`` within the shown context."""
        return max(0, self.max_tokens - len(self.prompt(text, files=True)))

    def analyse(self, text: str, *, generate: int = 0, files: bool = False, **options) -> Analysis:
        if not isinstance(generate, int) or isinstance(generate, bool) or not 0 <= generate <= MAX_GENERATE:
            raise ValueError(f"generate={generate!r}: give a number of tokens from 0 to {MAX_GENERATE}")
        prompt = self.prompt(text, files=files, room=generate)
        return self.analyse_tokens(prompt, generate, shown=text.strip())

    def analyse_tokens(self, prompt: list[int], generate: int = 0, shown: str = "primer") -> Analysis:
        """The analysis of a prompt of token ids (``[START]`` first) and ``generate`` greedy tokens after it."""
        from attnlab.data.music import END
        from attnlab.generation import generate as generate_tokens

        model = self.pipeline.model
        new = generate_tokens(model, [prompt], max_new_tokens=generate, greedy=True, stop_ids=[END])[0] \
            if generate else []
        everything = prompt + new
        maps = attention_maps(model, ids=torch.tensor([everything], device=self.pipeline.device))
        labels = token_labels(self.encoding, everything)
        output = None
        if generate:
            output = " ".join(labels[len(prompt):]) or "(nothing: END at once)"
        return Analysis(shown, [AttentionGroup("self", maps["self"], labels, labels)], output=output)


def load_source(directory: Path, device: str) -> MusicSource:
    from attnlab.pipelines import load  # the family's pipeline, through the registry (no import cycle)

    source = MusicSource(load(directory, device=device))
    source.choose_default(directory)
    return source
