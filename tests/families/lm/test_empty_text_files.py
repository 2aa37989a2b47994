"""An empty text file holds 0 tokens (issue 39, point 18: `train lm --valid-text empty.txt`
said "--valid-text: 1 tokens is too short": the newline added to every file counted as a
token, and the file was not named)."""

import pytest

from attnlab.cli.main import main


@pytest.mark.parametrize("flag", ["--valid-text", "--text"])
def test_an_empty_file_is_refused_naming_the_flag_and_the_file(tmp_path, capsys, flag):
    good, empty = tmp_path / "good.txt", tmp_path / "empty.txt"
    good.write_text("to be or not to be, that is the question.\n" * 40, encoding="utf-8")
    empty.write_bytes(b"")
    files = {"--text": good, "--valid-text": good, flag: empty}
    code = main(["train", "lm", "--text", str(files["--text"]), "--valid-text", str(files["--valid-text"]),
                 "--out", str(tmp_path / "run"), "--preset", "lm_tiny", "--max-steps", "1"])
    err = capsys.readouterr().err
    assert code == 2 and f"{flag} {empty}: the file is empty (0 tokens)" in err, err
    assert "1 tokens" not in err and "Traceback" not in err
    assert not (tmp_path / "run" / "model").exists()


def test_read_text_files_names_the_flag_and_the_empty_file(tmp_path):
    from attnlab.data.text import read_text_files

    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"--text .*empty\.txt: the file is empty"):
        read_text_files([empty], flag="--text")
