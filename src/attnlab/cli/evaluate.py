"""``attnlab evaluate``: translate a test set and score it (sacreBLEU cased 13a, chrF,
lower-cased tokenized BLEU), each with its sacrebleu signature."""

from attnlab.cli.translate import (add_batch_arguments, add_decoding_arguments, batch_options, decoding_options,
                                   set_threads)

HELP = ("score a model directory: a translation model translates a test set (sacreBLEU with signature, chrF, "
        "lower-cased BLEU); other families go to their own evaluator (see --model)")


def _evaluators() -> dict[str, str]:
    """``{family title: verb}``: the evaluator each family registers (attnlab.families);
    ``attnlab evaluate --model DIR ...`` for a family other than translation runs that verb
    with the same arguments (main.py asks :func:`routed_argv` before parsing)."""
    from attnlab.families import families

    return {family.title: family.evaluate for family in families() if family.evaluate}


def routed_argv(argv: list[str]) -> list[str]:
    """``argv`` (starting with "evaluate") with the verb replaced by the evaluator of the
    model's family, when ``--model DIR`` names a directory of a family with its own
    evaluator; otherwise unchanged (errors are left to the verb that runs)."""
    from attnlab.families import family_for_directory

    model = None
    for i, arg in enumerate(argv):
        if arg == "--model" and i + 1 < len(argv):
            model = argv[i + 1]
        elif arg.startswith("--model="):
            model = arg.split("=", 1)[1]
    if model is None:
        return argv
    family = family_for_directory(model)
    verb = family.evaluate if family is not None else None
    return [verb, *argv[1:]] if verb and verb != "evaluate" else argv


def add_arguments(parser) -> None:
    add_decoding_arguments(parser)
    parser.epilog = ("--model DIR of another family runs its evaluator with these arguments: "
                     + ", ".join(f"{title} -> attnlab {verb}" for title, verb in _evaluators().items()
                                 if verb != "evaluate"))
    from attnlab.cli.options import add_named_data_arguments

    add_named_data_arguments(parser)
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"), help="(default: test)")
    parser.add_argument("--src-file", help="your source sentences, one a line")
    parser.add_argument("--ref-file", help="reference translations aligned with --src-file")
    parser.add_argument("--limit", type=int, help="score only the first N sentences")
    add_batch_arguments(parser)
    parser.add_argument("--output", "-o", help="also write the translations to this file")
    parser.add_argument("--show", type=int, default=0, help="print N example translations (default: 0)")
    parser.add_argument("--json", help="also write the scores as JSON to this file")
    from attnlab.cli.options import add_quantize_argument

    add_quantize_argument(parser)


def run(args) -> int:
    import json
    import time

    from attnlab.data import get_parallel_dataset, read_parallel
    from attnlab.evaluation import score_translations
    from attnlab.translation import Translator

    set_threads(args.threads)
    from attnlab.cli.options import describe_device, resolve_device

    device = resolve_device(args.device)
    translator = Translator.load(args.model, device=device)  # a missing model is the first thing to say
    from attnlab.cli.options import apply_quantize

    apply_quantize(translator.model, args.quantize, device)
    batching = batch_options(args, device)
    if (args.data is None) == (args.src_file is None and args.ref_file is None):
        raise ValueError("give either --data NAME or --src-file and --ref-file")
    if args.data is not None:
        src_lang = args.src_lang or translator.info.get("src_lang")
        tgt_lang = args.tgt_lang or translator.info.get("tgt_lang")
        if not (src_lang and tgt_lang):
            raise ValueError(f"{args.model} does not record its languages: pass --src and --tgt")
        try:
            corpus = get_parallel_dataset(args.data, args.split, src_lang, tgt_lang, root=args.data_root)
        except FileNotFoundError as error:
            raise ValueError(str(error)) from None
    else:
        if args.src_file is None or args.ref_file is None:
            raise ValueError("--src-file and --ref-file go together")
        for path in (args.src_file, args.ref_file):
            try:
                open(path, "rb").close()
            except OSError as error:
                raise ValueError(f"{path}: {error.strerror}") from None
        corpus = read_parallel(args.src_file, args.ref_file)
    pairs = corpus.pairs[: args.limit] if args.limit else corpus.pairs
    sources = [src for src, _ in pairs]
    references = [ref for _, ref in pairs]

    started = time.perf_counter()
    hypotheses = translator.translate(sources, **batching, **decoding_options(args))
    seconds = time.perf_counter() - started
    scores = score_translations(hypotheses, references)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.writelines(h + "\n" for h in hypotheses)
    description = corpus.description or f"{args.src_file} -> {args.ref_file}"
    if args.show:
        shown = min(args.show, len(sources))
        print(f"The first {shown} sentences of {description} (in file order, not chosen):\n")
    for source, hypothesis, reference in list(zip(sources, hypotheses, references))[: args.show]:
        print(f"  source:      {source}\n  translation: {hypothesis}\n  reference:   {reference}\n")
    print(f"{description}: {scores.sentences} sentences translated in {seconds:.1f} s on "
          f"{describe_device(device)} (beam {args.beam}, alpha {args.alpha})")
    print(scores.report())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({**scores.to_dict(), "data": description, "beam": args.beam, "alpha": args.alpha,
                       "seconds": seconds}, out, indent=1)
            out.write("\n")
    return 0
