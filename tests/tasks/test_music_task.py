"""The music task: streams, the per-piece NLL, primers, and a tiny model that overfits one chorale."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.data import music
from attnlab.generation import generate
from attnlab.tasks.music import evaluate_nll, lm_loss, music_stream, primer_tokens, tokens_to_notes


def test_stream_wraps_every_piece():
    assert music_stream([[5, 6], [7]]).tolist() == [1, 5, 6, 2, 1, 7, 2]


def test_evaluate_nll_equals_a_token_by_token_computation():
    torch.manual_seed(0)
    model = attnlab.create_model("music_tiny").eval()
    pieces = [list(range(4, 4 + 11)), [40, 41, 42, 43, 44]]
    result = evaluate_nll(model, pieces, context=4, batch_size=3)
    total, count = 0.0, 0
    with torch.no_grad():
        for piece in pieces:
            sequence = [music.START] + piece
            for first in range(0, len(piece), 4):
                targets = sequence[first + 1:first + 5]
                logits = model(torch.tensor([sequence[first:first + len(targets)]]))[0].double()
                for t in range(len(targets)):
                    total -= float(F.log_softmax(logits[t], -1)[sequence[first + 1 + t]])
                    count += 1
    assert result["tokens"] == count == 16
    assert math.isclose(result["nll"], total / count, rel_tol=1e-5)
    with pytest.raises(ValueError, match="max_positions"):
        evaluate_nll(model, pieces, context=5000)


def test_tiny_model_overfits_one_chorale():
    torch.manual_seed(0)
    grid = np.array([[72, 67, 60, 48], [72, 67, 60, 48], [74, 65, 59, 43], [76, 67, 60, 48],
                     [74, 66, 62, 50], [72, np.nan, 64, 45], [71, 67, 62, 43], [72, 67, 64, 48]] * 2)
    piece = music.serialize_chorale(grid)
    model = attnlab.create_model("music_tiny", d_model=48, d_ff=96)
    batch = {"ids": music_stream([piece])[None]}
    before = evaluate_nll(model, [piece], context=128)["nll"]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(120):
        loss, tokens, _ = lm_loss(model, batch)
        optimizer.zero_grad()
        (loss / tokens).backward()
        optimizer.step()
    after = evaluate_nll(model, [piece], context=128)["nll"]
    assert before > 4.0 and after < 0.15, (before, after)
    # and it generates the chorale back from its first time step
    generated = generate(model, [[music.START] + piece[:4]], max_new_tokens=len(piece) - 4,
                                            greedy=True)[0]
    np.testing.assert_array_equal(music.deserialize_chorale(piece[:4] + generated), grid.astype(np.float32))


def test_primers_and_decoding(tmp_path, shared_data):
    assert primer_tokens("jsb", None) == [music.START]
    if music.jsb_path(shared_data).is_file():
        prompt = primer_tokens("jsb", "jsb-valid:0", data_dir=shared_data, primer_steps=2)
        assert len(prompt) == 9 and prompt[0] == music.START
        with pytest.raises(ValueError, match="jsb-valid:N with N in 0..75"):
            primer_tokens("jsb", "jsb-valid:99", data_dir=shared_data)
    notes = [music.Note(60, 0.0, 0.5, 80), music.Note(64, 0.5, 1.0, 80)]
    path = music.write_midi(notes, tmp_path / "p.mid")
    prompt = primer_tokens("performance", str(path))
    assert tokens_to_notes("performance", prompt) == [music.Note(60, 0.0, 0.5, 82), music.Note(64, 0.5, 1.0, 82)]
    assert len(primer_tokens("performance", str(path), max_tokens=3)) == 4
    with pytest.raises(ValueError, match="needs a performance-event model"):
        primer_tokens("jsb", str(path))
    with pytest.raises(ValueError, match="primes a JSB model"):
        primer_tokens("performance", "jsb-valid:0")
    assert [(n.pitch, n.start, n.end) for n in tokens_to_notes("jsb", [1, 64, 60, 55, 40, 64, 3, 55, 40, 2, 70])] == [
        (36, 0.0, 0.25), (51, 0.0, 0.25), (56, 0.0, 0.125), (60, 0.0, 0.25)]
