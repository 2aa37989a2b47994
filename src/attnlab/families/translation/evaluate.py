"""``attnlab evaluate`` of a translation model: translate a test set and score it
(sacreBLEU cased 13a, chrF, lower-cased tokenized BLEU), each with its sacrebleu signature.
The verb itself (:mod:`attnlab.cli.evaluate`) routes other families' directories to their
own evaluators and runs this module for the rest."""

from attnlab.families.translation.translate import (add_batch_arguments, add_decoding_arguments, batch_options,
                                                    decoding_options, set_threads)


def add_arguments(parser) -> None:
    add_decoding_arguments(parser)
    from attnlab.cli.options import add_named_data_arguments

    add_named_data_arguments(parser)
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"), help="(default: test)")
    parser.add_argument("--src-file", help="your source sentences, one a line (with neither --data nor --src-file: "
                                           "the model's own held-out data, as its translation.json records it)")
    parser.add_argument("--ref-file", help="reference translations aligned with --src-file")
    from attnlab.cli.options import add_limit_argument

    add_limit_argument(parser, "sentences")
    add_batch_arguments(parser)
    parser.add_argument("--output", "-o", "--out", dest="output", help="also write the translations to this file")
    parser.add_argument("--show", type=int, default=0, help="print N example translations (default: 0)")
    parser.add_argument("--json", help="also write the scores as JSON to this file")
    from attnlab.cli.options import add_force_argument

    add_force_argument(parser, "--output and --json")
    from attnlab.cli.options import add_quantize_argument

    add_quantize_argument(parser)


def run(args) -> int:
    import time
    from pathlib import Path

    from attnlab.data import get_parallel_dataset, read_parallel
    from attnlab.evaluation import score_translations
    from attnlab.families.translation.translator import Translator
    from attnlab.cli.options import own_data_line
    from attnlab.families.translation.task import TASK_FILE
    from attnlab.files import atomic_write, atomic_write_json, check_output_file, json_safe

    set_threads(args.threads)
    for flag, path in (("--output", args.output), ("--json", args.json)):  # before any work
        if path:
            check_output_file(path, force=args.force, flag=flag)
    if args.output and args.json and Path(args.output).resolve() == Path(args.json).resolve():
        raise ValueError("--output and --json must be different files")
    from attnlab.cli.options import describe_device, resolve_device

    device = resolve_device(args.device)
    translator = Translator.load(args.model, device=device)  # a missing model is the first thing to say
    from attnlab.cli.options import apply_quantize

    apply_quantize(translator.model, args.quantize, device)
    batching = batch_options(args, device)
    if args.data is not None and (args.src_file is not None or args.ref_file is not None):
        raise ValueError("give either --data NAME or --src-file and --ref-file (not both)")
    own = args.data is None and args.src_file is None and args.ref_file is None
    data = args.data
    if own and translator.info.get("data"):  # the model's own named set (translation.json), scored as --data is
        data = translator.info["data"]
    if own and data is None:  # the --valid-src/--valid-tgt files it was trained with
        corpus, what = _own_held_out_files(args, translator.info)
    elif data is not None:
        trained = (translator.info.get("src_lang"), translator.info.get("tgt_lang"))
        src_lang = args.src_lang or trained[0]
        tgt_lang = args.tgt_lang or trained[1]
        if not (src_lang and tgt_lang):
            raise ValueError(f"{args.model} does not record its languages: pass --src and --tgt")
        for flag, given, pair in (("--src", args.src_lang, trained[0]), ("--tgt", args.tgt_lang, trained[1])):
            if given and pair and given != pair:  # a French model fed German would still print a BLEU
                raise ValueError(f"{flag} {given}: {args.model} was trained on {trained[0]}->{trained[1]} "
                                 "(its translation.json); score it on its own language pair")
        try:
            corpus = get_parallel_dataset(data, args.split, src_lang, tgt_lang, root=args.data_root,
                                          data_dir=args.data_dir)
        except FileNotFoundError as error:
            if own:
                raise ValueError(f"{Path(args.model) / TASK_FILE}: the model's own data {data} is not at hand "
                                 f"({error}); pass --data-dir, or other data (--data NAME, or --src-file and "
                                 "--ref-file)") from None
            raise ValueError(str(error)) from None
        what = corpus.description or f"{data} {args.split}"
    else:
        if args.src_file is None or args.ref_file is None:
            raise ValueError("--src-file and --ref-file go together")
        for path in (args.src_file, args.ref_file):
            try:
                open(path, "rb").close()
            except OSError as error:
                raise ValueError(f"{path}: {error.strerror}") from None
        corpus = read_parallel(args.src_file, args.ref_file)
    if own:
        print(own_data_line(args.model, what, len(corpus.pairs), "sentence pairs"))
    pairs = corpus.pairs[: args.limit] if args.limit else corpus.pairs
    sources = [src for src, _ in pairs]
    references = [ref for _, ref in pairs]

    started = time.perf_counter()
    hypotheses = translator.translate(sources, **batching, **decoding_options(args))
    seconds = time.perf_counter() - started
    scores = score_translations(hypotheses, references)
    if args.output:
        atomic_write(args.output, lambda path: Path(path).write_text("".join(h + "\n" for h in hypotheses),
                                                                     encoding="utf-8"))
    description = corpus.description or (what if own else f"{args.src_file} -> {args.ref_file}")
    if args.show:
        shown = min(args.show, len(sources))
        print(f"The first {shown} sentences of {description} (in file order, not chosen):\n")
    for source, hypothesis, reference in list(zip(sources, hypotheses, references))[: args.show]:
        print(f"  source:      {source}\n  translation: {hypothesis}\n  reference:   {reference}\n")
    beam = translator.default_beam_size if args.beam is None else args.beam  # what was searched, not None
    print(f"{description}: {scores.sentences} sentences translated in {seconds:.1f} s on "
          f"{describe_device(device)} (beam {beam}, alpha {args.alpha})")
    print(scores.report())
    if args.json:
        atomic_write_json(args.json, json_safe({**scores.to_dict(), "data": description, "beam": beam,
                                                "alpha": args.alpha, "seconds": seconds}))
    return 0


def _own_held_out_files(args, info: dict):
    """The --valid-src/--valid-tgt pairs ``translation.json`` names for a model trained on
    the user's own files, and what they are; ValueError naming the file and the flags to
    pass when it names none, or they are gone."""
    from pathlib import Path

    from attnlab.cli.options import check_recorded_data
    from attnlab.data import read_parallel
    from attnlab.families.translation.task import TASK_FILE

    record = Path(args.model) / TASK_FILE
    flags = "--data NAME, or --src-file and --ref-file"
    held_out = [info.get("valid_src"), info.get("valid_tgt")]
    if not all(isinstance(path, str) for path in held_out):
        raise ValueError(f"{record} records no held-out data (a model trained on your own files without "
                         f"--valid-src/--valid-tgt, or from before they were recorded): pass {flags}")
    for path in held_out:
        check_recorded_data(args.model, TASK_FILE, path, "--src-file and --ref-file")
    if args.split != "test":
        raise ValueError(f"--split {args.split}: the model's own held-out data is its --valid-src/--valid-tgt "
                         f"files; pass {flags} to score a split")
    return read_parallel(*held_out), f"{held_out[0]} -> {held_out[1]} (its --valid-src/--valid-tgt)"
