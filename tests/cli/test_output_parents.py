"""One rule for output paths over every verb (issue 39, 17; docs/files.md): a missing
directory above an output is made when the output is written, a file in the way or an
existing output without --force is refused, naming the flag, and every output is checked
before any model is read (export-onnx checked an existing -o only after the export)."""

import argparse
import json

import pytest

from attnlab.cli.main import build_parser, main
from attnlab.files import atomic_write_bytes, check_output_file

# Every option through which a verb writes a file or a directory of its own, with an
# argument vector that reaches the check: MODEL is a directory whose config.json names the
# family the verb takes but which holds no weights (reading the model fails), OUT the output.
# Training verbs (--out RUN, tests/training) and demo/data (their own tests) are left out.
CASES = {
    ("evaluate", "--output"): ("transformer", ["--data", "multi30k", "--output", "OUT.txt"]),
    ("evaluate", "--json"): ("transformer", ["--data", "multi30k", "--json", "OUT.json"]),
    ("translate", "--output"): ("transformer", ["--input", "IMAGE", "--output", "OUT.txt"]),
    ("attention", "-o"): ("transformer", ["Ein Hund.", "-o", "OUT.png"]),
    ("evaluate-lm", "--json"): ("decoder_lm", ["--json", "OUT.json"]),
    ("evaluate-bert", "--json"): ("bert", ["--json", "OUT.json"]),
    ("evaluate-vit", "--out"): ("vit", ["--data", "digits", "--out", "OUTDIR"]),
    ("evaluate-text-classifier", "--out"): ("bert_classifier", ["--data", "IMAGE", "--out", "OUTDIR"]),
    ("vit-figures", "--out"): ("vit", ["--out", "OUTDIR"]),
    ("caption", "--attention-dir"): ("captioner", ["IMAGE", "--attention-dir", "OUTDIR"]),
    ("evaluate-caption", "--figures"): ("captioner", ["--figures", "OUTDIR"]),
    ("evaluate-caption", "--json"): ("captioner", ["--json", "OUT.json"]),
    ("imagine", "--out"): ("text_to_image", ["a red circle", "--out", "OUT.png"]),
    ("evaluate-text-to-image", "--json"): ("text_to_image", ["--json", "OUT.json"]),
    ("evaluate-text-to-image", "--grid"): ("text_to_image", ["--grid", "OUT.png"]),
    ("sample-images", "--out"): ("image_transformer", ["--out", "OUT.png"]),
    ("complete-image", "--out"): ("image_transformer", ["IMAGE", "--keep-rows", "2", "--out", "OUT.png"]),
    ("super-resolve", "--out"): ("image_transformer", ["IMAGE", "--out", "OUT.png"]),
    ("super-resolve", "--comparison"): ("image_transformer", ["IMAGE", "--out", "big.png", "--comparison",
                                                              "OUT.png"]),
    ("evaluate-image", "--json"): ("image_transformer", ["--json", "OUT.json"]),
    ("evaluate-image", "--figure"): ("image_transformer", ["--super-resolve", "2", "--figure", "OUT.png"]),
    ("generate-music", "--out"): ("music_transformer", ["--out", "OUT.mid"]),
    ("evaluate-music", "--json"): ("music_transformer", ["--json", "OUT.json"]),
    ("explore", "--html"): ("decoder_lm", ["--html", "OUT.html"]),
    ("export-onnx", "-o"): ("decoder_lm", ["-o", "OUT.onnx"]),
    ("export", "-o"): ("decoder_lm", ["--format", "hf", "-o", "OUTDIR"]),
}
# Output options of verbs that need no model, or write a model directory as a whole.
NO_MODEL = {("average", "-o"), ("positions", "--out"), ("complexity", "--out"), ("demo", "--out"), ("curves", "-o"),
            ("data list", "--to"), ("data get", "--to")}
OUTPUT_FLAGS = {"-o", "--out", "--output", "--json", "--html", "--grid", "--figure", "--figures", "--comparison",
                "--attention-dir", "--to"}


def _verb_output_options() -> set[tuple[str, str]]:
    """(verb, output option) of every verb the parser knows, training verbs left out."""
    found = set()

    def walk(name, parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child_name, child in action.choices.items():
                    walk(f"{name} {child_name}".strip(), child)
            elif set(action.option_strings) & OUTPUT_FLAGS and not name.startswith("train"):
                flag = "-o" if "-o" in action.option_strings and action.dest == "out" else None
                names = [s for s in action.option_strings if s in OUTPUT_FLAGS]
                found.add((name, flag or ("--output" if "--output" in names else names[0])))

    walk("", build_parser())
    return found


def test_every_verb_output_is_in_the_table():
    # A new verb with an output joins CASES (or NO_MODEL), so the checks below cover it.
    assert _verb_output_options() == set(CASES) | NO_MODEL


def _fake_model(tmp_path, family: str):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"family": family}))
    return model


def _argv(tmp_path, verb, family, extra, out):
    model = _fake_model(tmp_path, family)
    image = tmp_path / "in.png"
    from PIL import Image

    Image.new("L", (8, 8)).save(image)
    argv = [*verb.split(), "--model", str(model)]
    for arg in extra:
        arg = {"IMAGE": str(image)}.get(arg, arg)
        if arg.startswith("OUT"):
            arg = str(out) + arg[len("OUTDIR"):] if arg == "OUTDIR" else str(out.with_suffix(arg[3:]))
        argv.append(arg)
    return argv


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("case", sorted(CASES), ids=lambda case: " ".join(case))
def test_an_existing_output_is_refused_before_the_model_is_read(case, tmp_path, capsys):
    verb, flag = case
    family, extra = CASES[case]
    out = tmp_path / "mine"
    argv = _argv(tmp_path, verb, family, extra, out)
    written = [a for a in argv if a.startswith(str(out))][0]
    if extra[extra.index(flag) + 1] == "OUTDIR":  # a directory it writes named files into
        from pathlib import Path

        Path(written).mkdir()
        names = {"vit-figures": "attention_maps.png", "evaluate-vit": "results.json",
                 "evaluate-text-classifier": "results.json",
                 "caption": "in.png", "evaluate-caption": "image_0000.png", "export": "notes.txt"}
        (Path(written) / names[verb]).write_text("mine")
        kept = Path(written) / names[verb]
    else:
        kept = tmp_path / written
        kept.write_text("mine")
    code, err = _run(argv, capsys)
    assert code == 2 and err.startswith(f"attnlab {verb}: error: {flag}"), err
    assert "pass --force" in err and "Traceback" not in err, err
    assert kept.read_text() == "mine"


@pytest.mark.parametrize("case", sorted(case for case in CASES if CASES[case][1][CASES[case][1].index(case[1]) + 1]
                                        != "OUTDIR"), ids=lambda case: " ".join(case))
def test_a_file_on_the_output_path_is_refused_before_the_model_is_read(case, tmp_path, capsys):
    verb, flag = case
    family, extra = CASES[case]
    (tmp_path / "notes.txt").write_text("mine")
    out = tmp_path / "notes.txt" / "x"
    code, err = _run(_argv(tmp_path, verb, family, extra, out), capsys)
    assert code == 2 and err.startswith(f"attnlab {verb}: error: {flag}"), err
    assert "notes.txt is a file, not a directory" in err, err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_missing_parent_is_made_by_the_writer_and_only_when_it_writes(tmp_path):
    out = check_output_file(tmp_path / "a" / "b" / "x.png", force=False, flag="-o", suffixes=(".png",))
    assert not (tmp_path / "a").exists()  # checking makes nothing
    atomic_write_bytes(out, b"png")
    assert out.read_bytes() == b"png"

    def fail(path):
        raise OSError(28, "No space left on device")

    from attnlab.files import atomic_write

    with pytest.raises(OSError):
        atomic_write(tmp_path / "c" / "d" / "y.png", fail)
    assert not (tmp_path / "c").exists()  # a failed write leaves no directory behind


def test_explore_html_and_export_onnx_make_a_missing_parent(char_lm, tmp_path, capsys):
    # explore --html and export-onnx refused nope/x while attention and generate-music made it.
    page = tmp_path / "nope" / "deeper" / "page.html"
    assert main(["explore", "--model", str(char_lm), "--html", str(page), "abc"]) == 0
    assert page.read_text().startswith("<!DOCTYPE html>")
    pytest.importorskip("onnx")
    graph = tmp_path / "new" / "lm.onnx"
    assert main(["export-onnx", "--model", str(char_lm), "-o", str(graph), "--no-check"]) == 0
    assert graph.stat().st_size > 1000
