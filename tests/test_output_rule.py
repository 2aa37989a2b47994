"""attnlab.files.check_output_file / check_output_directory: the one output rule every verb
uses (nothing existing is replaced without --force; links are never written through)."""

import os

import pytest

from attnlab.files import check_output_directory, check_output_file


def test_an_output_file_is_refused_when_it_exists_or_is_a_link_unless_forced(tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_text("keep")
    link = tmp_path / "link.json"
    os.symlink(mine, link)
    for path, what in ((mine, "exists"), (link, f"is a symlink \\(to {mine}\\)")):
        with pytest.raises(ValueError, match=f"--json {path} {what}; pass --force"):
            check_output_file(path, force=False, flag="--json")
        assert check_output_file(path, force=True, flag="--json") == path
    assert check_output_file(tmp_path / "new.json", force=False, flag="--json") == tmp_path / "new.json"
    with pytest.raises(ValueError, match="give a file name ending in .png"):
        check_output_file(tmp_path / "x.jpg", force=False, flag="--out", suffixes=(".png",))
    with pytest.raises(ValueError, match="is a directory"):
        check_output_file(tmp_path, force=True, flag="--out")
    # A missing parent is made by the writer (docs/files.md); a file in the way is refused.
    nested = tmp_path / "nowhere" / "x.json"
    assert check_output_file(nested, force=False, flag="--json") == nested
    assert not (tmp_path / "nowhere").exists()
    with pytest.raises(ValueError, match="mine.json is a file, not a directory"):
        check_output_file(mine / "x.json", force=True, flag="--json")
    assert mine.read_text() == "keep"


def test_an_output_directory_holding_other_files_is_refused_unless_forced_or_its_own(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "README.md").write_text("mine")
    with pytest.raises(ValueError, match=r"-o .*full: the directory exists and holds files attnlab did not write "
                                         r"here \(README.md\); pass --force"):
        check_output_directory(full, force=False, flag="-o")
    assert check_output_directory(full, force=True, flag="-o") == full
    assert check_output_directory(full, force=False, flag="-o", own=lambda p: (p / "README.md").exists()) == full
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_output_directory(empty, force=False, flag="-o") == empty
    # A new directory may be nested: the writer makes the parents; a file on the way is refused.
    assert check_output_directory(tmp_path / "a" / "b", force=False, flag="--out") == tmp_path / "a" / "b"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        check_output_directory(tmp_path / "file" / "b", force=False, flag="--out")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        check_output_directory(tmp_path / "file", force=True, flag="--out")
    os.symlink(full, tmp_path / "linked")
    with pytest.raises(ValueError, match="is a symlink"):
        check_output_directory(tmp_path / "linked", force=True, flag="--out")
    assert (full / "README.md").read_text() == "mine"
