"""Table 1 of "Attention Is All You Need", measured: cost per layer, sequential operations and
maximum path length of self-attention, recurrent, convolutional and restricted (local)
self-attention layers.

The paper's orders (n = length, d = width, k = kernel, r = neighbourhood):

=================  ===============  ==========  ===============
layer              per-layer cost   sequential  max path length
=================  ===============  ==========  ===============
self-attention     O(n²·d)          O(1)        O(1)
recurrent          O(n·d²)          O(n)        O(n)
convolutional      O(k·n·d²)        O(1)        O(n/k) (contiguous kernels)
restricted attn    O(r·n·d)         O(1)        O(n/r)
=================  ===============  ==========  ===============

:func:`measure` times one forward of each layer (and counts its floating-point operations
with torch's ``FlopCounterMode`` and its largest allocation with the profiler) over a grid
of n and d; :func:`fit_slopes` fits log–log slopes; :func:`max_path_length` computes path
lengths from each layer's connectivity by breadth-first search.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["LAYERS", "PAPER_ORDERS", "Measurement", "build_layer", "local_attention", "measure", "fit_slopes",
           "max_path_length", "crossover", "plot_complexity"]

LAYERS = ("self-attention", "recurrent", "convolutional", "local attention")
# exponents of n and d in the paper's per-layer cost
PAPER_ORDERS = {"self-attention": (2, 1), "recurrent": (1, 2), "convolutional": (1, 2), "local attention": (1, 1)}
KERNEL = 3  # convolution width k
WINDOW = 32  # restricted attention: each query sees the r = WINDOW keys around it
HEADS = 4


def local_attention(q: Tensor, k: Tensor, v: Tensor, window: int) -> Tensor:
    """Restricted self-attention: query i attends to keys i - w//2 .. i + w//2 (clipped at the
    ends). Blocked ("sliding chunks"): the sequence is cut into blocks of w//2 positions and
    each block's queries meet the keys of its own and its two neighbouring blocks in one
    matrix product, so time and memory are O(w·n·d), not O(n²·d). ``(B, H, n, D)``."""
    batch, heads, n, dim = q.shape
    half = max(window // 2, 1)
    blocks = -(-n // half)
    padded = blocks * half

    def split(x: Tensor, extra: int) -> Tensor:
        return F.pad(x, (0, 0, extra, padded - n + extra))

    qb = split(q, 0).view(batch, heads, blocks, half, dim)  # (B, H, nb, b, D)
    kb = split(k, half).unfold(2, 3 * half, half)  # (B, H, nb, D, 3b): previous, own and next block
    vb = split(v, half).unfold(2, 3 * half, half)
    scores = qb @ kb / math.sqrt(dim)  # (B, H, nb, b, 3b)
    query = torch.arange(padded, device=q.device).view(blocks, half, 1)
    key = (torch.arange(blocks, device=q.device).view(blocks, 1, 1) - 1) * half + torch.arange(3 * half,
                                                                                                device=q.device)
    allowed = ((key - query).abs() <= half) & (key >= 0) & (key < n)  # (nb, b, 3b)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
    out = weights @ vb.transpose(-2, -1)  # (B, H, nb, b, D)
    return out.reshape(batch, heads, padded, dim)[:, :, :n]


class _Attention(nn.Module):
    """The attention itself, as Table 1 counts it: the n x n (or n x r) weights and their
    product with the values, on the layer's input split into heads. The query/key/value
    and output projections (O(n·d²), like a recurrent layer) are left out, as the paper's
    O(n²·d) and O(r·n·d) leave them out."""

    def __init__(self, d: int, window: int | None):
        super().__init__()
        self.window = window

    def forward(self, x: Tensor) -> Tensor:
        batch, n, d = x.shape
        h = x.view(batch, n, HEADS, d // HEADS).transpose(1, 2)  # (B, H, n, D): q = k = v
        if self.window is None:
            weights = torch.softmax(h @ h.transpose(-2, -1) / math.sqrt(d // HEADS), -1)  # explicit (n, n)
            out = weights @ h
        else:
            out = local_attention(h, h, h, self.window)
        return out.transpose(1, 2).reshape(batch, n, d)


class _Recurrent(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.rnn = nn.LSTM(d, d, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.rnn(x)[0]


class _Convolution(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.conv = nn.Conv1d(d, d, KERNEL, padding=KERNEL // 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


def build_layer(kind: str, d: int) -> nn.Module:
    """One layer of ``kind`` (see :data:`LAYERS`) of width ``d``, ``(B, n, d) -> (B, n, d)``."""
    if kind == "self-attention":
        return _Attention(d, None)
    if kind == "local attention":
        return _Attention(d, WINDOW)
    if kind == "recurrent":
        return _Recurrent(d)
    if kind == "convolutional":
        return _Convolution(d)
    raise ValueError(f"unknown layer {kind!r}; choose one of {LAYERS}")


@dataclass
class Measurement:
    layer: str
    n: int
    d: int
    seconds: float  # median of the repeats, one forward
    flops: int  # torch's FlopCounterMode count (matrix products and convolutions; LSTM: 0, not counted)
    peak_bytes: int  # the largest allocation of one operator during the forward (torch profiler)


def _flops(module: nn.Module, x: Tensor) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        module(x)
    return int(counter.get_total_flops())


def _peak_bytes(module: nn.Module, x: Tensor) -> int:
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        module(x)
    return int(max((event.cpu_memory_usage for event in prof.key_averages()), default=0))


@contextlib.contextmanager
def _quiet_stderr():
    # The profiler's C++ side writes start/stop notes straight to file descriptor 2.
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@torch.no_grad()
def measure(ns, ds, *, layers=LAYERS, repeats: int = 3, batch: int = 1, seed: int = 0,
            timing: bool = True) -> list[Measurement]:
    """Time (median of ``repeats``, after one warm-up), count FLOPs and the largest allocation
    of one forward of each layer for every (n, d). ``timing=False`` skips the clock and
    the profiler (FLOP counts only: deterministic, for tests)."""
    torch.manual_seed(seed)
    results = []
    for kind in layers:
        for d in ds:
            module = build_layer(kind, d).eval()
            for n in ns:
                x = torch.randn(batch, n, d)
                flops = _flops(module, x)
                seconds, peak = float("nan"), 0
                if timing:
                    module(x)
                    times = []
                    for _ in range(repeats):
                        start = time.perf_counter()
                        module(x)
                        times.append(time.perf_counter() - start)
                    seconds = statistics.median(times)
                    peak = _peak_bytes(module, x)
                results.append(Measurement(kind, n, d, seconds, flops, peak))
    return results


def fit_slopes(results: list[Measurement], value: str = "seconds") -> dict[str, dict[str, float]]:
    """Log–log slopes of ``value`` against n (at each layer's largest d) and against d (at
    its largest n): ``{layer: {"n": slope, "d": slope}}``, fitted on the upper half of each
    axis (sizes at or above the median), where the O() term dominates fixed costs."""
    slopes = {}
    for kind in dict.fromkeys(r.layer for r in results):
        rows = [r for r in results if r.layer == kind]
        big_d, big_n = max(r.d for r in rows), max(r.n for r in rows)
        out = {}
        for axis, fixed in (("n", ("d", big_d)), ("d", ("n", big_n))):
            points = sorted((getattr(r, axis), getattr(r, value)) for r in rows if getattr(r, fixed[0]) == fixed[1])
            middle = float(np.median([x for x, _ in points]))
            xs, ys = zip(*[(x, y) for x, y in points if x >= middle])
            if len(xs) < 2 or min(ys) <= 0:
                out[axis] = float("nan")
                continue
            out[axis] = float(np.polyfit(np.log(xs), np.log(ys), 1)[0])
        slopes[kind] = out
    return slopes


def crossover(results: list[Measurement], value: str = "seconds") -> dict[int, int | None]:
    """For each d: the smallest measured n at which self-attention costs more than the
    recurrent layer (None when it never does on the grid). The paper: at n ≈ d."""
    table = {(r.layer, r.n, r.d): getattr(r, value) for r in results}
    out = {}
    for d in sorted({r.d for r in results}):
        ns = sorted(r.n for r in results if r.d == d and r.layer == "self-attention")
        out[d] = next((n for n in ns if table[("self-attention", n, d)] > table.get(("recurrent", n, d), math.inf)),
                      None)
    return out


def max_path_length(kind: str, n: int, *, kernel: int = KERNEL, window: int = WINDOW) -> int:
    """The fewest edges from input position 0 to output position n-1 through a stack of as
    many layers of ``kind`` as that takes, by breadth-first search over (layer, position)
    nodes: an edge goes from position i of a layer's input to each position it feeds in the
    layer's output, and (recurrent) from step i to step i+1 inside a layer."""
    if n < 1:
        raise ValueError(f"n={n} must be >= 1")
    if kind == "self-attention":
        reach = n
    elif kind == "convolutional":
        reach = kernel // 2
    elif kind == "local attention":
        reach = window // 2
    elif kind != "recurrent":
        raise ValueError(f"unknown layer {kind!r}")
    # nodes: (depth, position); depth 0 = input. Every layer output may be read as the stack's output.
    start, seen, queue = (0, 0), {(0, 0)}, deque([((0, 0), 0)])
    while queue:
        (depth, i), dist = queue.popleft()
        if depth > 0 and i == n - 1:
            return dist
        if kind == "recurrent":
            steps = [(depth + 1, i)] + ([(depth, i + 1)] if depth > 0 and i + 1 < n else [])
        elif kind == "self-attention":
            steps = [(depth + 1, n - 1), (depth + 1, i)]  # all positions are one edge away; the target suffices
        else:
            steps = [(depth + 1, j) for j in range(max(0, i - reach), min(n, i + reach + 1))]
        for node in steps:
            if node not in seen and node[0] <= n + 1:
                seen.add(node)
                queue.append((node, dist + 1))
    raise AssertionError("unreachable")  # every connectivity above reaches n - 1


def plot_complexity(results: list[Measurement], path, *, dpi: int = 100) -> None:
    """Time against n (at the largest d) and against d (at the largest n), log–log, each with
    a dashed line of the paper's order through the largest point."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 4.8), dpi=dpi)
    FigureCanvasAgg(figure)
    slopes = fit_slopes(results)
    for panel, (axis, fixed) in enumerate((("n", "d"), ("d", "n"))):
        ax = figure.add_subplot(1, 2, panel + 1)
        for index, kind in enumerate(dict.fromkeys(r.layer for r in results)):
            rows = [r for r in results if r.layer == kind]
            fixed_value = max(getattr(r, fixed) for r in rows)
            points = sorted((getattr(r, axis), r.seconds) for r in rows if getattr(r, fixed) == fixed_value)
            xs, ys = np.array(points).T
            colour = f"C{index}"
            ax.loglog(xs, ys, "o-", color=colour, label=f"{kind} (fit {slopes[kind][axis]:.2f}, paper "
                                                         f"{PAPER_ORDERS[kind][0 if axis == 'n' else 1]})")
            order = PAPER_ORDERS[kind][0 if axis == "n" else 1]
            ax.loglog(xs, ys[-1] * (xs / xs[-1]) ** order, "--", color=colour, linewidth=0.8)
        ax.set(xlabel=axis, ylabel="seconds per forward", title=f"time vs {axis} (largest {fixed}; dashed: paper's order)")
        ax.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, format="png")
