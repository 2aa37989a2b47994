"""``attnlab evaluate-bert``: masked-token prediction of a BERT with its masked-LM head.

    attnlab evaluate-bert --model bert-base-uncased/             # English Multi30k test captions
    attnlab evaluate-bert --model DIR --text held_out.txt --mask-rate 0.15 --seed 0

The protocol (fixed, so figures compare across models and runs): every non-empty line of
the text is one sequence, ``[CLS] tokens [SEP]`` truncated to the model's context; each
token other than ``[CLS]``/``[SEP]`` is masked with probability ``--mask-rate`` (default
0.15, BERT's rate; at least one per line) by a generator seeded with ``--seed``, and every
masked position is replaced by ``[MASK]`` (no 80/10/10 mix: that is a training device).
The model predicts the original tokens; the verb prints masked-token accuracy, the mean
cross-entropy in nats per masked token and its exponent (the masked-LM perplexity).
``--json FILE`` also writes them (atomically; an existing file only with ``--force``).
``attnlab evaluate --model DIR`` of a BERT directory runs this verb.

A BERT without a masked-LM head (a sentence-embedding model such as all-MiniLM-L6-v2,
saved as ``BertModel``) cannot predict tokens: the verb says so and points to
``attnlab embed``.
"""

from __future__ import annotations

HELP = "masked-token accuracy and NLL of a BERT with its masked-LM head on a text (default: Multi30k English test)"

MAX_LINES = 1_000_000


def add_arguments(parser) -> None:
    from attnlab.cli.options import (SEED, add_force_argument, add_limit_argument, add_runtime_arguments, bounded_float,
                                     bounded_int)

    parser.add_argument("--model", required=True, help="a BERT directory with a masked-LM head (HuggingFace-format, or attnlab train bert's)")
    parser.add_argument("--text", nargs="+", metavar="FILE",
                        help="held-out text files, one sequence a line (default: the model's own held-out text "
                             "for a train bert model, else the English captions of Multi30k's test split, shipped "
                             "with attnlab; said in the first line)")
    parser.add_argument("--mask-rate", type=bounded_float(0.0, 1.0), default=0.15, metavar="P",
                        help="probability that a token is masked (0 < P <= 1; default: 0.15)")
    parser.add_argument("--seed", type=SEED, default=0, help="seed of the masking (default: 0)")
    parser.add_argument("--batch-size", type=bounded_int(1, 4096), default=32, help="lines per batch (default: 32)")
    add_limit_argument(parser, "lines")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_force_argument(parser, "--json")
    add_runtime_arguments(parser)


DATA_FILE = "bert.json"  # in OUT/model: where the text came from (evaluate-bert's default)


def text_lines(text: str) -> list[str]:
    """The non-empty lines of a text, stripped: one sequence each (training, held out, scored)."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def split_lines(lines: list[str]) -> tuple[list[str], list[str]]:
    """A training text's lines (:func:`text_lines`): all but the last 10 % to train, those held
    out (without ``--valid-text``; evaluate-bert repeats it from ``DATA_FILE``)."""
    cut = int(len(lines) * 0.9)
    return lines[:cut], lines[cut:]


CAPTIONS = "multi30k-en"  # DATA_FILE's "data" when train bert ran without --text
CAPTION_SPLITS = {"train": "Multi30k's English train captions (shipped with attnlab)",
                  "valid": "Multi30k's English val captions (shipped with attnlab)",
                  "test": "Multi30k test (English)"}


def caption_lines(split: str) -> list[str]:
    """The English captions of one Multi30k split (``train``, ``valid``, ``test``), shipped
    inside attnlab: ``train bert``'s text without ``--text``, evaluate-bert's without a model
    record or ``--text``."""
    from attnlab.data.registry import get_parallel_dataset

    corpus = get_parallel_dataset("multi30k", split, "de", "en")
    return [line for line in (target.strip() for _, target in corpus) if line]


def own_held_out_lines(directory) -> tuple[list[str], str] | None:
    """The held-out lines a model directory's ``DATA_FILE`` names, with where they came from;
    None without the file (a HuggingFace BERT, or a model trained before it was kept)."""
    from attnlab.data.text import read_text_files
    from attnlab.files import check_recorded_files, read_data_record

    found = read_data_record(directory, DATA_FILE, what="a record of training text")
    if found is None:
        return None
    path, record = found
    names = record.get("valid_text") or record.get("text")
    if names is None and record.get("data") == CAPTIONS:
        return caption_lines("valid"), f"the model's own held-out text ({CAPTION_SPLITS['valid']}, from {DATA_FILE})"
    if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
        raise ValueError(f"{path}: not a record of training text (no 'text' files)")
    check_recorded_files(path, names, what="held-out text", instead="give the text to score with --text")
    lines = text_lines(read_text_files(names))
    if record.get("valid_text"):
        what = f"--valid-text {', '.join(names)}"
    else:
        lines = split_lines(lines)[1]
        what = f"the last 10% of the lines of --text {', '.join(names)}"
    return lines, f"the model's own held-out text ({what}, from {DATA_FILE})"


def held_out_lines(paths) -> tuple[list[str], str]:
    """The non-empty lines of ``paths`` (or of Multi30k's English test captions) and a
    description of where they came from."""
    if paths:
        from attnlab.data.text import read_text_files

        try:
            lines = text_lines(read_text_files(paths))
        except FileNotFoundError as error:
            raise ValueError(f"--text: {error}") from None
        source = ", ".join(str(p) for p in paths)
    else:
        lines, source = caption_lines("test"), CAPTION_SPLITS["test"]
    if not lines:
        raise ValueError(f"--text {source}: no non-empty line to score")
    return lines, source


def mask_batch(ids, attention_mask, special, mask_id: int, rate: float, generator):
    """``(masked ids, targets)``: each real token that is not in ``special`` is replaced by
    ``mask_id`` with probability ``rate`` (at least one per row that has such a token);
    ``targets`` holds the original id there and -100 elsewhere."""
    import torch

    candidates = attention_mask.bool() & ~torch.isin(ids, torch.tensor(sorted(special)))
    draws = torch.rand(ids.shape, generator=generator)
    chosen = candidates & (draws < rate)
    # a row whose draw chose nothing masks its candidate with the smallest draw
    empty = candidates.any(1) & ~chosen.any(1)
    if empty.any():
        first = draws.masked_fill(~candidates, 2.0).argmin(1)
        chosen[empty, first[empty]] = True
    targets = ids.masked_fill(~chosen, -100)
    return ids.masked_fill(chosen, mask_id), targets


class MaskedLMScore:
    """The protocol's running totals: :meth:`batch` masks a list of lines (the generator,
    seeded once, continues from call to call, so scoring N lines in batches of B masks them
    as :func:`evaluate_masked_lm` does), :meth:`add` scores them, :meth:`result` gives the
    figures. ``train bert`` validates and scores its held-out text with it."""

    def __init__(self, tokenizer, *, rate: float = 0.15, seed: int = 0):
        import torch

        vocab = tokenizer.tokenizer
        self.tokenizer, self.rate, self.seed = tokenizer, rate, seed
        self.mask_id = vocab.token_to_id("[MASK]")
        if self.mask_id is None:
            raise ValueError("the vocabulary has no [MASK] token; masked-token scoring needs one")
        self.special = {vocab.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")}
        self.generator = torch.Generator().manual_seed(seed)
        self.total_nll, self.correct, self.count, self.lines = 0.0, 0, 0, 0
        self.targets: dict[int, int] = {}  # masked token id -> how often it was the answer

    def batch(self, lines) -> dict:
        """``{ids (masked), attention_mask, token_type_ids, targets}`` of ``lines`` (targets:
        the original id at each masked position, -100 elsewhere)."""
        batch, _ = self.tokenizer.encode(lines)
        batch["ids"], batch["targets"] = mask_batch(batch["ids"], batch["attention_mask"], self.special, self.mask_id,
                                                    self.rate, self.generator)
        return batch

    def states(self, groups) -> list:
        """The masking generator's state at the start of each group of lines when the groups
        are masked in order (the generator is left after the last): scoring group ``i`` after
        ``generator.set_state(states[i])`` masks it as scoring them all in order does, so a
        sample of groups, in any order, is scored under the protocol's masks."""
        states = []
        for group in groups:
            states.append(self.generator.get_state())
            self.batch(group)
        return states

    def add(self, model, lines, device="cpu", *, state=None) -> None:
        import torch

        if state is not None:
            self.generator.set_state(state)
        batch = self.batch(lines)
        wanted = batch["targets"][batch["targets"] != -100]
        for token, times in zip(*(part.tolist() for part in wanted.unique(return_counts=True))):
            self.targets[token] = self.targets.get(token, 0) + times
        with torch.no_grad():
            _, nll, correct, count = masked_lm_sums(model, {k: v.to(device) for k, v in batch.items()})
        self.total_nll += float(nll)
        self.correct += int(correct)
        self.count += count
        self.lines += len(lines)

    def result(self) -> dict:
        import math

        if self.count == 0:
            raise ValueError("no token could be masked (every line holds only [CLS]/[SEP])")
        nll = self.total_nll / self.count
        # the baseline: always answering the token most often masked (ties: the smaller id)
        token, times = min(self.targets.items(), key=lambda item: (-item[1], item[0]))
        return {"masked_tokens": self.count, "accuracy": self.correct / self.count, "nll": nll,
                "perplexity": math.exp(nll) if nll < 700 else math.inf, "lines": self.lines, "mask_rate": self.rate,
                "seed": self.seed, "most_frequent_token": self.tokenizer.tokenizer.id_to_token(token),
                "most_frequent_share": times / self.count}


def frequency_baseline(result: dict) -> str:
    """The line that puts a masked-token accuracy beside always answering the most frequent
    masked token (what a model that learned only word frequencies scores)."""
    return (f"always answering the most frequent masked token ({result['most_frequent_token']!r}) would score "
            f"{result['most_frequent_share']:.4f}")


def masked_lm_sums(model, batch: dict):
    """``(loss_sum, nll_sum, correct, count)`` of a masked batch (``ids``, ``attention_mask``,
    ``token_type_ids``, ``targets``): cross-entropy summed over the masked positions (the
    loss keeps its gradient; the others are detached), argmax hits, how many were masked."""
    import torch.nn.functional as F

    out = model(batch["ids"], attention_mask=batch["attention_mask"], token_type_ids=batch.get("token_type_ids"))
    where = batch["targets"] != -100
    logits = model.mlm_logits(out.hidden[where]).float()  # (masked, V): only the masked rows
    wanted = batch["targets"][where]
    loss = F.cross_entropy(logits, wanted, reduction="sum")
    return loss, loss.detach(), (logits.detach().argmax(-1) == wanted).sum(), int(where.sum())


def evaluate_masked_lm(model, tokenizer, lines, *, rate: float, seed: int, batch_size: int, device: str = "cpu",
                       progress=None) -> dict:
    """Masked-token accuracy and NLL of ``model`` over ``lines`` (the protocol above)."""
    score = MaskedLMScore(tokenizer, rate=rate, seed=seed)
    model.eval()
    for start in range(0, len(lines), batch_size):
        score.add(model, lines[start:start + batch_size], device)
        if progress is not None:
            progress(min(batch_size, len(lines) - start))
    return score.result()


def run(args) -> int:
    import math
    import sys
    import time

    from attnlab.cli.options import require_packages, resolve_device
    from attnlab.files import atomic_write_json, check_output_file, json_safe

    json_path = check_output_file(args.json, force=args.force, flag="--json", suffixes=(".json",)) if args.json else None
    require_packages("evaluate-bert", "tokenizers")
    from attnlab.tasks.bert import load_bert_directory

    device = resolve_device(args.device)
    model, tokenizer = load_bert_directory(args.model, device=device, flag="--model")
    if not model.config.mlm_head:
        raise ValueError(f"--model {args.model}: this BERT has no masked-LM head (its weights hold no "
                         "cls.predictions.*, e.g. a sentence-embedding model), so it cannot predict masked tokens; "
                         "use attnlab embed for its sentence embeddings")
    own = None
    if not args.text:
        own = own_held_out_lines(args.model)
    lines, source = own if own is not None else held_out_lines(args.text)
    if len(lines) > MAX_LINES:
        raise ValueError(f"--text {source}: {len(lines):,d} lines; at most {MAX_LINES:,d} (use --limit)")
    if args.limit is not None and len(lines) > args.limit:
        lines = lines[:args.limit]
        source += f", its first {args.limit:,d} lines (--limit)"
    print(f"scoring {len(lines):,d} lines of {source}: masking {args.mask_rate:g} of the tokens (seed {args.seed})",
          flush=True)
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(lines), desc="scoring", unit="line", file=sys.stderr, leave=False)
    started = time.perf_counter()
    try:
        result = evaluate_masked_lm(model, tokenizer, lines, rate=args.mask_rate, seed=args.seed,
                                    batch_size=args.batch_size, device=device,
                                    progress=None if bar is None else bar.update)
    finally:
        if bar is not None:
            bar.close()
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(f"masked-token accuracy {result['accuracy']:.4f}, NLL {result['nll']:.4f} nats per masked token "
          f"(perplexity {result['perplexity']:.2f}) over {result['masked_tokens']:,d} masked tokens "
          f"({result['seconds']} s); {frequency_baseline(result)}", flush=True)
    if json_path is not None:
        atomic_write_json(json_path, json_safe({"model": str(args.model), "text": source, **result}))
    if not math.isfinite(result["nll"]):
        raise ValueError("the model's masked-token NLL is not finite (its weights or outputs hold NaN or inf)")
    return 0
