"""``attnlab export --model DIR --format hf|timm -o OUT``: a model directory in the layout
another library reads (attnlab.interop.export: GPT-2, BERT, MarianMT and ViT for
transformers, ViT for timm), with its tokenizer, computing what attnlab computes; what the
format cannot express is refused, naming the difference.

-o OUT follows the output rule of a directory written as a whole (docs/files.md): a
missing or empty OUT is written; any other existing OUT only with --force, replaced
atomically; never a symlink, never the model directory or one holding it, never the
current directory. Everything is checked before anything is written.
"""

HELP = "export a model directory to the layout transformers (--format hf) or timm (--format timm) reads"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_force_argument, add_threads_argument

    parser.add_argument("--model", required=True,
                        help="model directory (attnlab's, or a HuggingFace BERT, GPT-2, MarianMT or timm ViT one)")
    parser.add_argument("--format", required=True, choices=("hf", "timm"),
                        help="hf: transformers (GPT-2 for language models, BERT, MarianMT for translation, "
                             "ViTForImageClassification); timm: a timm ViT checkpoint directory")
    parser.add_argument("-o", "--out", required=True, help="the directory to write")
    add_force_argument(parser, "a non-empty -o directory (replaced as a whole)")
    add_threads_argument(parser)  # runs on the CPU: no --device


def run(args) -> int:
    from pathlib import Path

    from attnlab.files import atomic_directory, check_output_directory, refuse_replacing_inputs
    from attnlab.models.registry import require_model_directory

    source, out = Path(args.model), Path(args.out)
    require_model_directory(source, "--model")
    refuse_replacing_inputs(out, [source], flag="-o", verb="exporting")
    check_output_directory(out, force=args.force, flag="-o")

    from attnlab.cli.options import require_packages
    from attnlab.families import family_for_directory
    from attnlab.interop.export import NEEDS, exporter_for
    from attnlab.models.registry import load_config

    family = family_for_directory(source)
    if family is None:
        load_config(source)  # says what is wrong with config.json
        raise ValueError(f"--model {source}: not a model directory of a family attnlab knows")
    exporter = exporter_for(args.format, family.config_family)
    require_packages("export", *NEEDS.get((args.format, family.config_family), ()))
    import attnlab

    export = exporter(attnlab.load(source))  # every check of the format; raises before anything is written
    with atomic_directory(out) as temporary:
        written = export.write(temporary)
    print(f"wrote {out}: {', '.join(written)}")
    print(f"opens with {export.opens_with}")
    for note in export.notes:
        print(f"note: {note}")
    return 0
