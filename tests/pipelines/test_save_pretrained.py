"""``pipeline.save_pretrained(dir)`` writes the model WITH its tokenizer, class names, task
record and VQ-VAE, and ``attnlab.load(dir)`` reopens the same pipeline, for every family in
the registry and every other library's directory a pipeline reads (issue 39, point 20: a
HuggingFace BERT saved with ``model.save_pretrained`` lost its vocab.txt)."""

import os

import numpy as np
import pytest
import torch

import attnlab
from attnlab.pipelines import known_pipelines

IMAGE = np.random.default_rng(0).integers(0, 256, size=(28, 28), dtype=np.uint8)
SCENE = np.random.default_rng(1).integers(0, 256, size=(32, 32, 3), dtype=np.uint8)

# what each family's pipeline does, called the same way before and after the round trip
CALLS = {
    "transformer": lambda p: p.translate(["ein kleiner hund läuft", "Ein Mann fährt Fahrrad."], beam=2),
    "decoder_lm": lambda p: p.generate("ROMEO: a", max_new_tokens=6, greedy=True),
    "bert": lambda p: p.embed(["a man is playing guitar", "the dog runs"]),
    "bert_classifier": lambda p: (p.labels, p.classify(["a man is playing guitar", "the dog runs"], top_k=2)),
    "vit": lambda p: (p.classes, p.classify(IMAGE, top=3)),
    "captioner": lambda p: p.caption(SCENE, beam=2),
    "text_to_image": lambda p: p.imagine("a red circle", seed=0),
    "image_transformer": lambda p: (p.classes, p.sample(1, seed=0, label=0 if p.classes else None)),
    "music_transformer": lambda p: p.continue_music([1, 2, 3], steps=4, seed=0).tokens,
}
FIXTURES = ["translation_dir", "lm_char_dir", "lm_bpe_dir", "bert_dir", "hf_bert_dir", "text_classifier_dir", "vit_dir", "captioner_dir",
            "text_to_image_dir", "image_dir", "class_image_dir", "music_dir", "gpt2_dir", "marian_dir", "timm_dir",
            "exported_gpt2_dir"]


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from reference.foreign_dirs import gpt2_directory

    return gpt2_directory(tmp_path_factory.mktemp("gpt2") / "model")


@pytest.fixture(scope="module")
def exported_gpt2_dir(lm_char_dir, tmp_path_factory):
    """A GPT-2 directory `attnlab export` wrote from a character model: its tokenizer is a tokenizer.json."""
    pytest.importorskip("tokenizers")
    from attnlab.cli.main import main

    out = tmp_path_factory.mktemp("exported") / "gpt2"
    assert main(["export", "--model", str(lm_char_dir), "--format", "hf", "-o", str(out)]) == 0
    assert (out / "tokenizer.json").is_file() and not (out / "vocab.json").exists()
    return out


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from reference.foreign_dirs import marian_directory

    return marian_directory(tmp_path_factory.mktemp("marian") / "opus-mt")


@pytest.fixture(scope="module")
def timm_dir(tmp_path_factory):
    from reference.timm_loader import import_timm

    timm = import_timm()
    if timm is None:
        pytest.skip("timm is not installed")
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=28, patch_size=7, in_chans=1,
                              depth=1, num_classes=3).eval()
    directory = tmp_path_factory.mktemp("timm") / "vit"
    timm.models.save_for_hf(model, str(directory), safe_serialization=True,
                            data_config={"mean": (0.5,), "std": (0.25,)})
    return directory


def _same(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


def test_every_family_in_the_registry_is_covered():
    assert set(CALLS) == set(known_pipelines())


@pytest.mark.parametrize("fixture", FIXTURES)
def test_save_pretrained_then_attnlab_load_gives_the_same_pipeline(fixture, request, tmp_path):
    source = attnlab.load(request.getfixturevalue(fixture))
    saved = source.save_pretrained(tmp_path / "saved")
    assert saved == tmp_path / "saved" and (saved / "config.json").is_file()
    reopened = attnlab.load(saved)
    assert type(reopened) is type(source) and reopened.family == source.family
    for ours, theirs in zip(source.modules(), reopened.modules()):
        assert ours.config == theirs.config
        for (name, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
            assert torch.equal(a, b), name
    _same(CALLS[source.family](source), CALLS[reopened.family](reopened))
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_a_huggingface_bert_keeps_its_vocabulary(hf_bert_dir, tmp_path):
    """The issue's case: the directory attnlab writes holds vocab.txt and tokenizer_config.json."""
    pipeline = attnlab.load(hf_bert_dir)
    saved = pipeline.save_pretrained(tmp_path / "bert")
    assert (saved / "vocab.txt").read_text() == (hf_bert_dir / "vocab.txt").read_text()
    torch.testing.assert_close(attnlab.load(saved).embed("the dog runs"), pipeline.embed("the dog runs"))


def test_what_save_pretrained_refuses(lm_char_dir, tmp_path):
    pipeline = attnlab.load(lm_char_dir)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty; pass force=True"):
        pipeline.save_pretrained(busy)
    assert sorted(os.listdir(busy)) == ["notes.txt"]
    pipeline.save_pretrained(busy, force=True)  # replaced as a whole
    assert "notes.txt" not in os.listdir(busy) and attnlab.load(busy).family == "decoder_lm"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        pipeline.save_pretrained(tmp_path / "file")
    with pytest.raises(TypeError, match="force"):
        pipeline.save_pretrained(tmp_path / "new", force="yes")
    pipeline.model.quantize("int8")
    with pytest.raises(ValueError, match="quantised"):
        pipeline.save_pretrained(tmp_path / "int8")
    assert not (tmp_path / "int8").exists() and not (tmp_path / "new").exists()


def test_a_pipeline_that_does_not_say_what_its_directory_holds_is_refused(lm_char_dir, tmp_path):
    from attnlab.pipelines import Pipeline

    class Bare(Pipeline):
        family = "bare"

    bare = Bare(attnlab.load(lm_char_dir).model)
    with pytest.raises(ValueError, match=r"'bare' pipeline \(Bare\) does not say what its directory holds"):
        bare.save_pretrained(tmp_path / "out")
    assert list(tmp_path.iterdir()) == []
