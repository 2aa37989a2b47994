"""Music data: the performance-event encoding (round trips through real MIDI files, sustain
pedal, velocity bins, long gaps), augmentation, JSB Chorales serialisation, and bad files."""

import random

import numpy as np
import pytest

from attnlab.data import music
from attnlab.data.music import (END, JSB_VOCAB_SIZE, PERFORMANCE_VOCAB_SIZE, START, MusicFileError, Note,
                                augment_notes, decode_performance, describe_event, deserialize_chorale,
                                encode_performance, load_jsb_chorales, load_midi_folder, read_midi_notes,
                                serialize_chorale, write_midi)


@pytest.fixture(scope="module")
def jsb_root(shared_data):
    if not music.jsb_path(shared_data).is_file():
        pytest.skip("JSB Chorales not in the shared data")
    return shared_data


def random_notes(seed, count=150, length=30.0):
    rng = random.Random(seed)
    notes = []
    for _ in range(count):
        start = rng.uniform(0, length)
        notes.append(Note(rng.randint(0, 127), start, start + rng.choice([0.004, 0.02, 0.3, 1.7, 4.2]),
                          rng.randint(1, 127)))
    return music._one_sounding_per_pitch(notes)


def by_pitch(notes):
    return sorted(notes, key=lambda n: (n.pitch, n.start))


def assert_same_performance(decoded, original):
    assert len(decoded) == len(original)
    for got, want in zip(by_pitch(decoded), by_pitch(original)):
        assert got.pitch == want.pitch
        assert abs(got.start - want.start) <= 0.010 and abs(got.end - want.end) <= 0.010 + 1e-9
        assert got.velocity // 4 == want.velocity // 4  # the same velocity bin


def test_vocabulary_is_the_papers_388_events_plus_three():
    assert PERFORMANCE_VOCAB_SIZE == 388 + 3
    assert [describe_event(t) for t in (START, 3, 130, 131, 259, 358, 359, 390)] == [
        "START", "NOTE_ON(0)", "NOTE_ON(127)", "NOTE_OFF(0)", "TIME_SHIFT(10ms)", "TIME_SHIFT(1000ms)",
        "VELOCITY(0)", "VELOCITY(31)"]
    with pytest.raises(ValueError, match="outside the performance vocabulary"):
        describe_event(PERFORMANCE_VOCAB_SIZE)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_generated_midi_round_trips_through_events(tmp_path, seed):
    notes = random_notes(seed)
    path = write_midi(notes, tmp_path / "piece.mid")
    read = read_midi_notes(path)
    assert_same_performance(read, notes)  # the MIDI file itself (its ticks) keeps them
    tokens = encode_performance(read)
    assert all(3 <= t < PERFORMANCE_VOCAB_SIZE for t in tokens)
    decoded = decode_performance(tokens)
    assert_same_performance(decoded, read)
    # and back to a MIDI file again
    assert_same_performance(read_midi_notes(write_midi(decoded, tmp_path / "again.mid")), notes)


def test_encoding_details():
    notes = [Note(60, 0.0, 2.5, 100), Note(64, 0.0, 0.5, 100), Note(67, 0.504, 0.6, 20)]
    tokens = encode_performance(notes)
    assert [describe_event(t) for t in tokens] == [
        "VELOCITY(25)", "NOTE_ON(60)", "NOTE_ON(64)", "TIME_SHIFT(500ms)", "NOTE_OFF(64)", "VELOCITY(5)",
        "NOTE_ON(67)", "TIME_SHIFT(100ms)", "NOTE_OFF(67)", "TIME_SHIFT(1000ms)", "TIME_SHIFT(900ms)",
        "NOTE_OFF(60)"]
    decoded = decode_performance([START] + tokens + [END, 3 + 70])  # nothing after END counts
    assert decoded == [Note(60, 0.0, 2.5, 102), Note(64, 0.0, 0.5, 102), Note(67, 0.5, 0.6, 22)]


def test_decoding_tolerates_what_a_model_may_generate():
    on, off, shift = 3, 131, 259
    tokens = [off + 60, on + 60, shift + 9, on + 60, shift + 4]  # stray off; re-struck; never released
    assert decode_performance(tokens) == [Note(60, 0.0, 0.1, 64), Note(60, 0.1, 0.15, 64)]
    assert decode_performance([on + 61]) == [Note(61, 0.0, 0.01, 64)]  # at least one step long


def test_sustain_pedal_extends_notes(tmp_path):
    import pretty_midi

    midi = music.notes_to_midi([Note(60, 0.0, 0.5, 90), Note(64, 1.0, 1.2, 90), Note(60, 1.5, 1.6, 90)])
    pedal = midi.instruments[0].control_changes
    pedal += [pretty_midi.ControlChange(64, 127, 0.2), pretty_midi.ControlChange(64, 0, 2.0)]
    path = tmp_path / "pedal.mid"
    midi.write(str(path))
    notes = by_pitch(read_midi_notes(path))
    # 60 released under the pedal: sounds on until it is struck again at 1.5 s;
    # 64 sounds until the pedal goes up at 2.0 s; the second 60 too.
    assert [(n.pitch, round(n.start, 3), round(n.end, 3)) for n in notes] == [
        (60, 0.0, 1.5), (60, 1.5, 2.0), (64, 1.0, 2.0)]
    dry = by_pitch(read_midi_notes(path, sustain=False))
    assert [round(n.end, 3) for n in dry] == [0.5, 1.6, 1.2]


def test_augmentation():
    notes = [Note(0, 1.0, 2.0, 50), Note(60, 2.0, 3.0, 50), Note(127, 0.0, 1.0, 50)]
    up = augment_notes(notes, transpose=3, stretch=1.05)
    assert [(n.pitch, n.start, n.end) for n in up] == [(3, 1.05, 2.1), (63, 2.1, pytest.approx(3.15))]  # 130 dropped
    down = augment_notes(notes, transpose=-3, stretch=0.95)
    assert [n.pitch for n in down] == [57, 124]
    with pytest.raises(ValueError, match="±3"):
        augment_notes(notes, transpose=4)
    with pytest.raises(ValueError, match="5%"):
        augment_notes(notes, stretch=1.2)


@pytest.mark.parametrize("content,message", [
    (b"", "not a MIDI file"), (b"RIFF....WAVEfmt ", "not a MIDI file"),
    (None, "not a readable MIDI file")])
def test_invalid_midi_names_the_file(tmp_path, content, message):
    path = tmp_path / "bad.mid"
    if content is None:  # a real MIDI file, truncated in its track
        content = music.midi_bytes(random_notes(3))[:60]
    path.write_bytes(content)
    with pytest.raises(MusicFileError, match=message) as error:
        read_midi_notes(path)
    assert str(path) in str(error.value)
    with pytest.raises(MusicFileError, match=str(path)):
        load_midi_folder(tmp_path)


def test_midi_folder(tmp_path):
    write_midi(random_notes(4, count=20), tmp_path / "b.mid")
    (tmp_path / "sub").mkdir()
    write_midi(random_notes(5, count=10), tmp_path / "sub" / "a.MIDI")
    (tmp_path / "notes.txt").write_text("not music")
    pieces = load_midi_folder(tmp_path)
    assert sorted(name.split("/")[-1] for name, _ in pieces) == ["a.MIDI", "b.mid"]
    assert sorted(len(notes) for _, notes in pieces) == [10, 20]
    (tmp_path / "empty").mkdir()
    with pytest.raises(MusicFileError, match="no .mid"):
        load_midi_folder(tmp_path / "empty")
    with pytest.raises(MusicFileError, match="not a directory"):
        load_midi_folder(tmp_path / "missing")


def test_jsb_serialisation_round_trips_a_grid_with_rests():
    grid = np.array([[72, 67, 60, 48], [72, np.nan, 60, 48], [np.nan] * 4, [74, 65, 59, 43]], dtype=np.float32)
    tokens = serialize_chorale(grid)
    assert tokens == [76, 71, 64, 52, 76, 3, 64, 52, 3, 3, 3, 3, 78, 69, 63, 47]
    np.testing.assert_array_equal(deserialize_chorale([START] + tokens + [END]), grid)
    assert all(t < JSB_VOCAB_SIZE for t in tokens)
    with pytest.raises(ValueError, match="whole MIDI numbers"):
        serialize_chorale(np.array([[60.5, 60, 60, 60]]))
    with pytest.raises(ValueError, match=r"\(T, 4\)"):
        serialize_chorale(np.zeros((3, 3)))


def test_real_chorales_round_trip(jsb_root, tmp_path):
    train, valid = load_jsb_chorales("train", jsb_root), load_jsb_chorales("valid", jsb_root)
    assert (len(train), len(valid)) == (229, 76)
    assert sum(len(c) for c in valid) == 18408
    for chorale in valid[:10]:
        np.testing.assert_array_equal(deserialize_chorale(serialize_chorale(chorale)), chorale)
    # a real chorale through MIDI and performance events, and back
    notes = music.chorale_to_notes(valid[0])
    read = read_midi_notes(write_midi(notes, tmp_path / "chorale.mid"))
    # two voices in unison are one sounding MIDI pitch: the documented rule merges them
    assert_same_performance(read, music._one_sounding_per_pitch(notes))
    assert_same_performance(decode_performance(encode_performance(read)), read)


def test_missing_jsb_says_where_and_how(tmp_path):
    with pytest.raises(music.DataUnavailable, match="JSB Chorales not found at .*ATTNLAB_DATA"):
        load_jsb_chorales("train", tmp_path)
    with pytest.raises(ValueError, match="choose train or valid"):
        load_jsb_chorales("test", tmp_path)
    broken = music.jsb_path(tmp_path)
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(MusicFileError, match=str(broken)):
        load_jsb_chorales("train", tmp_path)


def test_bach_without_music21_says_how_to_get_it(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_music21(name, *args, **kwargs):
        if name == "music21":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_music21)
    with pytest.raises(music.DataUnavailable, match="pip install music21"):
        music.load_bach_chorales()


def test_bach_chorales_from_music21_are_parsed_once_and_cached(tmp_path):
    pytest.importorskip("music21")  # optional (attnlab[music]); not installed in CI
    pieces = music.load_bach_chorales(tmp_path, limit=2)
    assert len(pieces) == 2 and all(len(notes) > 50 for _, notes in pieces)
    assert len(list(tmp_path.glob("bach_chorales_*.json"))) == 1
    assert music.load_bach_chorales(tmp_path, limit=2) == pieces  # from the cache


def test_bach_chorales_music21_cannot_expand_are_skipped_and_counted(tmp_path, monkeypatch, capsys):
    """A corpus file music21 cannot turn into MIDI (bwv277's repeats, in music21 10.5) is
    skipped with a count on stderr instead of stopping the run (a stand-in music21 module,
    so this runs without the 67 MB package)."""
    import io
    import sys
    import types

    good = random_notes(3, count=60, length=8.0)
    buffer = io.BytesIO()
    music.notes_to_midi(good).write(buffer)
    midi_bytes = buffer.getvalue()

    class Music21Exception(Exception):
        pass

    class ExpanderException(Music21Exception):
        pass

    def parse(name):
        if name == "bach/bad":
            raise ExpanderException("cannot expand Stream: badly formed repeats")
        return name

    fake = types.ModuleType("music21")
    fake.__version__ = "test"
    fake.exceptions21 = types.SimpleNamespace(Music21Exception=Music21Exception)
    fake.corpus = types.SimpleNamespace(parse=parse, chorales=types.SimpleNamespace(
        Iterator=lambda returnType: iter(["bach/a", "bach/bad", "bach/b"])))
    fake.midi = types.SimpleNamespace(translate=types.SimpleNamespace(
        music21ObjectToMidiFile=lambda score: types.SimpleNamespace(writestr=lambda: midi_bytes)))
    monkeypatch.setitem(sys.modules, "music21", fake)
    pieces = music.load_bach_chorales(tmp_path)
    assert [name for name, _ in pieces] == ["bach/a", "bach/b"]
    err = capsys.readouterr().err
    assert "skipped 1 of 3 Bach chorales" in err and "bach/bad (ExpanderException)" in err
    assert all(len(notes) == len(good) for _, notes in pieces)
