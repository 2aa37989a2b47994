"""A tiny Transformer learns to reverse random sequences in a few seconds on a CPU, and
then greedy and beam search reproduce fresh sequences exactly.

This is the end-to-end check that the parts fit: embeddings, positions, masks, encoder,
decoder, the loss on teacher-forced logits, and cached decoding of what was learned.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.generation import beam_search, greedy_search

PAD, BOS, EOS = 0, 1, 2
VOCAB = 12  # 9 symbols, 3..11
MIN_LEN, MAX_LEN = 3, 8
STEPS, BATCH, PEAK_LR, WARMUP = 300, 48, 5e-3, 20


def reversal_batch(size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """-> src (B, S) right-padded; tgt (B, S + 2) = BOS, reversed src, EOS, padding."""
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (size,), generator=generator).tolist()
    src = torch.full((size, max(lengths)), PAD, dtype=torch.long)
    tgt = torch.full((size, max(lengths) + 2), PAD, dtype=torch.long)
    for row, length in enumerate(lengths):
        sequence = torch.randint(3, VOCAB, (length,), generator=generator)
        src[row, :length] = sequence
        tgt[row, 0], tgt[row, length + 1] = BOS, EOS
        tgt[row, 1:length + 1] = sequence.flip(0)
    return src, tgt


def loss_on(model, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    logits = model(src, tgt[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1), ignore_index=PAD)


@pytest.fixture(scope="module")
def trained():
    # One thread: at this size a second thread only adds synchronisation (and on a busy
    # two-core machine it makes the run many times slower).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = attnlab.create_model("transformer_tiny", vocab_size=VOCAB, d_model=64, d_ff=128, num_heads=4,
                                     num_encoder_layers=2, num_decoder_layers=2, norm_first=True, dropout=0.0)
        optimizer = torch.optim.Adam(model.parameters(), lr=PEAK_LR, betas=(0.9, 0.98))
        # Linear warm-up, then linear decay to zero: the decay is what takes the loss near zero.
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min((step + 1) / WARMUP, (STEPS - step) / (STEPS - WARMUP)))
        generator = torch.Generator().manual_seed(0)
        model.train()
        for _ in range(STEPS):
            loss = loss_on(model, *reversal_batch(BATCH, generator))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        model.eval()
        test_src, test_tgt = reversal_batch(32, torch.Generator().manual_seed(12345))
        with torch.no_grad():
            test_loss = float(loss_on(model, test_src, test_tgt))
        yield model, test_src, test_tgt, test_loss
    finally:
        torch.set_num_threads(threads)


def expected_outputs(src: torch.Tensor) -> list[list[int]]:
    return [row[row != PAD].flip(0).tolist() + [EOS] for row in src]


def test_reversal_is_learned_to_near_zero_loss(trained):
    _, _, _, test_loss = trained
    assert test_loss < 0.05  # from ln(9) ≈ 2.2 per token for a model that knows nothing


def test_greedy_decoding_reverses_fresh_sequences_exactly(trained):
    model, src, _, _ = trained
    hypotheses = greedy_search(model, src, max_len_a=1.0, max_len_b=5)
    assert [h.tokens for h in hypotheses] == expected_outputs(src)


@pytest.mark.parametrize("beam_size", [2, 4])
def test_beam_decoding_reverses_fresh_sequences_exactly(trained, beam_size):
    model, src, _, _ = trained
    results = beam_search(model, src, beam_size=beam_size, nbest=2, max_len_a=1.0, max_len_b=5)
    assert [r[0].tokens for r in results] == expected_outputs(src)
    # The model is confident: the runner-up is far behind.
    assert all(r[0].score - r[1].score > 0.5 for r in results)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_best_beam_is_not_below_greedy_on_the_trained_model(trained, alpha):
    model, src, _, _ = trained
    greedy = greedy_search(model, src, alpha=alpha, max_len_b=5)
    beams = beam_search(model, src, beam_size=4, alpha=alpha, max_len_b=5)
    for g, b in zip(greedy, beams):
        assert b[0].score >= g.score - 1e-5


def test_trained_model_survives_save_and_load(trained, tmp_path):
    model, src, _, _ = trained
    loaded = attnlab.load_model(model.save_pretrained(tmp_path / "reverser"))
    assert [h.tokens for h in greedy_search(loaded, src, max_len_b=5)] == expected_outputs(src)
