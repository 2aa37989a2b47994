"""Tiny model directories (random weights, real tokenizers and sidecar files) for the
pipeline tests: each is what the family's training verb writes, made in well under a second."""

import json
from pathlib import Path

import pytest
import torch

import attnlab


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    yield


SCENE_TEXT = [f"a {colour} {shape} {relation} a {other} {thing}"
              for colour in ("red", "green", "blue") for shape in ("circle", "square")
              for relation in ("above", "left of") for other in ("red", "blue") for thing in ("circle", "triangle")]


@pytest.fixture(scope="session")
def translation_dir(tmp_path_factory) -> Path:
    from attnlab.data import Tokenizer

    sentences = [f"ein kleiner hund {i} läuft über die wiese" for i in range(30)] + [
        f"a small dog {i} runs across the meadow" for i in range(30)]
    tokenizer = Tokenizer.train(sentences, vocab_size=60, seed=0, num_threads=1)
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", vocab_size=tokenizer.vocab_size, max_positions=64)
    return model.save_pretrained(tmp_path_factory.mktemp("translation") / "model",
                                 extra_files={"tokenizer.model": tokenizer._proto})


LM_TEXT = "the quick brown fox jumps over the lazy dog.\nROMEO:\na dog, a fox and the end.\n" * 20


@pytest.fixture(scope="session")
def lm_char_dir(tmp_path_factory) -> Path:
    from attnlab.data.text import CharTokenizer

    tokenizer = CharTokenizer.from_text(LM_TEXT)
    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny", vocab_size=tokenizer.vocab_size, max_positions=48)
    directory = model.save_pretrained(tmp_path_factory.mktemp("lm_char") / "model")
    tokenizer.save(directory)
    return directory


@pytest.fixture(scope="session")
def lm_bpe_dir(tmp_path_factory) -> Path:
    from attnlab.data.text import LineTokenizer

    tokenizer = LineTokenizer.train(LM_TEXT, vocab_size=60)
    torch.manual_seed(1)
    model = attnlab.create_model("lm_tiny", vocab_size=tokenizer.vocab_size, max_positions=48)
    directory = model.save_pretrained(tmp_path_factory.mktemp("lm_bpe") / "model")
    tokenizer.save(directory)
    return directory


WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "man", "is", "playing", "guitar", "the", "dog", "runs",
         "cat", "sleeps", ".", ",", "##s", "on", "mat"]


def _vocab_file(directory: Path) -> None:
    (directory / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")


@pytest.fixture(scope="session")
def bert_dir(tmp_path_factory) -> Path:
    """An attnlab ``bert`` directory: save_pretrained + vocab.txt."""
    torch.manual_seed(0)
    model = attnlab.create_model("bert_tiny", vocab_size=len(WORDS), max_positions=32)
    directory = model.save_pretrained(tmp_path_factory.mktemp("bert") / "model")
    _vocab_file(directory)
    return directory


@pytest.fixture(scope="session")
def text_classifier_dir(tmp_path_factory) -> Path:
    """A ``bert_classifier`` directory as train text-classification writes it: save_pretrained
    + vocab.txt + labels.json (random weights, 3 labels)."""
    from attnlab.families.text_classification.task import LABELS_FILE, labels_file_bytes

    torch.manual_seed(0)
    model = attnlab.create_model("bert_classifier_tiny", vocab_size=len(WORDS), max_positions=32)
    directory = model.save_pretrained(tmp_path_factory.mktemp("classifier") / "model")
    _vocab_file(directory)
    (directory / LABELS_FILE).write_bytes(labels_file_bytes(["comedies", "histories", "tragedies"], False))
    return directory


@pytest.fixture(scope="session")
def hf_bert_dir(tmp_path_factory) -> Path:
    """A HuggingFace-format BERT directory written by transformers (random weights)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("hf_bert") / "model"
    transformers.BertModel(config).save_pretrained(str(directory), safe_serialization=True)
    _vocab_file(directory)
    return directory


VIT_CLASSES = ["zero", "one", "two"]


@pytest.fixture(scope="session")
def vit_dir(tmp_path_factory) -> Path:
    from attnlab.families.vit.task import CLASSES_FILE

    torch.manual_seed(0)
    model = attnlab.create_model("vit_tiny_patch7_28", num_classes=3, in_channels=1)
    with torch.no_grad():  # the head starts at zero (every class equally likely): give the classes apart
        model.head.weight.normal_(0.0, 1.0)
    return model.save_pretrained(tmp_path_factory.mktemp("vit") / "model",
                                 extra_files={CLASSES_FILE: json.dumps({"classes": VIT_CLASSES}).encode()})


@pytest.fixture(scope="session")
def scene_tokenizer():
    from attnlab.data import Tokenizer

    return Tokenizer.train(SCENE_TEXT, vocab_size=30, seed=0, num_threads=1)


@pytest.fixture(scope="session")
def captioner_dir(tmp_path_factory, scene_tokenizer) -> Path:
    torch.manual_seed(0)
    model = attnlab.create_model("captioner_tiny", vocab_size=scene_tokenizer.vocab_size, max_positions=12)
    return model.save_pretrained(tmp_path_factory.mktemp("captioner") / "model",
                                 extra_files={"tokenizer.model": scene_tokenizer._proto})


@pytest.fixture(scope="session")
def text_to_image_dir(tmp_path_factory, scene_tokenizer) -> Path:
    from attnlab.families.text_to_image.task import VQVAE_SUBDIR

    torch.manual_seed(0)
    model = attnlab.create_model("text_to_image_tiny", text_length=40)
    vqvae = attnlab.create_model("vqvae_tiny", codebook_size=16, downsample=8)
    directory = model.save_pretrained(tmp_path_factory.mktemp("t2i") / "model",
                                      extra_files={"tokenizer.model": scene_tokenizer._proto})
    vqvae.save_pretrained(directory / VQVAE_SUBDIR)
    return directory


def _image_transformer(root: Path, *, classes=None, **overrides) -> Path:
    torch.manual_seed(0)
    settings = dict(height=4, width=4, channels=1, d_model=16, num_heads=2, d_ff=24, num_layers=2, dropout=0.0,
                    attention={"name": "local_1d", "block_length": 8})
    settings.update(overrides)
    if classes:
        settings["num_classes"] = len(classes)
    preset = "imagetransformer_sr_mnist_small" if overrides.get("low_resolution") else "imagetransformer_mnist_small"
    model = attnlab.create_model(preset, **settings)
    extra = {"image.json": json.dumps({"data": "test", "classes": classes or []}).encode()}
    return model.save_pretrained(root / "model", extra_files=extra)


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory) -> Path:
    return _image_transformer(tmp_path_factory.mktemp("image"))


@pytest.fixture(scope="session")
def class_image_dir(tmp_path_factory) -> Path:
    return _image_transformer(tmp_path_factory.mktemp("class_image"), classes=["dark", "light"], channels=3)


@pytest.fixture(scope="session")
def super_resolution_dir(tmp_path_factory) -> Path:
    return _image_transformer(tmp_path_factory.mktemp("sr"), low_resolution=2, num_encoder_layers=1)


@pytest.fixture(scope="session")
def music_dir(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = attnlab.create_model("music_tiny", max_positions=64)
    return model.save_pretrained(tmp_path_factory.mktemp("music") / "model")


@pytest.fixture(scope="session")
def performance_dir(tmp_path_factory) -> Path:
    from attnlab.data.music import PERFORMANCE_VOCAB_SIZE

    torch.manual_seed(0)
    model = attnlab.create_model("music_tiny", encoding="performance", vocab_size=PERFORMANCE_VOCAB_SIZE,
                                 max_positions=64)
    return model.save_pretrained(tmp_path_factory.mktemp("performance") / "model")
