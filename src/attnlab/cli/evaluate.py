"""``attnlab evaluate``: score a model directory of any family. A translation model is
scored here (the translation family's scorer, :data:`TRANSLATION_SCORER`: a test set
translated and scored with sacreBLEU, chrF and lower-cased BLEU); ``--model DIR`` of
another family runs the evaluator verb its registration names (attnlab.families), with
the same arguments."""

import importlib

HELP = ("score a model directory: a translation model translates a test set (sacreBLEU with signature, chrF, "
        "lower-cased BLEU); other families go to their own evaluator (see --model)")

# The translation family's registration says evaluate="evaluate": this verb scores its
# models itself, with the module named here (as the registry names code, imported on use).
TRANSLATION_SCORER = "attnlab.families.translation.evaluate"


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
    importlib.import_module(TRANSLATION_SCORER).add_arguments(parser)
    parser.epilog = ("--model DIR of another family runs its evaluator with these arguments: "
                     + ", ".join(f"{title} -> attnlab {verb}" for title, verb in _evaluators().items()
                                 if verb != "evaluate"))


def run(args) -> int:
    return importlib.import_module(TRANSLATION_SCORER).run(args)
