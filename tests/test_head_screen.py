"""The head screened in int8 (attnlab.head_screen): every logit within its bounds against float64,
a step that says it is sure gives the float64 argmax, ties / inf / nan are never sure, suppressed
ids are never chosen, and a decoder's greedy step (eager, teacher-forced) picks the tokens its
plain step's argmax picks, renewing its screen when the head's weight changes. The screen's
integer products are exact only where ``torch._int_mm`` sums exactly; elsewhere no step uses it
and these tests skip."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab import head_screen
from attnlab.models import parts
from attnlab.head_screen import CANDIDATES, HeadScreen, resolve, screen_bounds, screened_argmax
from attnlab.quantize import integer_sums_exact

pytestmark = pytest.mark.skipif(not integer_sums_exact(), reason="torch._int_mm does not sum exactly on this CPU")


@pytest.fixture(autouse=True)
def _screens_here(monkeypatch):
    """The screen's arithmetic is tested wherever torch._int_mm sums exactly, also on a CPU where the
    screen is too slow to be taken (no VNNI: integer_sums_pay), so the rule is set aside here."""
    monkeypatch.setattr(parts, "integer_sums_pay", lambda: True)


def _head(vocab: int, d: int, seed: int, *, scale: float = 0.05, bias: bool = False):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, d, generator=generator) * scale
    weight[::7] *= 8.0  # rows of other sizes: per-row scales differ
    return weight, (torch.randn(vocab, generator=generator) if bias else None)


def _hidden(rows: int, d: int, seed: int, *, outliers: bool = False) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, d, generator=generator)
    if outliers:  # GPT-2's last hidden states have a few huge features
        hidden[:, :3] *= 60.0
    return hidden


def _exact(hidden, weight, bias):
    logits = hidden.double() @ weight.double().t()
    return logits if bias is None else logits + bias.double()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("outliers", [False, True])
def test_every_logit_lies_within_its_bounds(bias, outliers):
    for seed in range(4):
        weight, b = _head(3000, 96, seed, bias=bias)
        hidden = _hidden(3, 96, 100 + seed, outliers=outliers)
        lower, upper = screen_bounds(hidden, b, HeadScreen(weight, b))
        exact = _exact(hidden, weight, b)
        assert bool((lower.double() <= exact).all()) and bool((exact <= upper.double()).all())
        # and the bounds are tight enough to screen: a few rows reach the best lower bound, not hundreds
        reaching = (upper >= lower.amax(dim=-1, keepdim=True)).sum(dim=-1)
        assert int(reaching.max()) < 100


@pytest.mark.parametrize("bias", [False, True])
def test_a_sure_step_gives_the_float64_argmax(bias):
    sure_rows = 0
    for seed in range(6):
        weight, b = _head(2048, 64, seed, scale=0.3, bias=bias)
        hidden = _hidden(4, 64, 200 + seed, outliers=seed % 2 == 1)
        tokens, sure = screened_argmax(hidden, weight, b, HeadScreen(weight, b))
        exact = _exact(hidden, weight, b)
        top2 = exact.topk(2, dim=-1).values
        clear = (top2[:, 0] - top2[:, 1]) > 1e-4 * top2[:, 0].abs().clamp_min(1.0)  # no float32 near-tie
        wanted = exact.argmax(dim=-1)
        assert bool(((tokens == wanted) | ~sure | ~clear).all())
        sure_rows += int((sure & clear).sum())
    assert sure_rows >= 12  # the screen decides most rows by itself


def test_ties_inf_and_nan_are_never_sure_and_resolve_takes_the_whole_product():
    weight, _ = _head(2048, 32, 0)
    hidden = _hidden(3, 32, 1)
    weight[100:100 + CANDIDATES + 1] = hidden[0] * 5.0  # more equal best rows than candidates
    hidden[1, 4] = float("inf")
    hidden[2, 7] = float("nan")
    tokens, sure = screened_argmax(hidden, weight, None, HeadScreen(weight))
    assert sure.tolist() == [False, False, False]
    logits_of = lambda rows: F.linear(rows, weight)  # noqa: E731
    resolved = resolve(tokens, sure, hidden, logits_of)
    assert resolved.tolist() == logits_of(hidden).argmax(dim=-1).tolist()
    assert resolved[0].item() == 100  # the first of the equal rows, as torch.argmax picks
    sure_tokens = torch.tensor([5, 6, 7])
    assert resolve(sure_tokens, torch.ones(3, dtype=torch.bool), hidden, None) is sure_tokens


def test_suppressed_ids_are_never_chosen():
    weight, _ = _head(2048, 48, 3)
    hidden = _hidden(2, 48, 4)
    best = _exact(hidden, weight, None).argmax(dim=-1)
    suppress = torch.cat([best, torch.arange(0, 2048, 5)]).unique()
    tokens, sure = screened_argmax(hidden, weight, None, HeadScreen(weight), suppress)
    logits = F.linear(hidden, weight).index_fill(-1, suppress, float("-inf"))
    assert bool(sure.all())
    assert tokens.tolist() == logits.argmax(dim=-1).tolist()
    assert not bool(torch.isin(tokens, suppress).any())


def _decoder_lm(vocab: int = 1500):
    torch.manual_seed(0)
    return attnlab.create_model("lm_tiny", vocab_size=vocab, d_model=32, num_heads=4, d_ff=48, num_layers=2,
                                max_positions=64).eval()


def test_a_greedy_step_picks_the_plain_steps_argmax_teacher_forced():
    model = _decoder_lm()
    ids = torch.randint(1, 1500, (1, 40), generator=torch.Generator().manual_seed(5))
    screened_cache, plain_cache = model.new_cache(1, 40), model.new_cache(1, 40)
    assert model.greedy_screen() is not None
    unsure = 0
    with torch.inference_mode():
        model.prefill(ids[:, :4], screened_cache)
        model.prefill(ids[:, :4], plain_cache)
        for t in range(4, 40):
            tokens, sure, hidden = model.greedy_step(ids[:, t], screened_cache)
            unsure += int((~sure).sum())
            chosen = resolve(tokens, sure, hidden, model.step_logits)
            assert chosen.tolist() == model.step(ids[:, t], plain_cache).argmax(dim=-1).tolist()
    assert unsure <= 4  # the screen decided nearly every step itself


def test_the_screen_is_renewed_when_the_heads_weight_changes_and_absent_for_small_heads():
    model = _decoder_lm()
    screen = model.greedy_screen()
    assert model.greedy_screen() is screen  # kept while the weight is unchanged
    with torch.no_grad():
        model.decoder.head.weight[3].mul_(2.0)
    renewed = model.greedy_screen()
    assert renewed is not screen
    assert torch.equal(renewed.values, HeadScreen(model.decoder.head.weight).values)
    assert _decoder_lm(vocab=head_screen.MIN_VOCABULARY - 1).greedy_screen() is None


def test_no_screen_where_the_integer_product_does_not_pay(monkeypatch):
    """A CPU without int8 dot-product instructions (an AVX2 EPYC: torch._int_mm exact but 5x slower
    than float32 there) decodes greedily with the whole head: no screen, every step sure, the plain
    step's argmax."""
    model = _decoder_lm()
    monkeypatch.setattr(parts, "integer_sums_pay", lambda: False)
    assert model.greedy_screen() is None
    ids = torch.tensor([[5, 900, 17]])
    with torch.inference_mode():
        cache, plain = model.new_cache(1, 8), model.new_cache(1, 8)
        model.prefill(ids, cache)
        model.prefill(ids, plain)
        tokens, sure, hidden = model.greedy_step(torch.tensor([33]), cache)
        assert bool(sure.all()) and tokens.tolist() == model.step(torch.tensor([33]), plain).argmax(dim=-1).tolist()
