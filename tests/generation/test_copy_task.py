"""A tiny Transformer learns to reverse random sequences in a few seconds on a CPU, and
then greedy and beam search reverse fresh sequences.

This is the end-to-end check that the parts fit: embeddings, positions, masks, encoder,
decoder, the loss on teacher-forced logits, and cached decoding of what was learned.

What is exact and what has a margin: the searches are checked exactly against the model's
own recomputation (every output token and its log-probability, from one teacher-forced
forward pass without the cache), which holds for any trained weights. What training
reaches depends on the seed and on the CPU's rounding (seeds 0..16 on an AMD EPYC: test
loss 0.005-0.016, and now and then one of the ~200 test tokens still wrong), so learning is
asserted as a rate with a margin: at least 29 of the 32 fresh sequences reversed exactly
(every seed tried: 31 or 32), where a model or a search that is broken gets almost none.
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
TEST_SIZE, EXACT_AT_LEAST = 32, 29  # fresh sequences, and how many must come out exactly reversed


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
        test_src, test_tgt = reversal_batch(TEST_SIZE, torch.Generator().manual_seed(12345))
        with torch.no_grad():
            test_loss = float(loss_on(model, test_src, test_tgt))
        yield model, test_src, test_tgt, test_loss
    finally:
        torch.set_num_threads(threads)


def expected_outputs(src: torch.Tensor) -> list[list[int]]:
    return [row[row != PAD].flip(0).tolist() + [EOS] for row in src]


def exactly_reversed(outputs: list[list[int]], src: torch.Tensor) -> int:
    return sum(got == want for got, want in zip(outputs, expected_outputs(src)))


def recomputed_log_probs(model, src: torch.Tensor, outputs: list[list[int]]) -> torch.Tensor:
    """Log-probabilities ``(B, T, V)`` of each output's tokens given BOS and the tokens before
    them, from one teacher-forced forward pass over whole prefixes (no cache, no search)."""
    tgt_in = torch.full((len(outputs), max(len(o) for o in outputs)), PAD, dtype=torch.long)
    for row, output in enumerate(outputs):
        tgt_in[row, 0] = BOS
        tgt_in[row, 1:len(output)] = torch.tensor(output[:-1], dtype=torch.long)
    with torch.no_grad():
        return torch.log_softmax(model(src, tgt_in).float(), dim=-1)


def chosen_log_probs(log_probs: torch.Tensor, row: int, output: list[int]) -> torch.Tensor:
    return log_probs[row, :len(output)].gather(-1, torch.tensor(output)[:, None])[:, 0]


def assert_ended_properly(output: list[int], source: torch.Tensor, max_len_b: int = 5) -> None:
    """EOS only as the last token, and either it or the length limit ends the output."""
    assert EOS not in output[:-1], output
    assert output[-1] == EOS or len(output) == int((source != PAD).sum()) + max_len_b, output


def assert_greedy_is_the_models_own_argmax(model, src: torch.Tensor, hypotheses) -> None:
    """Every token greedy search chose is the argmax of the recomputed distribution (up to
    float rounding between the cached and the full pass), and its log_prob their sum."""
    outputs = [h.tokens for h in hypotheses]
    log_probs = recomputed_log_probs(model, src, outputs)
    for row, (h, output) in enumerate(zip(hypotheses, outputs)):
        chosen = chosen_log_probs(log_probs, row, output)
        best = log_probs[row, :len(output)].max(-1).values
        assert (chosen >= best - 1e-4).all(), (row, output, chosen, best)
        assert h.log_prob == pytest.approx(float(chosen.sum()), abs=1e-4)
        assert_ended_properly(output, src[row])


def test_reversal_is_learned_to_near_zero_loss(trained):
    _, _, _, test_loss = trained
    assert test_loss < 0.05  # from ln(9) ≈ 2.2 per token for a model that knows nothing; seeds 0..16: < 0.016


def test_greedy_decoding_reverses_fresh_sequences(trained):
    model, src, _, _ = trained
    hypotheses = greedy_search(model, src, max_len_a=1.0, max_len_b=5)
    assert_greedy_is_the_models_own_argmax(model, src, hypotheses)
    assert exactly_reversed([h.tokens for h in hypotheses], src) >= EXACT_AT_LEAST


@pytest.mark.parametrize("beam_size", [2, 4])
def test_beam_decoding_reverses_fresh_sequences(trained, beam_size):
    model, src, _, _ = trained
    results = beam_search(model, src, beam_size=beam_size, nbest=2, max_len_a=1.0, max_len_b=5)
    # Each hypothesis's log_prob is what the model gives its tokens, its score that over the
    # length penalty (alpha=0.6, the default), the two best are distinct and ordered.
    for rank in (0, 1):
        log_probs = recomputed_log_probs(model, src, [r[rank].tokens for r in results])
        for row, h in enumerate(r[rank] for r in results):
            assert h.log_prob == pytest.approx(float(chosen_log_probs(log_probs, row, h.tokens).sum()), abs=1e-4)
            assert h.score == pytest.approx(h.log_prob / ((5 + len(h.tokens)) / 6) ** 0.6, rel=1e-6)
            assert_ended_properly(h.tokens, src[row])
    assert all(best.tokens != runner_up.tokens and best.score >= runner_up.score for best, runner_up in results)
    assert exactly_reversed([r[0].tokens for r in results], src) >= EXACT_AT_LEAST
    # The model is confident: for nearly every source the runner-up is far behind (every
    # seed tried: at most one of 32 within 0.5; the median gap is above 3).
    gaps = sorted(r[0].score - r[1].score for r in results)
    assert sum(gap > 0.5 for gap in gaps) >= EXACT_AT_LEAST and gaps[len(gaps) // 2] > 1.5, gaps


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_best_beam_is_not_below_greedy_on_the_trained_model(trained, alpha):
    """Beam size 1 is greedy search, exactly. A wider beam is not promised to reach greedy's
    score on every source: the search is fairseq's, which stops a source once it holds k
    finished hypotheses, and on a confident model unlikely early EOS continuations can fill
    those k while the greedy path is still one token from its EOS (seed shift 9: [3, 3, 8, EOS]
    at -6.46 returned where greedy found [3, 3, 8, 9, EOS] at -0.018). So: on nearly every
    source (seed shifts 0 to 10: all but at most one)."""
    model, src, _, _ = trained
    greedy = greedy_search(model, src, alpha=alpha, max_len_b=5)
    for g, b in zip(greedy, beam_search(model, src, beam_size=1, alpha=alpha, max_len_b=5)):
        assert b[0].tokens == g.tokens and b[0].score == pytest.approx(g.score, rel=1e-5, abs=1e-5)
    beams = beam_search(model, src, beam_size=4, alpha=alpha, max_len_b=5)
    assert sum(b[0].score >= g.score - 1e-5 for g, b in zip(greedy, beams)) >= EXACT_AT_LEAST


def test_trained_model_survives_save_and_load(trained, tmp_path):
    model, src, _, _ = trained
    loaded = attnlab.load_model(model.save_pretrained(tmp_path / "reverser"))
    before, after = greedy_search(model, src, max_len_b=5), greedy_search(loaded, src, max_len_b=5)
    # The same weights decode the same outputs (a near tie that the rounding of another
    # buffer could flip is far rarer than the ~1e-6 rounding itself: trained margins are > 0.1).
    assert [h.tokens for h in after] == [h.tokens for h in before]
    for a, b in zip(after, before):
        assert a.log_prob == pytest.approx(b.log_prob, abs=1e-5)
    assert exactly_reversed([h.tokens for h in after], src) >= EXACT_AT_LEAST
