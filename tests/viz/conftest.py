"""Small model directories of every family the explorer knows: a random translation model
with a sentencepiece vocabulary, a random character LM, the real all-MiniLM-L6-v2."""

from pathlib import Path

import pytest
import torch

from attnlab import create_model

SENTENCES = ["ein mann fährt fahrrad", "eine frau liest ein buch", "zwei hunde spielen im park",
             "a man rides a bike", "a woman reads a book", "two dogs play in the park"] * 20


@pytest.fixture(scope="session")
def translation_dir(tmp_path_factory) -> Path:
    from attnlab.data.tokenizer import Tokenizer

    directory = tmp_path_factory.mktemp("translation")
    tokenizer = Tokenizer.train(SENTENCES, vocab_size=60, num_threads=1)
    torch.manual_seed(0)
    model = create_model("transformer_tiny", vocab_size=tokenizer.vocab_size)
    model.save_pretrained(directory)
    tokenizer.save(directory)
    return directory


@pytest.fixture(scope="session")
def lm_dir(tmp_path_factory) -> Path:
    from attnlab.data.text import CharTokenizer

    directory = tmp_path_factory.mktemp("lm")
    tokenizer = CharTokenizer.from_text("ROMEO:\nBut soft, what light through yonder window breaks? " + "".join(
        chr(c) for c in range(32, 127)))
    torch.manual_seed(0)
    create_model("lm_tiny", vocab_size=tokenizer.vocab_size).save_pretrained(directory)
    tokenizer.save(directory)
    return directory




# -- the image and music families (random weights, each what its training verb writes) --
SCENE_TEXT = [f"a {colour} {shape} above a {other} circle" for colour in ("red", "green", "blue")
              for shape in ("circle", "square") for other in ("red", "blue")] * 4


@pytest.fixture(scope="session")
def scene_tokenizer():
    from attnlab.data.tokenizer import Tokenizer

    return Tokenizer.train(SCENE_TEXT, vocab_size=30, seed=0, num_threads=1)


@pytest.fixture(scope="session")
def vit_dir(tmp_path_factory) -> Path:
    import json

    from attnlab.families.vit.task import CLASSES_FILE

    torch.manual_seed(0)
    model = create_model("vit_tiny_patch7_28", num_classes=3, in_channels=1)
    return model.save_pretrained(tmp_path_factory.mktemp("vit") / "model",
                                 extra_files={CLASSES_FILE: json.dumps({"classes": ["zero", "one", "two"]}).encode()})


@pytest.fixture(scope="session")
def captioner_dir(tmp_path_factory, scene_tokenizer) -> Path:
    torch.manual_seed(0)
    model = create_model("captioner_tiny", vocab_size=scene_tokenizer.vocab_size, max_positions=12)
    return model.save_pretrained(tmp_path_factory.mktemp("captioner") / "model",
                                 extra_files={"tokenizer.model": scene_tokenizer._proto})


@pytest.fixture(scope="session")
def text_to_image_dir(tmp_path_factory, scene_tokenizer) -> Path:
    from attnlab.families.text_to_image.task import VQVAE_SUBDIR

    torch.manual_seed(0)
    directory = create_model("text_to_image_tiny", text_length=12).save_pretrained(
        tmp_path_factory.mktemp("t2i") / "model", extra_files={"tokenizer.model": scene_tokenizer._proto})
    create_model("vqvae_tiny", codebook_size=16, downsample=8).save_pretrained(directory / VQVAE_SUBDIR)
    return directory


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory) -> Path:
    """A 4x4 grey Image Transformer with local 1D attention (blocks of 8 sub-pixels)."""
    torch.manual_seed(0)
    model = create_model("imagetransformer_mnist_small", height=4, width=4, channels=1, d_model=16, num_heads=2,
                         d_ff=24, num_layers=2, dropout=0.0, attention={"name": "local_1d", "block_length": 8})
    return model.save_pretrained(tmp_path_factory.mktemp("image") / "model")


@pytest.fixture(scope="session")
def music_dir(tmp_path_factory) -> Path:
    """A JSB-chorale Music Transformer."""
    torch.manual_seed(0)
    return create_model("music_tiny", max_positions=64).save_pretrained(tmp_path_factory.mktemp("music") / "model")


@pytest.fixture(scope="session")
def performance_dir(tmp_path_factory) -> Path:
    """A performance-event Music Transformer (reads MIDI primers)."""
    from attnlab.data.music import PERFORMANCE_VOCAB_SIZE

    torch.manual_seed(0)
    model = create_model("music_tiny", encoding="performance", vocab_size=PERFORMANCE_VOCAB_SIZE, max_positions=64)
    return model.save_pretrained(tmp_path_factory.mktemp("performance") / "model")
