"""caption, evaluate-caption, imagine, evaluate-text-to-image, train text-to-image: nothing
the user owns is replaced without --force, every size is bounded before anything is
allocated, and a wrong input is one line naming the flag or the file (issues 30/31).

The models are untrained tiny ones written straight to disk (no training: fast)."""

import os

import pytest

from attnlab.cli.main import main


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """``t2i`` (TextToImage + vqvae/), ``cap`` (Captioner), ``lm``, ``vit`` model directories
    and ``scene.png`` (a 32x32 RGB scene)."""
    import torch

    from attnlab import create_model
    from attnlab.data.images import to_bytes_png
    from attnlab.data.scenes import load_scenes
    from attnlab.tasks.captioning import train_caption_tokenizer

    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    scenes = load_scenes("valid", count=40)
    tokenizer = train_caption_tokenizer(scenes.captions, 200)
    pieces = tokenizer.save(root).read_bytes()
    vqvae = create_model("vqvae_tiny")
    t2i = create_model("text_to_image_tiny", text_vocab_size=tokenizer.vocab_size,
                       image_vocab_size=vqvae.config.codebook_size, grid=vqvae.config.grid[0], text_length=24)
    t2i_dir = t2i.save_pretrained(root / "t2i", extra_files={
        "tokenizer.model": pieces, "text_to_image.json": b'{"data": "scenes", "image_size": 32}\n'})
    vqvae.save_pretrained(t2i_dir / "vqvae")
    create_model("captioner_tiny", vocab_size=tokenizer.vocab_size, max_positions=8).save_pretrained(
        root / "cap", extra_files={"tokenizer.model": pieces,
                                   "caption.json": b'{"data": "scenes", "image_size": 32}\n'})
    create_model("lm_tiny", vocab_size=50).save_pretrained(root / "lm")
    create_model("vit_tiny_patch7_28").save_pretrained(root / "vit")
    (root / "scene.png").write_bytes(to_bytes_png(scenes.images[0]))
    return root


def _fails(argv, capsys, *needles, code=2):
    """Run attnlab; the exit code is ``code`` and the last stderr line names every needle."""
    try:
        got = main(argv)
    except SystemExit as stop:  # argparse errors
        got = stop.code
    err = capsys.readouterr().err
    assert got == code, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    for needle in needles:
        assert needle in last, last
    return last


# -- nothing lost -----------------------------------------------------------------------
def test_imagine_keeps_an_existing_file_unless_force(models, tmp_path, capsys):
    out = tmp_path / "imagine.png"
    out.write_bytes(b"the user's picture")
    args = ["imagine", "--model", str(models / "t2i"), "--n", "1", "--scale", "1", "--out", str(out), "red"]
    _fails(args, capsys, "--out", str(out), "--force")
    assert out.read_bytes() == b"the user's picture"
    assert main([*args, "--force"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["imagine.png"]  # no temporary left


def test_imagine_does_not_replace_a_symlink(models, tmp_path, capsys):
    target = tmp_path / "target.txt"
    target.write_text("keep me")
    link = tmp_path / "link.png"
    link.symlink_to(target)
    _fails(["imagine", "--model", str(models / "t2i"), "--n", "1", "--out", str(link), "red"], capsys,
           "--out", "symlink")
    assert link.is_symlink() and os.readlink(link) == str(target) and target.read_text() == "keep me"


def test_caption_keeps_existing_attention_figures_unless_force(models, tmp_path, capsys):
    figures = tmp_path / "attn"
    figures.mkdir()
    (figures / "scene.png").write_bytes(b"the user's figure")
    (figures / "notes.txt").write_text("other files stay")
    args = ["caption", "--model", str(models / "cap"), "--beam", "1", "--attention-dir", str(figures),
            str(models / "scene.png")]
    _fails(args, capsys, "--attention-dir", "scene.png", "--force")
    assert (figures / "scene.png").read_bytes() == b"the user's figure"
    assert main([*args, "--force"]) == 0
    assert (figures / "scene.png").read_bytes()[:4] == b"\x89PNG"
    assert (figures / "notes.txt").read_text() == "other files stay"


def test_caption_refuses_two_images_with_one_figure_name(models, tmp_path, capsys):
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "scene.png").write_bytes((models / "scene.png").read_bytes())
    _fails(["caption", "--model", str(models / "cap"), "--attention-dir", str(tmp_path / "new"),
            str(models / "scene.png"), str(other / "scene.png")], capsys, "--attention-dir", "scene.png")
    assert not (tmp_path / "new").exists()


def test_evaluate_verbs_keep_existing_results(models, tmp_path, capsys):
    mine = tmp_path / "results.json"
    mine.write_text("mine")
    _fails(["evaluate-caption", "--model", str(models / "cap"), "--json", str(mine)], capsys, "--json", "--force")
    _fails(["evaluate-text-to-image", "--model", str(models / "t2i"), "--json", str(mine)], capsys, "--json")
    grid = tmp_path / "grid.png"
    grid.write_bytes(b"mine")
    _fails(["evaluate-text-to-image", "--model", str(models / "t2i"), "--grid", str(grid)], capsys, "--grid")
    assert mine.read_text() == "mine" and grid.read_bytes() == b"mine"


# -- silent wrong results ---------------------------------------------------------------
@pytest.mark.parametrize("flag, value", [("--top-k", "5"), ("--temperature", "0.5"), ("--seed", "3")])
def test_caption_sampling_options_without_sample_are_refused(models, capsys, flag, value):
    _fails(["caption", "--model", str(models / "cap"), flag, value, str(models / "scene.png")], capsys,
           flag, "--sample")


def test_caption_beam_with_sample_is_refused(models, capsys):
    _fails(["caption", "--model", str(models / "cap"), "--beam", "2", "--sample", str(models / "scene.png")],
           capsys, "--beam", "--sample")


def test_caption_sampling_still_works(models, capsys):
    assert main(["caption", "--model", str(models / "cap"), "--sample", "--top-k", "5", "--seed", "1",
                 str(models / "scene.png")]) == 0
    assert capsys.readouterr().out.startswith(str(models / "scene.png") + "\t")


@pytest.mark.parametrize("text, field", [('{"image_size": "big"}', "image_size"), ('[1, 2]', "JSON object"),
                                         ("garbage", "not valid JSON"), ('{"data": 3}', "data"),
                                         ('{"image_size": 64}', "image_size"), ('{"colour": 1}', "colour")])
def test_a_bad_caption_json_names_the_file_and_field(models, tmp_path, capsys, text, field):
    import shutil

    broken = tmp_path / "cap"
    shutil.copytree(models / "cap", broken)
    (broken / "caption.json").write_text(text)
    _fails(["caption", "--model", str(broken), str(models / "scene.png")], capsys, "caption.json", field)


@pytest.mark.parametrize("text, field", [('{"image_size": "big"}', "image_size"), ("garbage", "not valid JSON"),
                                         ('{"temperature": -1}', "temperature"), ('{"top_k": 1.5}', "top_k"),
                                         ('"a string"', "JSON object")])
def test_a_bad_text_to_image_json_names_the_file_and_field(models, tmp_path, capsys, text, field):
    import shutil

    broken = tmp_path / "t2i"
    shutil.copytree(models / "t2i", broken)
    (broken / "text_to_image.json").write_text(text)
    out = tmp_path / "x.png"
    _fails(["imagine", "--model", str(broken), "--n", "1", "--out", str(out), "red"], capsys,
           "text_to_image.json", field)
    assert not out.exists()


# -- bounds, named ----------------------------------------------------------------------
@pytest.mark.parametrize("argv, flag", [
    (["caption", "--model", "M/cap", "--beam", "1000000", "IMG"], "--beam"),
    (["caption", "--model", "M/cap", "--sample", "--top-k", "0", "IMG"], "--top-k"),
    (["evaluate-caption", "--model", "M/cap", "--beam", "1000000"], "--beam"),
    (["imagine", "--model", "M/t2i", "--n", "1000000", "--out", "OUT", "red"], "--n"),
    (["imagine", "--model", "M/t2i", "--rerank", "M/cap", "--candidates", "1000000", "--out", "OUT", "red"],
     "--candidates"),
    (["imagine", "--model", "M/t2i", "--scale", "100000", "--out", "OUT", "red"], "--scale"),
    (["imagine", "--model", "M/t2i", "--top-k", "-1", "--out", "OUT", "red"], "--top-k"),
    (["imagine", "--model", "M/t2i", "--n", "100", "--rerank", "M/cap", "--candidates", "64", "--out", "OUT", "red"],
     "--candidates"),
    (["imagine", "--model", "M/t2i", "--n", "2000", "--out", "OUT", "red", "blue", "green"], "--n"),
    (["imagine", "--model", "M/t2i", "--n", "4000", "--scale", "16", "--out", "OUT", "red"], "--scale"),
    (["imagine", "--model", "M/t2i", "--candidates", "2", "--out", "OUT", "red"], "--rerank"),
    (["evaluate-text-to-image", "--model", "M/t2i", "--prompts", "1"], "--prompts"),
])
def test_huge_or_meaningless_sizes_are_refused_naming_the_flag(models, tmp_path, capsys, argv, flag):
    argv = [str(models / a[2:]) if a.startswith("M/") else a for a in argv]
    argv = [str(models / "scene.png") if a == "IMG" else str(tmp_path / "o.png") if a == "OUT" else a
            for a in argv]
    _fails(argv, capsys, flag)
    assert not (tmp_path / "o.png").exists()


# -- another family's model, named by its flag ------------------------------------------
@pytest.mark.parametrize("flag, other, what", [("--vqvae", "lm", "not a VQ-VAE"),
                                                ("--classifier", "vit", "not an attribute reader"),
                                                ("--vqvae", "nowhere", "no such model directory")])
def test_train_text_to_image_refuses_another_family_before_training(models, tmp_path, capsys, flag, other, what):
    out = tmp_path / "run"
    argv = ["train", "text-to-image", "--out", str(out), flag, str(models / other), "--no-progress",
            "--device", "cpu"]
    _fails(argv, capsys, flag, what)
    assert not out.exists()


def test_other_families_given_to_the_caption_and_t2i_verbs(models, tmp_path, capsys):
    _fails(["caption", "--model", str(models / "lm"), str(models / "scene.png")], capsys, "--model", "not a captioner")
    _fails(["imagine", "--model", str(models / "cap"), "--out", str(tmp_path / "o.png"), "red"], capsys,
           "--model", "not a text-to-image model")
    _fails(["imagine", "--model", str(models / "t2i"), "--rerank", str(models / "lm"), "--n", "1",
            "--out", str(tmp_path / "o.png"), "red"], capsys, "--rerank", "not a captioner")
    _fails(["evaluate-text-to-image", "--model", str(models / "t2i"), "--classifier", str(models / "vit")], capsys,
           "--classifier", "not an attribute reader")
    _fails(["evaluate-text-to-image", "--model", str(models / "t2i")], capsys, "--classifier")
    _fails(["evaluate-text-to-image", "--model", str(models / "t2i"), "--classifier", str(tmp_path / "nowhere")],
           capsys, "--classifier", "no such model directory")
    assert not (tmp_path / "o.png").exists()
