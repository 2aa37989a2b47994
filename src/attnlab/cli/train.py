"""``attnlab train TASK``: every family's training task, from the family registry
(:mod:`attnlab.families`: a family with ``train`` offers ``attnlab train <its task>``).

Each task writes a loadable model directory to ``OUT/model``; ``OUT/checkpoints`` holds
resumable checkpoints and ``OUT/metrics.jsonl`` the training log.
"""


def _tasks() -> dict[str, str]:
    from attnlab.families import families

    return {family.task: family.train for family in families() if family.train}


HELP = "train a model (one task per family) and write a loadable model directory to OUT/model"


def add_arguments(parser) -> None:
    import importlib

    tasks = parser.add_subparsers(dest="task", metavar="TASK", required=True)
    for name, module_name in _tasks().items():
        module = importlib.import_module(module_name)
        task = tasks.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP))
        module.add_arguments(task)
        task.set_defaults(run=module.run)


def run(args) -> int:  # pragma: no cover - argparse requires a task, whose own run() is set
    raise ValueError("give a task: attnlab train TASK")
