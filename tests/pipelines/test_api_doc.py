"""docs/api.md's examples run: each block, with its model directories replaced by tiny ones."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import attnlab

from conftest import LM_TEXT

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _examples() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Examples, family by family", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    found = {}
    for block in blocks:
        directory = re.search(r'attnlab\.load\("([^"]+)"\)', block).group(1)
        found[directory] = block
    return found


EXAMPLES = _examples()
DIRECTORIES = {  # the example's directory -> the fixture standing in for it
    "runs/m30k/model": "translation_dir", "runs/shakespeare/model": "doc_lm_dir",
    "models/all-MiniLM-L6-v2": "bert_dir", "runs/vit-mnist/model": "vit_dir", "runs/caption/model": "captioner_dir",
    "runs/t2i/model": "text_to_image_dir", "runs/it-mnist/model": "image_dir", "runs/jsb/model": "doc_music_dir",
    "runs/genre/model": "text_classifier_dir",
}


@pytest.fixture(scope="module")
def doc_lm_dir(tmp_path_factory):
    from attnlab.data.text import CharTokenizer

    tokenizer = CharTokenizer.from_text(LM_TEXT + "JULIET:\n")
    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny", vocab_size=tokenizer.vocab_size, max_positions=256)
    directory = model.save_pretrained(tmp_path_factory.mktemp("doc_lm") / "model")
    tokenizer.save(directory)
    return directory


@pytest.fixture(scope="module")
def doc_music_dir(tmp_path_factory):
    torch.manual_seed(0)
    return attnlab.create_model("music_tiny", max_positions=400).save_pretrained(
        tmp_path_factory.mktemp("doc_music") / "model")


def test_every_family_has_an_example():
    assert sorted(EXAMPLES) == sorted(DIRECTORIES)


@pytest.mark.parametrize("directory", sorted(EXAMPLES))
def test_the_example_runs(directory, request, tmp_path, monkeypatch, capsys):
    block = EXAMPLES[directory]
    block = block.replace(f'"{directory}"', repr(str(request.getfixturevalue(DIRECTORIES[directory]))))
    if "runs/sr-mnist/model" in block:
        block = block.replace('"runs/sr-mnist/model"', repr(str(request.getfixturevalue("super_resolution_dir"))))
    if "jsb-valid" in block:
        monkeypatch.setenv("ATTNLAB_DATA", str(request.getfixturevalue("shared_data")))
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8)).save("digit.png")
    for name in ("scene1.png", "scene2.png"):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(name)
    Image.fromarray(rng.integers(0, 256, (2, 2), dtype=np.uint8)).save("small.png")  # the tiny SR model's 2x2
    exec(compile(block, f"docs/api.md ({directory})", "exec"), {"__name__": "__doc_example__"})
    assert capsys.readouterr().out  # every example prints something
    for written in re.findall(r'(?:save|write_midi)\("([^"]+)"\)', block):
        assert Path(written).is_file()
