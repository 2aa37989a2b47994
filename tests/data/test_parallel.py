import gzip

import pytest

from attnlab.data import ParallelCorpus, read_lines, read_parallel


def write(path, data: bytes, compress: bool = False):
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def test_reads_aligned_pairs_and_strips_whitespace(tmp_path):
    src = write(tmp_path / "a.de", "Ein Hund läuft.  \r\nZwei Katzen.\n".encode())
    tgt = write(tmp_path / "a.en", b"A dog runs.\n  Two cats. \n")
    corpus = read_parallel(src, tgt)
    assert isinstance(corpus, ParallelCorpus)
    assert corpus.pairs == [("Ein Hund läuft.", "A dog runs."), ("Zwei Katzen.", "Two cats.")]
    assert corpus.skipped_empty == 0
    assert len(corpus) == 2 and corpus[1] == ("Zwei Katzen.", "Two cats.")
    assert corpus.sources == ["Ein Hund läuft.", "Zwei Katzen."]
    assert corpus.targets == ["A dog runs.", "Two cats."]


def test_last_line_without_newline_and_bom(tmp_path):
    src = write(tmp_path / "a.src", b"\xef\xbb\xbfone\ntwo")
    tgt = write(tmp_path / "a.tgt", b"eins\nzwei\n")
    assert read_parallel(src, tgt).pairs == [("one", "eins"), ("two", "zwei")]


def test_only_newline_splits_lines(tmp_path):
    # A carriage return or Unicode line separator inside a sentence must not shift the alignment.
    src = write(tmp_path / "a.src", "a\rb\nc\u2028d\ne\n".encode())
    tgt = write(tmp_path / "a.tgt", b"1\n2\n3\n")
    assert read_parallel(src, tgt).targets == ["1", "2", "3"]


def test_gzip_files(tmp_path):
    src = write(tmp_path / "train.de.gz", "Ein Hund.\nEine Katze.\n".encode(), compress=True)
    tgt = write(tmp_path / "train.en.gz", b"A dog.\nA cat.\n", compress=True)
    assert read_parallel(src, tgt).pairs == [("Ein Hund.", "A dog."), ("Eine Katze.", "A cat.")]


def test_gzip_recognised_by_content_and_mixed_with_plain(tmp_path):
    src = write(tmp_path / "compressed.txt", b"x\ny\n", compress=True)
    tgt = write(tmp_path / "plain.txt", b"1\n2\n")
    assert read_parallel(src, tgt).pairs == [("x", "1"), ("y", "2")]


def test_corrupt_gzip_names_file(tmp_path):
    bad = write(tmp_path / "bad.gz", gzip.compress(b"hello\n" * 100)[:-20])
    with pytest.raises(ValueError, match="bad.gz"):
        read_lines(bad)


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    src = write(tmp_path / "src.txt", b"a\nb\nc\n")
    tgt = write(tmp_path / "tgt.txt", b"1\n2\n")
    with pytest.raises(ValueError) as error:
        read_parallel(src, tgt)
    message = str(error.value)
    assert "src.txt has 3" in message and "tgt.txt has 2" in message


def test_invalid_utf8_names_file_and_line(tmp_path):
    src = write(tmp_path / "src.txt", b"fine\nalso fine\nbroken \xff here\n")
    tgt = write(tmp_path / "tgt.txt", b"1\n2\n3\n")
    with pytest.raises(ValueError, match=r"src\.txt: line 3 is not valid UTF-8"):
        read_parallel(src, tgt)


def test_invalid_utf8_inside_gzip_names_line(tmp_path):
    tgt = write(tmp_path / "tgt.gz", b"1\n\xc3\n", compress=True)
    src = write(tmp_path / "src.txt", b"a\nb\n")
    with pytest.raises(ValueError, match=r"tgt\.gz: line 2 "):
        read_parallel(src, tgt)


def test_empty_lines_skipped_and_counted(tmp_path):
    src = write(tmp_path / "s", b"a\n\nc\n   \ne\n")
    tgt = write(tmp_path / "t", b"1\n2\n\n4\n5\n")
    corpus = read_parallel(src, tgt)
    assert corpus.pairs == [("a", "1"), ("e", "5")]
    assert corpus.skipped_empty == 3


@pytest.mark.parametrize(
    "src_data, tgt_data", [(b"", b""), (b"\n\n", b"x\n\n"), (b"  \n", b"\t\n")]
)
def test_empty_corpus_is_an_error(tmp_path, src_data, tgt_data):
    src = write(tmp_path / "s.txt", src_data)
    tgt = write(tmp_path / "t.txt", tgt_data)
    with pytest.raises(ValueError, match="empty parallel corpus.*s.txt.*t.txt"):
        read_parallel(src, tgt)


def test_missing_file(tmp_path):
    write(tmp_path / "s", b"a\n")
    with pytest.raises(FileNotFoundError):
        read_parallel(tmp_path / "s", tmp_path / "nope")
