"""What the window-trained language-model verbs share (``attnlab train lm``, ``attnlab
train music``): their options, the checks and settings a run starts with, and their
Trainer over random windows of one token stream."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnlab.cli.training_run import TrainingTask


def add_run_arguments(parser, *, set_example: str, batch_size: int, max_steps: int, lr: float, warmup: int) -> None:
    """The options every window-trained LM verb shares (``train lm``, ``train music``):
    batch, schedule, budget, preset overrides, validation/checkpoint cadence, device, seed, output."""
    parser.add_argument("--batch-size", type=int, default=batch_size, help=f"windows per update (default: {batch_size})")
    from attnlab.cli.options import (add_precision_argument, add_run_group, add_schedule_arguments, add_set_argument,
                                     bounded_int)

    add_schedule_arguments(parser, max_steps=max_steps, lr=lr, warmup=warmup, lr_help="peak learning rate, cosine schedule")
    add_set_argument(parser, set_example)

    add_precision_argument(parser)
    run = add_run_group(parser, every=250, seed=1)
    run.add_argument("--val-batches", type=bounded_int(1, 10**6), default=40, metavar="N",
                     help="validation batches (default: 40)")


class WindowTask(TrainingTask):
    """A window-trained LM verb on the lifecycle (:mod:`attnlab.cli.training_run`): its
    checks, its Trainer over random windows of one token stream (AdamW, cosine schedule to a
    tenth of ``--lr``, gradients clipped at 1), the held-out figure in nats per token. A
    subclass reads its data into :class:`WindowData` and names its preset."""

    summary_keys = ("loss", "valid_loss", "valid_nll")
    unit = "nats per token"
    held_out = ("valid_nll", "nats per token")
    betas: tuple[float, float] = (0.9, 0.99)
    eps: float = 1e-8
    flag_names = {"text": "--text", "valid_text": "--valid-text", "tokenizer": "--tokenizer",
                  "vocab_size": "--vocab-size", "context": "--context", "preset": "--preset", "set": "--set",
                  "data": "--data"}

    def check(self, args) -> None:
        import sys

        from attnlab.cli.options import check_positive

        check_positive(args, ("max_steps", "batch_size"))
        if args.warmup > args.max_steps:
            warmup = max(1, args.max_steps // 10)
            print(f"note: --warmup {args.warmup} exceeds --max-steps {args.max_steps}: warming up for {warmup} "
                  "updates (a tenth of the run) instead", file=sys.stderr)
            args.warmup = warmup

    def check_windows(self, data: "WindowData", context: int) -> None:
        """Both streams hold more than one window."""
        for flag, ids in ((data.train_flag, data.train_ids), (data.valid_flag, data.valid_ids)):
            if len(ids) <= context + 1:
                raise ValueError(f"{flag}: {len(ids)} tokens is too short; windows of --context {context} need more "
                                 f"than {context + 1}")

    def loss(self):
        """The Trainer's ``loss_fn``: the summed next-token loss."""
        from attnlab.training.losses import lm_loss

        return lm_loss

    def trainer(self, run, model, data, run_info):
        """The Trainer of a window-trained LM verb (:func:`add_run_arguments`' options): random
        windows of the training stream, the first ``--val-batches`` consecutive windows of the
        validation stream."""
        from attnlab.cli.options import checkpoint_minutes
        from attnlab.data.text import TextWindows, consecutive_windows
        from attnlab.training.trainer import TrainConfig, Trainer

        args = run.args
        config = TrainConfig(out_dir=str(args.out), max_steps=args.max_steps, schedule="cosine", peak_lr=args.lr,
                             min_lr=args.lr / 10, warmup_steps=args.warmup, betas=self.betas, eps=self.eps,
                             clip_grad_norm=1.0, log_every=25, validate_every=args.val_every or None,
                             checkpoint_every=args.save_every or None, seed=args.seed,
                             progress_bar=not args.no_progress, max_minutes=args.max_minutes, bf16=run.bf16,
                             compile=args.compile, checkpoint_every_minutes=checkpoint_minutes(args))
        context = data.context
        return Trainer(model, self.loss(), TextWindows(data.train_ids, batch_size=args.batch_size, context=context,
                                                   seed=args.seed), config,
                       valid_batches=consecutive_windows(data.valid_ids, batch_size=args.batch_size, context=context,
                                                         max_batches=args.val_batches),
                       model_files=run.model_files(), run_info=run_info)


@dataclass
class WindowData:
    """A window-trained verb's data: the two token streams, the training window, and the
    flags that name each stream in a message."""

    train_ids: object
    valid_ids: object
    context: int
    description: str
    train_flag: str = "the training text"
    valid_flag: str = "the validation text"
    extra: dict = field(default_factory=dict)
