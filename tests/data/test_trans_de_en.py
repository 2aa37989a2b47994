import pytest

from attnlab.data.trans_de_en import clean_example, extract_example_pairs, load_trans_de_en, split_pairs

from .conftest import needs_trans_de_en

# Lines in the dictionary's format (several taken from the real file).
LINES = [
    "# Version :: devel 2023-01-30\n",
    "heimwärts {adv} | heimwärts steuern | Er ging langsam heimwärts. :: homeward | to head homewards | He slowly went home.\n",
    "Kopf hoch! :: Chin up!\n",  # fewer than 4 German words
    "Schade {f} | Das ist aber sehr schade.; Wie schade das ist! :: pity | That is a real pity.; What a pity!\n",
    "Nachricht {f} | Ihre Nachricht ist gestern angekommen. (Geschäftsbrief) [adm.] :: message | Your message arrived yesterday. (business letter)\n",
    "Platz {m} | Dieses Geschäft ist sehr gut besucht. :: place | This shop [Br.] is very busy.\n",
    "Anteil {m} | Vielen Dank für Ihre Anteilnahme (am Ableben unseres Vaters). :: share | Many thanks for your sympathy (on the passing of our father).\n",
    "Zeichen {n} | ein deutliches Zeichen für etw. :: sign | a clear token of sth.\n",  # phrase with placeholder
    "Umfrage {f} | Der Präsident liegt in den Umfragen zurück. :: poll | The President is lagging/trailing behind in the polls.\n",
    "fragen {vt} | Wie schreibt man das Wort …? :: to ask | How does one write the word …?\n",
    "Husch! Husch! Weg da jetzt! {interj} :: Shoo! Shoo! Go away now!\n",  # grammar tag: headword
    "kaputt {adj} | Das Auto ist wieder kaputt. :: broken\n",  # misaligned entry: skipped
    "heimwärts {adv} | Er ging langsam heimwärts. :: homeward | He slowly went home.\n",  # duplicate
    "Der Zug fährt um 7 Uhr ab. :: The train leaves at 7 o'clock.\n",
    "Er lief 24/7 durch die Stadt. :: He ran through the town 24/7.\n",  # digit slash is fine
]


def test_extracts_only_clean_sentence_pairs():
    assert extract_example_pairs(LINES) == [
        ("Er ging langsam heimwärts.", "He slowly went home."),
        ("Das ist aber sehr schade.", "That is a real pity."),
        ("Ihre Nachricht ist gestern angekommen.", "Your message arrived yesterday."),
        ("Dieses Geschäft ist sehr gut besucht.", "This shop is very busy."),
        (
            "Vielen Dank für Ihre Anteilnahme am Ableben unseres Vaters.",
            "Many thanks for your sympathy on the passing of our father.",
        ),
        ("Der Zug fährt um 7 Uhr ab.", "The train leaves at 7 o'clock."),
        ("Er lief 24/7 durch die Stadt.", "He ran through the town 24/7."),
    ]


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("Riech einmal daran!; Riech einmal!", "Riech einmal daran!"),
        ("Darf ich mich Ihnen anschließen? (formell); Darf ich?", "Darf ich mich Ihnen anschließen?"),
        ("Er wurde abgesetzt [ugs.].", "Er wurde abgesetzt."),
        ("Is he the man (that) you saw?", "Is he the man that you saw?"),
        ("„Keine Frage!“", "„Keine Frage!“"),
    ],
)
def test_clean_example(raw, clean):
    assert clean_example(raw) == clean


def test_split_is_deterministic_and_keeps_shared_sentences_together():
    pairs = [(f"Satz Nummer {i} ist hier.", f"Sentence number {i} is here.") for i in range(2000)]
    pairs += [("Satz Nummer 7 ist hier.", "Another translation."), ("Ganz anderer Satz hier.", "Sentence number 9 is here.")]
    splits = split_pairs(pairs)
    assert splits == split_pairs(list(pairs))
    assert sum(len(split) for split in splits.values()) == len(pairs)
    for name in ("valid", "test"):
        assert 40 < len(splits[name]) < 160  # 5% of 2002, give or take
    for shared in ("Satz Nummer 7 ist hier.", "Ganz anderer Satz hier."):
        homes = {name for name, split in splits.items() for pair in split if shared in pair}
        assert len(homes) == 1
    homes = {name for name, split in splits.items() for de, en in split if en == "Sentence number 9 is here."}
    assert len(homes) == 1


def test_split_fractions_validated():
    with pytest.raises(ValueError, match="valid_fraction"):
        split_pairs([], valid_fraction=0.6, test_fraction=0.5)


def test_missing_file_says_how_to_install(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install -y trans-de-en"):
        load_trans_de_en(tmp_path / "de-en")


@pytest.fixture(scope="module")
def real_splits():
    return load_trans_de_en()


@needs_trans_de_en
def test_real_dictionary(real_splits):
    sizes = {name: len(pairs) for name, pairs in real_splits.items()}
    total = sum(sizes.values())
    assert 15_000 < total < 20_000  # 16,774 on the 2023-01-30 dictionary
    assert 0.04 < sizes["test"] / total < 0.06 and 0.04 < sizes["valid"] / total < 0.06
    train_sentences = {s for pair in real_splits["train"] for s in pair}
    for name in ("valid", "test"):
        assert not any(de in train_sentences or en in train_sentences for de, en in real_splits[name])
    for de, en in (pair for pairs in real_splits.values() for pair in pairs):
        assert len(de.split()) >= 4
        assert de.rstrip("\"“”‘’»«'")[-1] in ".!?" and en.rstrip("\"“”‘’»«'")[-1] in ".!?"
        assert not any(mark in de + en for mark in ("{", "[", "(", " | ", "::", "etw.", "sth."))
    assert ("Das Buch behandelt den zweiten Weltkrieg.", "The book deals with World War II.") in {
        pair for pairs in real_splits.values() for pair in pairs
    }


@needs_trans_de_en
def test_real_dictionary_returns_fresh_lists(real_splits):
    again = load_trans_de_en()
    again["train"].clear()
    assert load_trans_de_en()["train"] == real_splits["train"]
