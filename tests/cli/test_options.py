"""Argument helpers shared by the CLI verbs: ``--set FIELD=VALUE``, ``--device``, and the usage shown on a bad option."""

import pytest

from attnlab.cli.options import parse_overrides


def test_values_become_ints_floats_bools_or_strings():
    parsed = parse_overrides(["num_layers=4", "dropout=0.3", "lr=1e-3", "norm_first=false", "tie=True",
                              "activation=gelu", "name=a=b"])
    assert parsed == {"num_layers": 4, "dropout": 0.3, "lr": 1e-3, "norm_first": False, "tie": True,
                      "activation": "gelu", "name": "a=b"}
    assert isinstance(parsed["num_layers"], int) and isinstance(parsed["dropout"], float)


def test_comma_separated_integers_become_a_tuple():
    assert parse_overrides(["stem_channels=32,64", "x=8", "names=a,b", "sizes=1.5,2"]) == {
        "stem_channels": (32, 64), "x": 8, "names": "a,b", "sizes": "1.5,2"}


@pytest.mark.parametrize("item", ["dropout", "=0.3", "dropout=", ""])
def test_malformed_items_are_named(item):
    with pytest.raises(ValueError, match="FIELD=VALUE") as error:
        parse_overrides([item], flag="--set")
    assert repr(item) in str(error.value)


def test_device_names_are_checked_by_the_parser():
    import argparse

    from attnlab.cli.options import device_name

    assert [device_name(name) for name in ("auto", "CPU", "cuda", "cuda:1")] == ["auto", "cpu", "cuda", "cuda:1"]
    for bad in ("gpu", "cuda:", "cuda:x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="not a device"):
            device_name(bad)


def test_auto_is_cuda_only_when_available_and_cuda_without_it_says_so(monkeypatch):
    import torch

    from attnlab.cli.options import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="--device cuda: CUDA is not available here"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("auto") == "cuda" and resolve_device("cuda:0") == "cuda:0"
    with pytest.raises(ValueError, match="only 1 CUDA device"):
        resolve_device("cuda:1")


@pytest.mark.parametrize("verb", [["train", "translation"], ["train", "lm"], ["translate"], ["evaluate"],
                                  ["attention"], ["generate"], ["demo"], ["train", "vit"], ["classify"],
                                  ["evaluate-vit"], ["vit-figures"], ["embed"], ["explore"]])
def test_every_verb_that_runs_a_model_has_a_device_option_defaulting_to_auto(verb, capsys):
    from attnlab.cli.main import main

    with pytest.raises(SystemExit):
        main([*verb, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--device auto|cpu|cuda[:N]" in help_text and "(default: auto)" in help_text


def test_a_bad_option_prints_the_usage_of_its_verb(capsys):
    from attnlab.cli.main import main

    for argv, usage in ((["attention", "--model", "m", "a sentence", "--layer", "3"], "usage: attnlab attention"),
                        (["train", "lm", "--out", "o", "--bogus"], "usage: attnlab train lm"),
                        (["--bogus"], "usage: attnlab [-h]")):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        error = capsys.readouterr().err
        assert exit_info.value.code == 2 and error.startswith(usage) and "unrecognized arguments" in error


def test_translate_on_cuda_without_cuda_is_a_clear_error(monkeypatch, capsys, tmp_path):
    import torch

    from attnlab.cli.main import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("Hallo\n"))
    assert main(["translate", "--model", str(tmp_path), "--device", "cuda"]) == 2
    assert "CUDA is not available here" in capsys.readouterr().err


def test_presets_count_names_the_vocabulary_it_counts_at(capsys):
    import attnlab
    from attnlab.cli.main import main

    assert main(["presets", "--count"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.startswith("multi30k "))
    expected = attnlab.create_model("multi30k").num_parameters()
    assert f"{expected:,d}" in row and "vocab_size 8,000" in row


def test_precision_auto_is_bf16_only_on_a_gpu_that_has_it(monkeypatch):
    import argparse

    import torch

    from attnlab.cli.options import add_precision_argument, resolve_precision

    parser = argparse.ArgumentParser()
    add_precision_argument(parser)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    auto = parser.parse_args([])
    assert resolve_precision(auto, "cuda") and resolve_precision(auto, "cuda:1")
    assert not resolve_precision(auto, "cpu")
    assert not resolve_precision(parser.parse_args(["--precision", "fp32"]), "cuda")
    assert resolve_precision(parser.parse_args(["--bf16"]), "cpu")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert not resolve_precision(auto, "cuda")


def test_evaluate_routing_leaves_translation_and_unreadable_models_alone(tmp_path):
    from attnlab.cli.evaluate import routed_argv

    argv = ["evaluate", "--model", str(tmp_path / "missing"), "--data", "multi30k"]
    assert routed_argv(argv) == argv                      # no config.json: the verb itself reports it
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("[1, 2")
    assert routed_argv(["evaluate", f"--model={tmp_path / 'bad'}"])[0] == "evaluate"
    (tmp_path / "tr").mkdir()
    (tmp_path / "tr" / "config.json").write_text('{"family": "transformer"}')
    assert routed_argv(["evaluate", "--model", str(tmp_path / "tr")])[0] == "evaluate"
    (tmp_path / "vit").mkdir()
    (tmp_path / "vit" / "config.json").write_text('{"family": "vit"}')
    assert routed_argv(["evaluate", "--model", str(tmp_path / "vit"), "--out", "x"]) == [
        "evaluate-vit", "--model", str(tmp_path / "vit"), "--out", "x"]
    from attnlab.cli.main import verbs
    from attnlab.families import families
    from attnlab.models.registry import known_families

    for family in families():  # every route names a registered model family and a verb
        assert family.config_family in known_families() and family.evaluate in (None, *verbs())
