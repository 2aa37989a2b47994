"""Write Multi30k's English captions (shipped inside attnlab) as plain text for `attnlab train lm`.

    python scripts/recipes/multi30k_captions_text.py OUTDIR
    -> OUTDIR/captions_train.txt (29,000 captions of the train split, one a line)
       OUTDIR/captions_val.txt   (1,014 captions of the val split: held out)

Used by scripts/recipes/finetune_lm.sh. Existing files are not replaced.
"""
import sys
from pathlib import Path

from attnlab.data import get_parallel_dataset


def main(out: str) -> None:
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    for split, name in (("train", "captions_train.txt"), ("valid", "captions_val.txt")):
        path = directory / name
        if path.exists():
            print(f"{path} exists: kept")
            continue
        pairs = get_parallel_dataset("multi30k", split, "de", "en").pairs
        text = "".join(english.strip() + "\n" for _, english in pairs)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        print(f"{path}: {len(pairs):,} captions, {len(text):,} characters")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/recipes/multi30k_captions_text.py OUTDIR")
    main(sys.argv[1])
