"""``attnlab train text-classification``: a BERT text classifier from a labelled file.

    attnlab train text-classification --train reviews.tsv --valid dev.tsv --init all-MiniLM-L6-v2/ --out runs/rev
    attnlab train text-classification --train pairs.jsonl --out runs/nli        # from scratch (bert_mini)

The labelled files are TSV, CSV (a header naming ``text``, ``label`` and, for text pairs,
``text_pair``) or JSON Lines (families/text_classification/data.py). The label set is the
training file's (sorted), stored in ``OUT/model/labels.json``; a validation label the
training file lacks is refused. Without ``--valid``, a seeded 10 % of the training rows is
held out. The model is BERT's sequence classifier (the pooled [CLS] -> dropout -> linear,
:class:`attnlab.models.bert.BertClassifier`): with ``--init DIR`` (any BERT: all-MiniLM-L6-v2,
a HuggingFace BERT, a ``train bert`` output) its layers and vocabulary, a new
classification head (and pooler, where DIR has none), said in one line; from scratch
``--preset`` with a WordPiece vocabulary learned from the training texts.

At the end the held-out rows are scored: accuracy, macro-F1, per-class precision and
recall, written with the confusion matrix to ``OUT/evaluation/`` (results.json,
confusion_matrix.png). ``attnlab evaluate --model OUT/model --data FILE`` scores any file.

The verb is its parts, in order: :func:`load_init` (``--init``), :func:`data`,
:func:`scratch_config`, :func:`adapt_after_init`, :func:`loss`, :func:`score`, called by
:class:`TextClassificationTask` on the training-run lifecycle (cli/training_run.py,
cli/bert_runs.py): ``--init``'s new head (and pooler) are its new parameters, trained in full
beside ``--lora R``'s adapters; ``--resume`` continues on the same data only.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.cli.bert_runs import BertTask
from attnlab.cli.training_run import add_training_arguments, run_training
from attnlab.tasks.bert import load_init  # the --init part: any BERT directory (tasks/bert.py)

HELP = "train a BERT text classifier (single texts or pairs) on a labelled TSV/CSV/JSONL file, from --init or scratch"

VALID_SHARE = 0.1
DATA_FILE = "text_classification.json"  # in OUT/model: the --train/--valid files and the seed of the held-out split


# -- the parts -------------------------------------------------------------------------
@dataclass
class ClassificationData:
    train: object  # LabelledTexts
    valid: object  # LabelledTexts (the --valid file, or the held-out rows of --train)
    labels: list[str]
    tokenizer: object
    tokenizer_files: dict
    batches: object  # LabelledBatches
    valid_batches: list
    max_length: int
    description: str = ""
    run_info: dict = field(default_factory=dict)
    record: dict = field(default_factory=dict)  # DATA_FILE: where the data came from

    @property
    def pairs(self) -> bool:
        return self.train.pairs is not None


def data(args, *, tokenizer=None, tokenizer_files=None, max_positions: int | None = None,
         labels: list[str] | None = None) -> ClassificationData:
    """The labelled files read and checked, the held-out rows, the vocabulary (``tokenizer``
    from --init or a checkpoint, else learned from the training texts) and the batches."""
    import hashlib
    import tempfile

    from attnlab.families.text_classification.data import check_label_sets, read_labelled
    from attnlab.families.text_classification.task import LabelledBatches
    from attnlab.tasks.bert import learn_wordpiece
    from attnlab.tasks.bert import tokenizer_files as files_of

    train = read_labelled(args.train, flag="--train")
    valid = read_labelled(args.valid, flag="--valid") if args.valid else None
    labels = check_label_sets(train, valid, labels=labels)
    if valid is None:  # a seeded share of the training rows is held out
        if len(train) < 2:
            raise ValueError(f"--train {args.train}: {len(train)} row; give more rows or a --valid file")
        train, valid = split_held_out(train, args.seed)
        valid_what = f"{len(valid):,d} rows of --train held out (seed {args.seed})"
    else:
        valid_what = f"--valid {args.valid}: {len(valid):,d} rows"
    max_length = args.max_length or min(128, max_positions or 128)
    if max_positions is not None and max_length > max_positions:
        raise ValueError(f"--max-length {max_length}: exceeds the model's max_positions={max_positions}")
    if tokenizer is None:
        with tempfile.TemporaryDirectory() as scratch:
            texts = train.texts + (train.pairs or [])
            tokenizer = learn_wordpiece(texts, scratch, vocab_size=args.vocab_size or 8000,
                                        lowercase=not args.cased, max_length=max_length)
            tokenizer_files = files_of(tokenizer)
    tokenizer.max_length = max_length
    tokenizer.tokenizer.enable_truncation(max_length)
    index = {label: i for i, label in enumerate(labels)}
    batches = LabelledBatches(train.texts, train.pairs, [index[label] for label in train.labels], tokenizer,
                              batch_size=args.batch_size, seed=args.seed)
    valid_source = LabelledBatches(valid.texts, valid.pairs, [index[label] for label in valid.labels], tokenizer,
                                   batch_size=args.batch_size, shuffle=False)
    valid_batches = list(valid_source)
    digest = lambda rows: hashlib.sha256(  # noqa: E731
        "\n".join(f"{t}\t{p}\t{lab}" for t, p, lab in zip(rows.texts, rows.pairs or [""] * len(rows),
                                                          rows.labels)).encode()).hexdigest()
    description = (f"data: {len(train):,d} training {'pairs' if train.pairs else 'texts'} from --train {args.train}; "
                   f"{valid_what}; {len(labels)} labels ({', '.join(labels[:10])}{', ...' if len(labels) > 10 else ''})"
                   f"; WordPiece vocabulary of {tokenizer.vocab_size:,d}, inputs of up to {max_length} tokens")
    run_info = {"train": digest(train), "valid": digest(valid), "labels": labels, "max_length": max_length,
                "vocab_size": args.vocab_size, "preset": args.preset, "set": args.set}
    record = {"train": str(Path(args.train).resolve()), "valid": str(Path(args.valid).resolve()) if args.valid else None,
              "seed": args.seed, "valid_share": VALID_SHARE}
    return ClassificationData(train, valid, labels, tokenizer, tokenizer_files, batches, valid_batches, max_length,
                              description, run_info, record)


def split_held_out(rows, seed: int):
    """``(kept, held)``: the seeded ``VALID_SHARE`` of ``rows`` (LabelledTexts) held out, as
    training without ``--valid`` does and ``evaluate`` repeats from ``DATA_FILE``."""
    import torch

    from attnlab.families.text_classification.data import LabelledTexts

    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed)).tolist()
    count = max(1, int(len(rows) * VALID_SHARE))
    held, kept = sorted(order[:count]), sorted(order[count:])
    pick = lambda chosen: LabelledTexts(  # noqa: E731
        rows.path, [rows.texts[i] for i in chosen], None if rows.pairs is None else [rows.pairs[i] for i in chosen],
        [rows.labels[i] for i in chosen], [rows.lines[i] for i in chosen])
    return pick(kept), pick(held)


def own_held_out(directory):
    """The held-out rows a model directory's ``DATA_FILE`` names (its ``--valid`` file, or the
    seeded share of its ``--train`` file), with a line saying what they are; None without the file."""
    from attnlab.families.text_classification.data import read_labelled
    from attnlab.files import check_recorded_files, read_data_record

    found = read_data_record(directory, DATA_FILE, what="a record of training data")
    if found is None:
        return None
    path, record = found
    if not isinstance(record.get("train"), str):
        raise ValueError(f"{path}: not a record of training data (no 'train' file)")
    for key in ("train", "valid"):
        if record.get(key) is not None:
            check_recorded_files(path, [str(record[key])], what=f"--{key} file", instead="give the file to score with --data")
    if record.get("valid"):
        rows = read_labelled(record["valid"], flag=f"{DATA_FILE}'s valid")
        return rows, f"the model's own held-out data (--valid {record['valid']}, from {DATA_FILE})"
    seed = record.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"{path}: 'seed' must be a whole number")
    _, held = split_held_out(read_labelled(record["train"], flag=f"{DATA_FILE}'s train"), seed)
    return held, (f"the model's own held-out data ({len(held):,d} rows of --train {record['train']} held out, seed "
                  f"{seed}, from {DATA_FILE})")


def scratch_config(args, data: ClassificationData):
    """From scratch: a classifier of ``--preset`` with the learned vocabulary and
    ``max_positions`` = ``--max-length``."""
    from attnlab.cli.bert_runs import scratch_config
    from attnlab.models.bert import BertClassifierConfig

    return BertClassifierConfig.of_encoder(scratch_config(args, data.tokenizer, data.max_length), len(data.labels))


def adapt_after_init(model, args, data: ClassificationData):
    """``(classifier, note)``: ``--init``'s encoder with a new classification head of the
    label set (and a new pooler where it had none); a classifier with the same labels keeps
    its head."""
    import torch

    from attnlab.models.bert import BertClassifier, BertClassifierConfig

    torch.manual_seed(args.seed)  # the new head's initial weights
    classifier = BertClassifier(BertClassifierConfig.of_encoder(model.config, len(data.labels)))
    weights = {name: value for name, value in model.state_dict().items() if not name.startswith("mlm_")}
    keeps_head = isinstance(model, BertClassifier) and model.config.num_labels == len(data.labels)
    if not keeps_head:
        weights = {name: value for name, value in weights.items() if not name.startswith("classifier.")}
    missing, unexpected = classifier.load_state_dict(weights, strict=False)
    assert not unexpected, unexpected
    new = []
    if any(name.startswith("pooler") for name in missing):
        new.append("a new pooler (the directory has none)")
    if any(name.startswith("classifier") for name in missing):
        new.append(f"a new classification head of {len(data.labels)} labels")
    note = ("adds " + " and ".join(new) if new else "keeps its classification head (the same number of labels)")
    return classifier.to(next(model.parameters()).device), note


def loss(model, batch):
    from attnlab.families.text_classification.task import classification_loss

    return classification_loss(model, batch)


def score(model, data: ClassificationData, *, budget=None, progress: bool = True, batch_size: int = 64):
    """The held-out rows scored within ``budget``: ``(scores, confusion, Scoring)``."""
    import torch

    from attnlab.evaluation.classification import classification_scores
    from attnlab.families.text_classification.task import evaluate
    from attnlab.training.phases import Scoring

    scoring = Scoring("held-out accuracy", len(data.valid), unit="text", batch_size=batch_size, budget=budget,
                      progress=progress)
    confusion = torch.zeros(len(data.labels), len(data.labels), dtype=torch.long)
    for index in scoring:
        confusion += evaluate(model, data.tokenizer, data.valid, data.labels, rows=index.tolist(),
                              batch_size=batch_size)[1]
    return classification_scores(confusion, data.labels), confusion, scoring


# -- the verb ----------------------------------------------------------------------------
def batches(data: ClassificationData):
    return data.batches


class TextClassificationTask(BertTask):
    """``attnlab train text-classification`` on the lifecycle (cli/training_run.py, through
    cli/bert_runs.py)."""

    name = "text-classification"
    family = "text_classification"
    verb = sys.modules[__name__]
    scoring = "the held-out accuracy"
    summary_keys = ("loss", "valid_loss", "valid_correct")
    unit = "nats per text"
    held_out = ("valid_loss", "nats per text")
    unit_of_batch = "texts"
    max_steps = 1000
    every = 100

    def add_data_arguments(self, parser) -> None:
        from attnlab.cli.options import bounded_int

        data = parser.add_argument_group("data")
        data.add_argument("--train", required=True, metavar="FILE",
                          help="labelled training file: .tsv/.csv with a header (text, label[, text_pair]) or .jsonl")
        data.add_argument("--valid", metavar="FILE",
                          help="labelled held-out file, same format (default: a seeded 10%% of --train's rows)")
        data.add_argument("--max-length", type=bounded_int(3, 2**16), metavar="N",
                          help="tokens per input, [CLS]/[SEP] included; longer inputs are truncated (default: 128, or "
                               "the model's max_positions if smaller)")

    def files(self, prepared):
        from attnlab.families.text_classification.task import LABELS_FILE, labels_file_bytes

        from attnlab.files import strict_json_bytes

        return {**prepared.tokenizer_files, LABELS_FILE: labels_file_bytes(prepared.labels, prepared.pairs),
                DATA_FILE: strict_json_bytes(prepared.record, indent=2)}

    def trainer(self, run, model, data, run_info):
        from attnlab.families.text_classification.task import EVALUATION_FILES
        from attnlab.files import refuse_symlinks

        refuse_symlinks(run.out, ("evaluation",))
        refuse_symlinks(run.out / "evaluation", EVALUATION_FILES)  # what save writes, checked before training
        return super().trainer(run, model, data, run_info)

    def save(self, run, model, trainer):
        """OUT/model, then (under the run's lock) the held-out rows scored into OUT/evaluation."""
        from attnlab.families.text_classification.task import EVALUATION_FILES, write_evaluation
        from attnlab.files import refuse_symlinks

        model_dir = super().save(run, model, trainer)
        prepared = run.data["prepared"]
        refuse_symlinks(run.out / "evaluation", EVALUATION_FILES)
        scores, confusion, scoring = score(model, prepared, budget=run.budget, progress=not run.args.no_progress)
        write_evaluation(scores, confusion, prepared.labels, run.out / "evaluation", data=prepared.valid.path,
                         extra={"scoring": scoring.record()})
        run.data["scored"] = (scores, scoring)
        return model_dir

    def finish(self, run, model, data, budget) -> None:
        from attnlab.families.text_classification.task import summary

        scores, scoring = data["scored"]
        print(f"held-out ({scoring.summary('texts')}): {summary(scores)}", file=sys.stderr, flush=True)


TASK = TextClassificationTask()


def add_arguments(parser) -> None:
    add_training_arguments(parser, TASK)


def run(args) -> int:
    return run_training(TASK, args)
