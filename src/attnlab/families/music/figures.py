"""Music as pictures and sound: a piano-roll PNG, and a WAV through FluidSynth when installed.

Matplotlib's Agg canvas directly (no pyplot, no display). The WAV is optional: it needs the
``fluidsynth`` program and a General MIDI soundfont (Debian/Ubuntu: ``apt-get install
fluidsynth fluid-soundfont-gm``; ``$ATTNLAB_SOUNDFONT`` names another ``.sf2``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from attnlab.files import atomic_write

__all__ = ["piano_roll_png", "find_synthesizer", "render_wav", "SYNTH_HINT"]

SOUNDFONTS = ("/usr/share/sounds/sf2/FluidR3_GM.sf2", "/usr/share/sounds/sf2/default-GM.sf2",
              "/usr/share/soundfonts/FluidR3_GM.sf2", "/usr/share/soundfonts/default.sf2")
SYNTH_HINT = ("no WAV: FluidSynth and a General MIDI soundfont are needed (Debian/Ubuntu: sudo apt-get install "
              "fluidsynth fluid-soundfont-gm; macOS: brew install fluid-synth and set ATTNLAB_SOUNDFONT to an .sf2)")


def piano_roll_png(notes: Sequence, path: str | os.PathLike, *, title: str = "", primer_seconds: float | None = None,
                   dpi: int = 110) -> Path:
    """Draw notes (``pitch``, ``start``, ``end``, ``velocity``) as a piano roll, atomically
    written to ``path``; a dashed line marks where a primer ends."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure


    figure = Figure(figsize=(12, 4.5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    end = max((n.end for n in notes), default=1.0)
    for note in notes:
        shade = 0.25 + 0.75 * note.velocity / 127
        axes.broken_barh([(note.start, note.end - note.start)], (note.pitch - 0.4, 0.8),
                         facecolors=(0.1, 0.3 * shade, 0.8 * shade))
    if primer_seconds:
        axes.axvline(primer_seconds, color="crimson", linestyle="--", linewidth=1, label="end of primer")
        axes.legend(loc="upper right")
    pitches = [n.pitch for n in notes] or [60]
    axes.set_ylim(min(pitches) - 2, max(pitches) + 2)
    axes.set_xlim(0, end)
    axes.set_xlabel("time (s)")
    axes.set_ylabel("MIDI pitch")
    axes.set_title(title or f"{len(notes)} notes, {end:.1f} s")
    figure.tight_layout()
    path = Path(path)
    atomic_write(path, lambda tmp: figure.savefig(tmp, dpi=dpi, format="png"))
    return path


def find_synthesizer() -> tuple[str, str] | None:
    """``(fluidsynth program, soundfont)``, or None when either is missing."""
    program = shutil.which("fluidsynth")
    candidates = [os.environ["ATTNLAB_SOUNDFONT"]] if os.environ.get("ATTNLAB_SOUNDFONT") else list(SOUNDFONTS)
    soundfont = next((c for c in candidates if Path(c).is_file()), None)
    return (program, soundfont) if program and soundfont else None


def render_wav(midi_path: str | os.PathLike, wav_path: str | os.PathLike, *, sample_rate: int = 44100,
               timeout: float = 600.0) -> Path:
    """Synthesize a MIDI file to a WAV with FluidSynth (atomically). Raises RuntimeError
    with :data:`SYNTH_HINT` when no synthesizer is installed."""
    found = find_synthesizer()
    if found is None:
        raise RuntimeError(SYNTH_HINT)
    program, soundfont = found
    wav_path = Path(wav_path)

    def synthesize(tmp: str) -> None:
        # -T wav: the temporary name does not end in .wav, from which fluidsynth would guess it
        result = subprocess.run([program, "-ni", "-q", "-T", "wav", "-F", tmp, "-r", str(sample_rate), soundfont,
                                 str(midi_path)],
                                capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0 or Path(tmp).stat().st_size == 0:
            raise RuntimeError(f"fluidsynth failed on {midi_path}: {(result.stderr or result.stdout).strip()[-300:]}")

    atomic_write(wav_path, synthesize)
    return wav_path
