"""The Music Transformer pipeline equals attnlab generate-music's route."""

import numpy as np
import pytest
import torch

import attnlab
from attnlab.cli.main import main
from attnlab.data.music import END, START, Note, read_midi_notes, write_midi
from attnlab.generation import generate
from attnlab.families.music.task import primer_tokens, tokens_to_notes


@pytest.fixture
def theme(tmp_path):
    notes = [Note(60 + step % 5, 0.25 * step, 0.25 * step + 0.2, 80) for step in range(6)]
    return write_midi(notes, tmp_path / "theme.mid")


def test_continue_music_from_token_ids_equals_generate(music_dir):
    music = attnlab.load(music_dir)
    primer = [60, 59, 55, 48, 62, 59, 55, 48]  # one S A T B step twice, in the JSB vocabulary
    result = music.continue_music(primer, steps=12, temperature=0.9, top_k=8, seed=3)
    expected = generate(music.model, [[START] + primer], max_new_tokens=12, temperature=0.9, top_k=8, seed=3,
                        stop_ids=[END])[0]
    assert result.encoding == "jsb" and result.primer == [START] + primer and result.tokens == expected
    assert music.prompt([START] + primer) == [START] + primer  # START is not doubled
    assert result.notes == tokens_to_notes("jsb", [START] + primer + expected)


def test_a_midi_primer_and_the_written_midi_equal_attnlab_generate_music(performance_dir, theme, tmp_path, capsys):
    music = attnlab.load(performance_dir)
    assert music.prompt(theme) == primer_tokens("performance", str(theme), max_tokens=512)
    assert music.prompt(str(theme), primer_tokens=4) == primer_tokens("performance", str(theme), max_tokens=4)
    result = music.continue_music(theme, steps=20, seed=1)
    written = result.write_midi(tmp_path / "pipeline.mid")
    assert main(["generate-music", "--model", str(performance_dir), "--primer", str(theme), "--length", "20",
                 "--seed", "1", "--out", str(tmp_path / "cli.mid"), "--no-audio", "--device", "cpu"]) == 0
    assert written.read_bytes() == (tmp_path / "cli.mid").read_bytes()
    # The file holds the generated notes (a MIDI file keeps one of two same-pitch notes that
    # start together, so compare which (pitch, onset) pairs are there, within MIDI's ticks).
    back = read_midi_notes(written)

    def covered(notes, others):
        return all(any(o.pitch == n.pitch and abs(o.start - n.start) < 0.01 for o in others) for n in notes)

    assert back and covered(back, result.notes) and covered(result.notes, back)


def test_a_jsb_validation_primer_where_the_data_is(music_dir, shared_data):
    music = attnlab.load(music_dir)
    prompt = music.prompt("jsb-valid:2", data_dir=shared_data, primer_steps=4)
    assert prompt == primer_tokens("jsb", "jsb-valid:2", data_dir=shared_data, primer_steps=4)
    assert len(prompt) == 1 + 4 * 4  # START + 4 steps of 4 voices
    assert music.continue_music("jsb-valid:2", steps=4, seed=0, data_dir=shared_data, primer_steps=4).primer == prompt


def test_bad_primers_are_clear_errors(music_dir, theme):
    music = attnlab.load(music_dir)
    with pytest.raises(ValueError, match=r"primer: token ids \[500\] are outside the model's vocabulary \[0, 132\)"):
        music.continue_music([60, 500])
    with pytest.raises(TypeError, match="whole numbers"):
        music.continue_music([60, True])
    with pytest.raises(TypeError, match="got float"):
        music.continue_music(1.5)
    with pytest.raises(ValueError, match="no such MIDI file"):
        music.continue_music("missing.mid")
    with pytest.raises(ValueError, match="a MIDI primer needs a performance-event model"):
        music.continue_music(theme)  # a JSB model is primed with chorales or tokens
    with pytest.raises(ValueError, match="exceeds the model's max_positions=64"):
        music.continue_music([60] * 10, steps=60)
    with pytest.raises(ValueError, match="steps=0"):
        music.continue_music(None, steps=0)


def test_music_attention_is_causal_over_the_prompt(music_dir):
    from attnlab.viz.explorer.maps import attention_maps

    music = attnlab.load(music_dir)
    groups = music.attention([60, 59, 55, 48])
    weights = groups["self"]
    assert weights.shape == (2, 4, 5, 5) and float(weights.triu(1).abs().max()) == 0.0
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 5))
    expected = attention_maps(music.model, ids=torch.tensor([[START, 60, 59, 55, 48]]))
    torch.testing.assert_close(weights, expected["self"])
    assert np.isfinite(weights.numpy()).all()
