"""``attnlab train bert``: masked-LM pre-training of a BERT on your text files.

    attnlab train bert --text notes.txt more.txt --out runs/bert          # bert_mini, vocabulary from the text
    attnlab train bert --vocab-size 4000 --context 64 --out runs/captions # Multi30k's English captions (shipped)
    attnlab train bert --text notes.txt --init all-MiniLM-L6-v2/ --out runs/minilm-mlm   # continue a BERT

From scratch, a WordPiece vocabulary of ``--vocab-size`` tokens is learned from the
training text (the ``tokenizers`` library; without ``--text``: the 29,000 English captions of
Multi30k's train split that ship with attnlab, its val captions held out) and the model is ``--preset`` (default
``bert_mini``) with ``max_positions`` = ``--context``. With ``--init DIR`` (any BERT: a
HuggingFace directory such as all-MiniLM-L6-v2, or one attnlab wrote) the layers and the
vocabulary are DIR's; a directory without a masked-LM head gets a new one, and the verb
says so. The masking is BERT's (families/bert/task.py: 15 % of the tokens, 80 % [MASK] /
10 % random / 10 % kept; no next-sentence task). Windows hold whole lines
(``--windows sentences``) or the packed token stream (``--windows packed``).

The held-out text (``--valid-text``, or the last 10 % of the training lines) is scored at
the end under ``evaluate-bert``'s fixed protocol (each line one sequence, 15 % masked, all
[MASK], seed 0): masked-token accuracy and nats per masked token; ``attnlab evaluate
--model OUT/model --text VALID`` gives the same figures. ``metrics.jsonl``'s
``valid_correct``/``valid_nll`` are the same protocol on the first ``--val-lines`` lines.

Writes ``OUT/model`` (config.json, model.safetensors, vocab.txt, tokenizer_config.json),
``OUT/checkpoints``, ``OUT/metrics.jsonl`` and the vocabulary in OUT.

The verb is its parts, in order: :func:`load_init` (``--init``), :func:`data`,
:func:`scratch_config`, :func:`adapt_after_init`, :func:`loss`, :func:`score`, called by
:class:`BertTrainTask` on the training-run lifecycle (cli/training_run.py, cli/bert_runs.py),
which gives it ``--init``'s start (the head it adds trained as new parameters, also beside
``--lora``'s adapters), ``--resume`` on the same data only and ``start.json``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.cli.bert_runs import BertTask
from attnlab.cli.training_run import add_training_arguments, run_training
from attnlab.tasks.bert import load_init  # the --init part: any BERT directory (tasks/bert.py)

HELP = "pre-train a BERT (masked-LM) on your text files, from scratch or from a BERT directory (--init)"

SCORE_BATCH = 32  # evaluate-bert's default --batch-size: the same batches mask the same tokens


# -- the parts -------------------------------------------------------------------------
@dataclass
class MLMData:
    tokenizer: object
    tokenizer_files: dict
    train: object  # MaskedWindows
    valid_lines: list[str]
    valid_batches: list = field(default_factory=list)
    context: int = 128
    description: str = ""
    run_info: dict = field(default_factory=dict)
    record: dict = field(default_factory=dict)  # bert.json (evaluate.DATA_FILE): the text files


def data(args, *, tokenizer=None, tokenizer_files=None, max_positions: int | None = None) -> MLMData:
    """The training windows and held-out lines of ``--text``/``--valid-text``; the
    vocabulary is ``tokenizer`` (from ``--init`` or a checkpoint) or learned from the text."""
    import hashlib
    import tempfile

    from attnlab.data.text import read_text_files
    from attnlab.families.bert.evaluate import (CAPTION_SPLITS, CAPTIONS, MaskedLMScore, caption_lines, split_lines,
                                                text_lines)
    from attnlab.families.bert.task import MaskedWindows, text_windows
    from attnlab.tasks.bert import learn_wordpiece
    from attnlab.tasks.bert import tokenizer_files as files_of

    def read(paths, flag):
        try:
            return read_text_files(paths)
        except (FileNotFoundError, ValueError) as error:
            raise ValueError(f"{flag}: {error}") from None

    if args.text:
        train_lines, train_source = text_lines(read(args.text, "--text")), ", ".join(args.text)
    else:  # the shipped English captions, as train lm falls back to Shakespeare
        train_lines, train_source = caption_lines("train"), CAPTION_SPLITS["train"]
    if args.valid_text:
        valid_lines, valid_flag = text_lines(read(args.valid_text, "--valid-text")), "--valid-text"
    elif args.text:
        (train_lines, valid_lines), valid_flag = split_lines(train_lines), "--text (its last 10% of lines)"
    else:
        valid_lines, valid_flag = caption_lines("valid"), CAPTION_SPLITS["valid"]
    if not train_lines:
        raise ValueError(f"--text {train_source}: no non-empty line to train on")
    if not valid_lines:
        raise ValueError(f"{valid_flag}: no held-out line; give more text or --valid-text")
    context = args.context or min(128, max_positions or 128)
    if max_positions is not None and context > max_positions:
        raise ValueError(f"--context {context}: exceeds the model's max_positions={max_positions}")
    if tokenizer is None:
        with tempfile.TemporaryDirectory() as scratch:
            tokenizer = learn_wordpiece(train_lines, scratch, vocab_size=args.vocab_size or 8000,
                                        lowercase=not args.cased, max_length=context)
            tokenizer_files = files_of(tokenizer)
    windows = text_windows(tokenizer, train_lines, context=context, mode=args.windows)
    train = MaskedWindows(windows, batch_size=args.batch_size, tokenizer=tokenizer, seed=args.seed)
    score = MaskedLMScore(tokenizer)
    held = valid_lines[:args.val_lines]
    valid_batches = [score.batch(held[i:i + SCORE_BATCH]) for i in range(0, len(held), SCORE_BATCH)]
    fingerprint = lambda lines: hashlib.sha256("\n".join(lines).encode()).hexdigest()  # noqa: E731
    description = (f"data: {len(train_lines):,d} training lines ({train_source}) -> {len(windows):,d} windows of up to {context} "
                   f"tokens ({args.windows}); {len(valid_lines):,d} held-out lines ({valid_flag}); WordPiece "
                   f"vocabulary of {tokenizer.vocab_size:,d}")
    run_info = {"text": fingerprint(train_lines), "valid_text": fingerprint(valid_lines), "context": context,
                "windows": args.windows, "vocab_size": args.vocab_size, "preset": args.preset, "set": args.set}
    record = {"text": [str(Path(name).resolve()) for name in args.text] if args.text else None,
              "valid_text": [str(Path(name).resolve()) for name in args.valid_text] if args.valid_text else None}
    if not args.text:
        record["data"] = CAPTIONS
    return MLMData(tokenizer, tokenizer_files, train, valid_lines, valid_batches, context, description, run_info,
                   record)


def scratch_config(args, data: MLMData):
    """From scratch: ``--preset`` with the learned vocabulary, ``max_positions`` = the context
    and a masked-LM head."""
    from attnlab.cli.bert_runs import scratch_config

    return scratch_config(args, data.tokenizer, data.context, mlm_head=True)


def adapt_after_init(model, args, data: MLMData):
    """``--init``'s model made ready for masked-LM training: ``(model, note)``, a new
    masked-LM head where it had none (said in ``note``)."""
    import torch

    from attnlab.families.bert.task import with_mlm_head

    torch.manual_seed(args.seed)  # a new head's initial weights
    return with_mlm_head(model)


def loss(model, batch):
    from attnlab.families.bert.task import mlm_loss

    return mlm_loss(model, batch)


def score(model, data: MLMData, *, budget=None, progress: bool = True, device="cpu"):
    """The held-out lines under evaluate-bert's protocol (within ``budget``): ``(result dict,
    what was scored)``. The lines are evaluate-bert's batches (``SCORE_BATCH`` consecutive
    lines, masked as in order), so a scoring the budget does not cut gives evaluate-bert's
    figures exactly; a cut one scores a random sample of those batches, with their masks."""
    from attnlab.families.bert.evaluate import MaskedLMScore
    from attnlab.training.phases import Scoring

    model.eval()
    totals = MaskedLMScore(data.tokenizer)
    lines = data.valid_lines
    groups = [lines[start:start + SCORE_BATCH] for start in range(0, len(lines), SCORE_BATCH)]
    states = totals.states(groups)
    scoring = Scoring("held-out masked tokens", len(groups), unit="batch", batch_size=1, budget=budget,
                      progress=progress)
    scored = 0
    for index in scoring:
        for i in index.tolist():
            totals.add(model, groups[i], device, state=states[i])
            scored += len(groups[i])
    what = (f"{scored:,d} lines" if not scoring.cut else
            f"{scored:,d} of {len(lines):,d} lines (a random sample of batches: the time budget ran out)")
    return totals.result(), what


# -- the verb ----------------------------------------------------------------------------
def batches(data: MLMData):
    return data.train


class BertTrainTask(BertTask):
    """``attnlab train bert`` on the lifecycle (cli/training_run.py, through cli/bert_runs.py)."""

    name = family = "bert"
    verb = sys.modules[__name__]
    scoring = "the held-out masked-token scores"
    summary_keys = ("loss", "valid_loss", "valid_correct")
    unit = "nats per masked token"
    held_out = ("valid_loss", "nats per masked token")
    adaptable = {"mlm_head": "a new masked-LM head"}

    def add_data_arguments(self, parser) -> None:
        from attnlab.cli.options import bounded_int
        from attnlab.families.bert.task import WINDOW_MODES

        data = parser.add_argument_group("data")
        data.add_argument("--text", nargs="+", metavar="FILE",
                          help="training text files (UTF-8; default: the English captions of Multi30k's train "
                               "split, 29,000 lines shipped with attnlab)")
        data.add_argument("--valid-text", nargs="+", metavar="FILE",
                          help="held-out text files, one sequence a line (default: the last 10%% of --text's "
                               "lines; without --text, Multi30k's 1,014 English val captions)")
        data.add_argument("--context", type=bounded_int(3, 2**16), metavar="N",
                          help="tokens per window, [CLS] and [SEP] included (default: 128, or --init's max_positions "
                               "if smaller)")
        data.add_argument("--windows", choices=WINDOW_MODES, default="sentences",
                          help="windows of whole lines, or of the packed token stream (default: sentences)")

    def files(self, prepared) -> dict[str, bytes]:
        from attnlab.families.bert.evaluate import DATA_FILE
        from attnlab.files import strict_json_bytes

        return {**prepared.tokenizer_files, DATA_FILE: strict_json_bytes(prepared.record, indent=2)}

    def add_run_arguments(self, group) -> None:
        from attnlab.cli.options import bounded_int

        group.add_argument("--val-lines", type=bounded_int(1, 10**6), default=1000, metavar="N",
                           help="held-out lines validated during training (default: 1000)")

    def finish(self, run, model, data, budget) -> None:
        from attnlab.families.bert.evaluate import frequency_baseline

        result, scored = score(model, data["prepared"], budget=budget, progress=not run.args.no_progress,
                               device=run.device)
        print(f"held-out ({scored}), evaluate-bert's protocol: masked-token accuracy "
              f"{result['accuracy']:.4f}, {result['nll']:.4f} nats per masked token (perplexity "
              f"{result['perplexity']:.2f}) over {result['masked_tokens']:,d} masked tokens; {frequency_baseline(result)}",
              file=sys.stderr, flush=True)


TASK = BertTrainTask()


def add_arguments(parser) -> None:
    add_training_arguments(parser, TASK)


def run(args) -> int:
    return run_training(TASK, args)
