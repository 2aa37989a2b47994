"""The music family's pipeline (``attnlab.load``): continue a primer, as ``attnlab generate-music``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from attnlab.pipelines.base import Pipeline, attention_groups, check_int, check_sampling, check_seed

__all__ = ["MusicPipeline", "MusicContinuation"]


@dataclass(frozen=True)
class MusicContinuation:
    """What :meth:`MusicPipeline.continue_music` produced: the prompt (``[START]`` + the
    primer's tokens) and the new ``tokens`` after it (an END token ends them), in the
    model's ``encoding`` ("performance" events or "jsb" voices)."""

    encoding: str
    primer: list[int]
    tokens: list[int]

    @property
    def notes(self):
        """Primer and continuation as :class:`attnlab.data.music.Note` s."""
        from attnlab.families.music.task import tokens_to_notes

        return tokens_to_notes(self.encoding, self.primer + self.tokens)

    def write_midi(self, path: str | os.PathLike) -> Path:
        """Write primer and continuation as a MIDI file (atomically); returns the path."""
        from attnlab.data.music import write_midi

        return write_midi(self.notes, path)


class MusicPipeline(Pipeline):
    """A Music Transformer (:func:`attnlab.families.music.task.load_music_model`)."""

    family = "music_transformer"

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> MusicPipeline:
        from attnlab.families.music.task import load_music_model

        return cls(load_music_model(directory, device=device), directory)

    @property
    def encoding(self) -> str:
        return self.model.config.encoding

    def prompt(self, primer=None, *, data_dir: str | os.PathLike | None = None, primer_steps: int = 16,
               primer_tokens: int | None = 512) -> list[int]:
        """The prompt ``[START] + tokens`` of ``primer``: None (start from nothing), a MIDI
        file path (performance models; its last ``primer_tokens`` events), ``"jsb-valid:N"``
        (JSB models: the first ``primer_steps`` steps of validation chorale N, read from
        ``data_dir`` or ``$ATTNLAB_DATA``), or a list of the model's token ids (``[START]`` is
        put in front unless it is there)."""
        from attnlab.data.music import START
        from attnlab.families.music.task import primer_tokens as read_primer

        if isinstance(primer, (list, tuple)) or (isinstance(primer, Tensor) and primer.dim() == 1):
            values = primer.tolist() if isinstance(primer, Tensor) else list(primer)
            if any(isinstance(t, bool) or not isinstance(t, int) for t in values):
                raise TypeError("primer: token ids must be whole numbers")
            tokens = values
            if not tokens:
                raise ValueError("primer: an empty list of token ids; give None to start from nothing")
            vocab = self.model.config.vocab_size
            bad = [t for t in tokens if not 0 <= t < vocab]
            if bad:
                raise ValueError(f"primer: token ids {bad[:5]} are outside the model's vocabulary [0, {vocab})")
            return tokens if tokens[:1] == [START] else [START] + tokens
        if primer is not None and not isinstance(primer, (str, os.PathLike)):
            raise TypeError(f"primer: expected None, a MIDI path, 'jsb-valid:N' or a list of token ids, got "
                            f"{type(primer).__name__}")
        if isinstance(primer, os.PathLike) or (isinstance(primer, str) and not primer.startswith("jsb-valid:")):
            if not Path(primer).is_file():
                raise ValueError(f"primer {str(primer)!r}: no such MIDI file (or give 'jsb-valid:N' or token ids)")
        check_int(primer_steps, "primer_steps")
        if primer_tokens is not None:
            check_int(primer_tokens, "primer_tokens")
        return read_primer(self.encoding, None if primer is None else str(primer), data_dir=data_dir,
                           primer_steps=primer_steps, max_tokens=primer_tokens)

    def continue_music(self, primer=None, steps: int = 512, *, temperature: float = 1.0, top_k: int | None = None,
                       top_p: float | None = None, seed: int | None = None, data_dir=None, primer_steps: int = 16,
                       primer_tokens: int | None = 512) -> MusicContinuation:
        """Up to ``steps`` new tokens after ``primer`` (see :meth:`prompt`), sampled as
        ``attnlab generate-music`` does (prefill + cached steps, stopping at END);
        ``.write_midi(path)`` on the result writes primer and continuation."""
        from attnlab.data.music import END
        from attnlab.generation import generate

        check_int(steps, "steps")
        check_sampling(temperature, top_k, greedy_allowed=False, top_p=top_p)
        check_seed(seed, optional=True)
        prompt = self.prompt(primer, data_dir=data_dir, primer_steps=primer_steps, primer_tokens=primer_tokens)
        limit = self.model.config.max_positions
        if len(prompt) + steps > limit:
            raise ValueError(f"primer ({len(prompt)} tokens) + steps={steps} exceeds the model's max_positions={limit}")
        new = generate(self.model, [prompt], max_new_tokens=steps, temperature=temperature, top_k=top_k, top_p=top_p,
                       seed=seed, stop_ids=[END])[0]
        return MusicContinuation(self.encoding, prompt, new)

    def save_parts(self, directory: Path) -> None:
        """``music.json`` (where its training data was), from the directory it came from."""
        from attnlab.families.music.task import MUSIC_FILE

        self.copy_records(directory, MUSIC_FILE)

    def attention(self, primer=None, **options) -> dict[str, Tensor]:
        """``{"self": (layers, heads, L, L)}`` over the prompt of ``primer`` (see :meth:`prompt`;
        ``options`` go to it), as the explorer shows it."""
        from attnlab.families.music.explore import MusicSource

        prompt = self.prompt(primer, **options)
        limit = self.model.config.max_positions
        if len(prompt) > limit:
            raise ValueError(f"primer: {len(prompt)} tokens; the model's context holds {limit}")
        return attention_groups(MusicSource(self).analyse_tokens(prompt))
