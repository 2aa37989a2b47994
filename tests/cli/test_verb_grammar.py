"""One grammar for every verb: each verb that runs a model takes ``--threads N`` and
``--device`` from attnlab.cli.options, so ``--threads 1`` (what the README recommends)
works everywhere and ``--threads 0`` is refused at the parser, naming the flag."""

import argparse

import pytest

from attnlab.cli import options
from attnlab.cli.main import build_parser, main, verbs

# Verbs that run no model, and why they need neither option.
RUN_NO_MODEL = {
    "presets": "lists preset names and sizes; builds nothing",
    "average": "averages checkpoint tensors file by file; runs no forward pass",
    "positions": "draws the sinusoidal position table; no model",
    "curves": "draws runs' metrics.jsonl; no model",
    "data list": "lists the named data sets and where they are; no model",
    "data get": "downloads, checks and converts data files; no model",
}
# Verbs that run a model on the CPU only: --threads, but no --device.
CPU_ONLY = {
    "export-onnx": "torch's exporter and the onnxruntime check run on the CPU",
    "export": "renames and writes weights on the CPU; nothing is computed on a device",
    "complexity": "measures Table 1 on this machine's CPU (its report names the thread count)",
}


def _leaf_parsers():
    """(``"train lm"``, parser) for every verb and sub-verb."""
    root = build_parser()

    def walk(name, parser):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield name, parser
            return
        for child_name, child in subs[0].choices.items():
            yield from walk(f"{name} {child_name}", child)

    verbs = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in verbs.choices.items():
        yield from walk(name, parser)


LEAVES = dict(_leaf_parsers())


def _option(parser, flag):
    return next((a for a in parser._actions if flag in a.option_strings), None)


def test_the_lists_name_real_verbs():
    assert set(RUN_NO_MODEL) | set(CPU_ONLY) <= set(verbs()) | set(LEAVES)
    assert "train lm" in LEAVES and "caption" in LEAVES  # the walk reaches sub-verbs


@pytest.mark.parametrize("verb", sorted(LEAVES))
def test_every_verb_that_runs_a_model_takes_threads_and_device(verb):
    parser = LEAVES[verb]
    threads, device = _option(parser, "--threads"), _option(parser, "--device")
    if verb in RUN_NO_MODEL:
        return
    assert threads is not None, f"attnlab {verb} has no --threads"
    # the shared type (options.bounded_int), not a per-verb int that lets 0 through
    assert threads.type.__name__ == "whole number", f"attnlab {verb} --threads is type={threads.type}"
    with pytest.raises(argparse.ArgumentTypeError, match="at least 1|between 1"):
        threads.type("0")
    if verb not in CPU_ONLY:
        assert device is not None, f"attnlab {verb} has no --device"
        assert device.type is options.device_name


@pytest.mark.parametrize("verb", sorted(v for v in LEAVES if v not in RUN_NO_MODEL))
def test_threads_zero_is_refused_naming_the_flag(verb, capsys):
    argv = [*verb.split(), "--threads", "0"]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--threads" in err and "Traceback" not in err


def test_threads_one_is_applied(monkeypatch, capsys):
    import torch

    seen = []
    monkeypatch.setattr(torch, "set_num_threads", seen.append)  # records, changes nothing
    # embed needs a model; a missing one is an error after --threads was applied
    assert main(["embed", "--model", "/nonexistent/attnlab-model", "--threads", "1", "x"]) == 2
    assert seen == [1]
    assert "Traceback" not in capsys.readouterr().err


def test_every_evaluator_takes_limit_with_one_bound():
    """The subset size is ``--limit N`` in every family's evaluator (options.add_limit_argument),
    refused at the parser below its bound, naming the flag."""
    from attnlab.families import families

    evaluators = {family.evaluate for family in families() if family.evaluate}
    assert evaluators >= {"evaluate", "evaluate-lm", "evaluate-vit", "evaluate-music", "evaluate-image",
                          "evaluate-caption", "evaluate-text-to-image", "evaluate-bert"}
    for verb in sorted(evaluators):
        limit = _option(LEAVES[verb], "--limit")
        assert limit is not None, f"attnlab {verb} has no --limit"
        with pytest.raises(argparse.ArgumentTypeError, match="0 must be (at least|between)"):
            limit.type("0")


# Verbs that read a named data set from where named data sets live ($ATTNLAB_DATA).
NAMED_DATA = ("train translation", "evaluate", "train music", "evaluate-music", "generate-music", "train image",
              "evaluate-image")


@pytest.mark.parametrize("verb", NAMED_DATA)
def test_every_verb_reading_named_data_takes_data_dir(verb):
    """``--data-dir DIR`` means one thing everywhere: where named data sets live."""
    option = _option(LEAVES[verb], "--data-dir")
    assert option is not None and option.dest == "data_dir", verb
    assert "where named data sets live" in option.help


@pytest.mark.parametrize("verb", ["translate", "evaluate", "attention", "average", "export-onnx", "curves"])
def test_one_output_is_o_or_out(verb):
    """A verb with one output path takes it as ``-o`` and ``--out`` alike."""
    option = _option(LEAVES[verb], "-o")
    assert option is not None and "--out" in option.option_strings, verb
