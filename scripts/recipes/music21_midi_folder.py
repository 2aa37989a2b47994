"""A MIDI folder from music21's corpus, for `attnlab train music --data FOLDER`.

    python scripts/recipes/music21_midi_folder.py palestrina 100 runs/palestrina-midi

Writes the first N pieces (sorted by corpus path) of one composer or collection of music21's
core corpus (`pip install music21`; `bach`, `palestrina`, `monteverdi`, `ryansMammoth`, ...) as
MIDI files, one per piece (a multi-movement opus: its first movement), skipping what music21
cannot parse or write (said on stderr). Parsing is slow (0.2-2 s a piece).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path


def main(collection: str, count: int, out: str) -> None:
    from music21 import corpus

    paths = sorted(p for p in corpus.getCorePaths() if collection in Path(p).parts)
    if not paths:
        raise SystemExit(f"music21_midi_folder.py: no piece of {collection!r} in music21's corpus")
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    written = 0
    for path in paths:
        if written == count:
            break
        name = target / f"{Path(path).stem}.mid"
        if name.exists():
            written += 1
            continue
        try:
            score = corpus.parse(path)
            if hasattr(score, "scores"):  # an opus: its first piece
                score = score.scores[0]
            partial = name.with_name(f".{name.name}.tmp")  # a kill leaves no half file under the real name
            score.write("midi", fp=str(partial))
            os.replace(partial, name)
            written += 1
        except Exception as error:  # noqa: BLE001 - a corpus file music21 cannot handle is skipped
            print(f"skipped {path}: {type(error).__name__}: {error}", file=sys.stderr)
    print(f"{written} MIDI files in {target}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
