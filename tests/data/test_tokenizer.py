import itertools

import pytest
import torch

from attnlab.data import TOKENIZER_FILE, Tokenizer, read_lines


@pytest.fixture(scope="module")
def sentences(multi30k_dir):
    train = read_lines(multi30k_dir / "train.de.gz")[:3000] + read_lines(multi30k_dir / "train.en.gz")[:3000]
    valid = read_lines(multi30k_dir / "val.de.gz") + read_lines(multi30k_dir / "val.en.gz")
    return train, valid


@pytest.fixture(scope="module")
def tokenizer(sentences):
    return Tokenizer.train(sentences[0], vocab_size=1000)


def normalised(text):
    # sentencepiece's nmt_nfkc normalisation collapses runs of spaces (and maps NBSP to one).
    return " ".join(text.split())


def test_round_trip_on_real_multi30k(tokenizer, sentences):
    train, valid = sentences
    for text in itertools.chain(train, valid):
        assert tokenizer.decode(tokenizer.encode(text)) == normalised(text)


def test_ids_and_special_tokens(tokenizer, sentences):
    assert tokenizer.vocab_size == 1000
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id) == (0, 1, 2, 3)
    ids = tokenizer.encode(sentences[1][0])
    assert ids and all(4 <= i < 1000 for i in ids)  # no BOS/EOS added, no unknowns
    assert tokenizer.pieces(ids[:1])[0].startswith("▁")
    assert tokenizer.encode_batch(sentences[1][:3]) == [tokenizer.encode(s) for s in sentences[1][:3]]


def test_encode_pairs(tokenizer):
    pairs = [("Ein Hund rennt.", "A dog runs."), ("Zwei Kinder.", "Two children.")]
    assert tokenizer.encode_pairs(pairs) == [(tokenizer.encode(s), tokenizer.encode(t)) for s, t in pairs]


def test_decode_stops_at_eos_and_drops_pad_and_bos(tokenizer):
    ids = tokenizer.encode("Ein Hund rennt.")
    row = [tokenizer.bos_id, *ids, tokenizer.eos_id, *tokenizer.encode("Müll"), tokenizer.pad_id]
    assert tokenizer.decode(row) == "Ein Hund rennt."
    short = tokenizer.encode("Zwei.")
    padded = torch.tensor([row, [tokenizer.bos_id, *short] + [tokenizer.pad_id] * (len(row) - len(short) - 1)])
    assert tokenizer.decode_batch(padded) == ["Ein Hund rennt.", "Zwei."]
    with pytest.raises(ValueError, match="id 1000 is outside"):
        tokenizer.decode([1000])


def test_unknown_characters_stay_visible(tokenizer):
    assert "⁇" in tokenizer.decode(tokenizer.encode("Ein Hund 犬."))


def test_save_and_load(tokenizer, tmp_path):
    path = tokenizer.save(tmp_path / "model")
    assert path == tmp_path / "model" / TOKENIZER_FILE
    assert [p.name for p in (tmp_path / "model").iterdir()] == [TOKENIZER_FILE]
    for loaded in (Tokenizer.load(tmp_path / "model"), Tokenizer.load(path)):
        assert loaded.vocab_size == tokenizer.vocab_size
        assert loaded.encode("Ein Mann fährt Fahrrad.") == tokenizer.encode("Ein Mann fährt Fahrrad.")
    with pytest.raises(FileNotFoundError, match=TOKENIZER_FILE):
        Tokenizer.load(tmp_path)


def test_training_is_deterministic_and_quiet(sentences, tmp_path, capfd):
    first = Tokenizer.train(sentences[0][:2000], vocab_size=500).save(tmp_path / "a")
    second = Tokenizer.train(sentences[0][:2000], vocab_size=500).save(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


def test_unigram(sentences):
    tokenizer = Tokenizer.train(sentences[0][:1000], vocab_size=300, model_type="unigram")
    assert tokenizer.vocab_size == 300
    text = sentences[0][0]
    assert tokenizer.decode(tokenizer.encode(text)) == normalised(text)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(vocab_size=4), "vocab_size=4"),
        (dict(model_type="wordpiece"), "model_type='wordpiece'"),
        (dict(vocab_size=50_000), "vocab_size=50000"),
    ],
)
def test_bad_training_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Tokenizer.train(["Ein kleiner Satz.", "A small sentence."] * 10, **kwargs)


def test_no_sentences():
    with pytest.raises(ValueError, match="no sentences"):
        Tokenizer.train(["", ""])
