"""What trying each verb with a huge or non-finite number and an existing output found:
demo's --out replaced a directory it did not write and --steps had no bound; a huge
--seed and a huge --temperature ended in internal errors. Each is now refused naming the
flag, before any work."""

import pytest

from attnlab.cli.main import main


def _refused(argv, capsys, *needles):
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "internal error" not in err, err
    for needle in needles:
        assert needle in err, err


def test_demo_keeps_a_directory_it_did_not_write(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("the user's config")
    (mine / "notes.txt").write_text("the user's notes")
    _refused(["demo", "--steps", "2", "--out", str(mine)], capsys, "--out", "notes.txt", "--force")
    assert (mine / "config.json").read_text() == "the user's config"
    assert sorted(p.name for p in mine.iterdir()) == ["config.json", "notes.txt"]


def test_demo_replaces_its_own_model_and_with_force_anything(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--steps", "2", "--device", "cpu", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert main(["demo", "--steps", "2", "--device", "cpu", "--out", str(out)]) == 0  # its own: replaced
    (out / "notes.txt").write_text("x")
    _refused(["demo", "--steps", "2", "--out", str(out)], capsys, "--out")
    assert main(["demo", "--steps", "2", "--device", "cpu", "--out", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]  # no temporary or old copy left


@pytest.mark.parametrize("argv, flag", [
    (["demo", "--steps", "100000000"], "--steps"),
    (["demo", "--seed", "99999999999999999999"], "--seed"),
    (["caption", "--model", "M", "--sample", "--seed", "99999999999999999999", "x.png"], "--seed"),
    (["caption", "--model", "M", "--sample", "--temperature", "1e308", "x.png"], "--temperature"),
    (["caption", "--model", "M", "--sample", "--temperature", "0", "x.png"], "--temperature"),
    (["imagine", "--model", "M", "--temperature", "1e308", "--out", "o.png", "red"], "--temperature"),
    (["imagine", "--model", "M", "--temperature", "nan", "--out", "o.png", "red"], "--temperature"),
    (["imagine", "--model", "M", "--seed", "-5", "--out", "o.png", "red"], "--seed"),
    (["evaluate-text-to-image", "--model", "M", "--temperature", "1e308"], "--temperature"),
    (["evaluate-text-to-image", "--model", "M", "--seed", "1e3"], "--seed"),
    (["train", "caption", "--beam", "1000", "--out", "O"], "--beam"),
    (["train", "caption", "--image-size", "100000", "--out", "O"], "--image-size"),
    (["train", "text-to-image", "--temperature", "1e300", "--out", "O"], "--temperature"),
    (["train", "lm", "--seed", "-1", "--out", "O"], "--seed"),  # torch.manual_seed's range, as the other verbs
    (["train", "bert", "--seed", "99999999999999999999", "--out", "O"], "--seed"),
    (["train", "translation", "--seed", "-3", "--out", "O"], "--seed"),
])
def test_huge_and_non_finite_numbers_are_refused_at_the_parser(argv, flag, capsys, tmp_path):
    _refused([str(tmp_path / "o") if a == "O" else a for a in argv], capsys, f"argument {flag}")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("extra, needles", [
    (["--top-p", "2"], ["argument --top-p"]),
    (["--top-k", "0"], ["argument --top-k"]),
    (["--temperature", "0"], ["argument --temperature"]),
    (["--max-new-tokens", "100"], ["--max-new-tokens 100", "at most 62", "--sliding-window"]),
])
def test_generate_names_the_flags_not_the_library_arguments(char_lm, capsys, extra, needles):
    try:
        code = main(["generate", "--model", str(char_lm), "--prompt", "ab", *extra])
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    assert code == 2 and out == ""  # refused before the prompt is echoed
    for needle in needles:
        assert needle in err
    for internal in ("top_p=", "top_k=", "max_new_tokens=", "sliding_window=", "greedy=True"):
        assert internal not in err
