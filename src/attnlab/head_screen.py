"""Greedy decoding's output product screened in int8: the float32 argmax for a quarter of the reads.

A greedy step needs only the argmax of the logits ``z = h @ W.T + b`` over the vocabulary, and
the output projection ``W`` (V x d, float32) is often the largest weight the step reads: half of
the bytes of a 3-layer, d-256 LM with 8,000 tokens, about a third of GPT-2 small's. A one-row
step reads its weights once per token, so its time follows their bytes (docs/benchmarks.md).

The screen (:class:`HeadScreen`) keeps ``W``'s int8 codes ``q`` with one scale ``s_j`` per row
(:func:`attnlab.quantize.quantize_rows`). :func:`screened_argmax` quantises ``h`` to 8 bits as the
int8 kernel does (:func:`attnlab.quantize.input_codes`, ``ĥ`` its dequantised codes) and multiplies
in integers (:func:`attnlab.quantize.code_product`): ``ŝ_j = ĥ · q_j s_j``. With ``E_j = w_j -
q_j s_j`` and ``Q_j = q_j s_j``,

    z_j - ŝ_j = h · E_j + (h - ĥ) · Q_j + b_j,   so   |z_j - b_j - ŝ_j| <= ‖h‖ ‖E_j‖ + ‖h - ĥ‖ ‖Q_j‖

(Cauchy-Schwarz); ``‖E_j‖`` and ``‖Q_j‖`` are computed in float64 when the screen is made, the two
runtime norms in the step. A slack of ``(d + 16) · 2⁻²³ · (‖h‖ (‖w_j‖ + ‖Q_j‖) + |b_j|)`` covers float32
rounding: the screen's own scaling, the bound's arithmetic, and the sums of any float32 kernel that
computes ``z_j`` (the eager step's, whose argmax the tokens equal). So every row's logit lies in
``[ŝ_j + b_j - B_j, ŝ_j + b_j + B_j]``, and the argmax row ``j*`` has ``upper_j* >= max_k lower_k``.

The step takes the ``candidates`` rows with the largest upper bounds, computes their logits in float32
(their rows of ``W`` gathered: ``candidates · d`` reads, not ``V · d``), and returns their argmax with
``sure``: whether the next row's upper bound falls below the best lower bound, so that no row outside
the candidates can be the argmax. Where it is not sure (a near-flat distribution, many equal rows, a
hidden state with inf or nan: the comparisons fail) the caller computes the whole product for that row
(:func:`resolve`). Ties among the candidates go to the smallest index, as ``torch.argmax``'s do.

Where it runs: a greedy step compiled ahead of time (``generate(..., greedy=True, compile="aot")``,
:mod:`attnlab.generation.aot`) on a CPU whose ``torch._int_mm`` sums exactly
and fast (:func:`attnlab.quantize.integer_sums_pay`: int8 dot-product instructions, VNNI or AMX), for a
float32 head of at least :data:`MIN_VOCABULARY` rows. Measured (docs/benchmarks.md,
``benchmarks/aot_configs.py --screen``): the 3-layer, d-256 LM's greedy package 0.225 against 0.288 ms a
token, tokens identical to the eager step's.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.quantize import code_product, input_codes, quantize_rows

CANDIDATES = 16
"""Rows whose logits a screened step computes in float32 (the rest it bounds)."""

MIN_VOCABULARY = 1024
"""A head of fewer rows is not screened: its product is too small for the screen's own work to pay."""

_RUNTIME_SLACK = 1.0 + 2.0 ** -9  # the runtime norms' float32 rounding, for d up to 2^13


class HeadScreen:
    """What :func:`screened_argmax` reads of a ``(V, d)`` float32 head ``weight`` (and its ``bias``):
    the int8 codes, their float32 scales and row sums, and per row the bound's two factors
    (``‖E_j‖`` plus the slack's share of ``‖w_j‖ + ‖Q_j‖``, and ``‖Q_j‖``) and the slack of the bias
    (None without one). Made from the weight's values at the time: the owner renews it when the
    weight changes (:meth:`attnlab.models.parts.TokenDecoder.greedy_screen`)."""

    def __init__(self, weight: Tensor, bias: Tensor | None = None):
        weight = weight.detach().to(torch.float32)
        values, scales = quantize_rows(weight)
        codes = values.to(torch.float64) * scales[:, None]  # Q: the rows the codes stand for
        exact = weight.to(torch.float64)
        slack = (weight.shape[1] + 16) * 2.0 ** -23
        up = 1.0 + 2.0 ** -20  # float64 -> float32, rounded up
        self.values = values
        self.scales = scales.to(torch.float32)  # bfloat16 numbers: exact in float32
        self.row_sums = values.sum(dim=1, dtype=torch.int32)
        self.error_norms = ((exact - codes).norm(dim=1) + slack * (exact.norm(dim=1) + codes.norm(dim=1))) \
            .mul(up).to(torch.float32)
        self.code_norms = codes.norm(dim=1).mul(up).to(torch.float32)
        self.bias_slack = None if bias is None else (bias.detach().to(torch.float64).abs() * slack).mul(up) \
            .to(torch.float32)

    def step_tensors(self) -> tuple[Tensor, ...]:
        """Every tensor a screened step reads of the screen (what an exported step must name)."""
        tensors = (self.values, self.scales, self.row_sums, self.error_norms, self.code_norms)
        return tensors if self.bias_slack is None else (*tensors, self.bias_slack)


def screen_bounds(hidden: Tensor, bias: Tensor | None, screen: HeadScreen) -> tuple[Tensor, Tensor]:
    """``(lower, upper)`` ``(B, V)``: bounds of every logit of ``hidden`` ``(B, d)`` (float32), the
    screen's int8 product plus or minus its bound (module doc)."""
    codes, zero, scale = input_codes(hidden)
    screened = code_product(codes, zero, scale, screen.values, screen.scales, screen.row_sums)  # (B, V)
    dequantised = (codes + 128.0 - zero.to(torch.float32)) * scale
    norm = hidden.norm(dim=-1, keepdim=True) * _RUNTIME_SLACK
    error = (hidden - dequantised).norm(dim=-1, keepdim=True) * _RUNTIME_SLACK
    bound = norm * screen.error_norms + error * screen.code_norms
    if bias is not None:
        screened = screened + bias
        bound = bound + screen.bias_slack
    return screened - bound, screened + bound


def screened_argmax(hidden: Tensor, weight: Tensor, bias: Tensor | None, screen: HeadScreen,
                    suppress_ids: Tensor | None = None, candidates: int = CANDIDATES) -> tuple[Tensor, Tensor]:
    """``(tokens, sure)`` for ``hidden`` ``(B, d)`` float32: each row's argmax of ``hidden @ weight.T +
    bias`` (``suppress_ids`` at -inf) where ``sure`` (bool, ``(B,)``), else a candidate's. Needs
    ``weight.shape[0] > candidates``. Traceable (no host syncs): a package computes it in its loops."""
    lower, upper = screen_bounds(hidden, bias, screen)
    if suppress_ids is not None:
        upper = upper.index_fill(-1, suppress_ids, float("-inf"))
        lower = lower.index_fill(-1, suppress_ids, float("-inf"))
    best_lower = lower.amax(dim=-1, keepdim=True)
    tops, rows = upper.topk(candidates + 1, dim=-1)
    sure = (tops[:, candidates] < best_lower[:, 0])
    rows = rows[:, :candidates]
    exact = (weight[rows] @ hidden.unsqueeze(-1)).squeeze(-1)  # (B, candidates)
    if bias is not None:
        exact = exact + bias[rows]
    logits = torch.full_like(upper, float("-inf")).scatter(-1, rows, exact)
    if suppress_ids is not None:
        logits = logits.index_fill(-1, suppress_ids, float("-inf"))
    return logits.argmax(dim=-1), sure


def resolve(tokens: Tensor, sure: Tensor, hidden: Tensor, logits_of) -> Tensor:
    """The screened step's ``tokens`` with every row that is not ``sure`` replaced by the argmax of
    ``logits_of(hidden[rows])`` (the whole output product). One host read of ``sure`` a step."""
    if bool(sure.all()):
        return tokens
    rows = (~sure).nonzero().squeeze(1)
    tokens = tokens.clone()
    tokens[rows] = logits_of(hidden[rows]).argmax(dim=-1)
    return tokens


__all__ = ["CANDIDATES", "HeadScreen", "MIN_VOCABULARY", "resolve", "screen_bounds", "screened_argmax"]
