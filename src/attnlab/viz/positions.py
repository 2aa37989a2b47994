"""The sinusoidal position encoding as pictures and numbers ("Attention Is All You Need" §3.5).

For each frequency ω_i = base^(-2i/d), the pair (PE(pos, 2i), PE(pos, 2i+1)) =
(sin ω_i·pos, cos ω_i·pos) is a point on the unit circle, so moving k positions is a
rotation by ω_i·k that does not depend on pos:

    PE(pos + k) = R(ω·k) PE(pos),  R block-diagonal with blocks [[cos ω_i k, sin ω_i k], [-sin ω_i k, cos ω_i k]]

which is why the paper expected relative positions to be easy to attend to, and why
PE(pos)·PE(pos + k) = Σ_i cos(ω_i k) depends on k only.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnlab.layers.positional import sinusoidal_table

__all__ = ["frequencies", "rotation_matrix", "rotation_error", "dot_products", "plot_positions"]


def frequencies(d_model: int, base: float = 10000.0) -> Tensor:
    """ω_i = base^(-2i/d_model) for i = 0 .. d_model/2 - 1 (float64)."""
    return base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)


def rotation_matrix(k: float, d_model: int, base: float = 10000.0) -> Tensor:
    """The ``(d_model, d_model)`` block-diagonal R(ω·k) with PE(pos + k) = R PE(pos) (d_model even)."""
    if d_model % 2:
        raise ValueError(f"d_model={d_model} must be even for the rotation property")
    angle = frequencies(d_model, base) * k
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    c, s = torch.cos(angle), torch.sin(angle)
    index = torch.arange(0, d_model, 2)
    # (sin(a + b), cos(a + b)) = (sin a cos b + cos a sin b, cos a cos b - sin a sin b)
    R[index, index], R[index, index + 1] = c, s
    R[index + 1, index], R[index + 1, index + 1] = -s, c
    return R


def rotation_error(length: int, d_model: int, offsets, base: float = 10000.0) -> dict[int, float]:
    """max |PE(pos + k) - R(ω·k) PE(pos)| over pos = 0 .. length-1, for each offset k (float64)."""
    table = sinusoidal_table(length + max(offsets), d_model, base=base, dtype=torch.float64)
    errors = {}
    for k in offsets:
        rotated = table[:length] @ rotation_matrix(k, d_model, base).T
        errors[int(k)] = float((table[k:k + length] - rotated).abs().max())
    return errors


def dot_products(table: Tensor, positions, max_offset: int) -> Tensor:
    """``(len(positions), max_offset + 1)``: PE(pos)·PE(pos + k) for k = 0 .. max_offset."""
    return torch.stack([table[p:p + max_offset + 1] @ table[p] for p in positions])


def plot_positions(out: str | os.PathLike, *, length: int = 128, d_model: int = 128, base: float = 10000.0,
                   learned: Tensor | None = None, learned_name: str = "", dpi: int = 100) -> list[Path]:
    """Write the PNGs: ``positions_sinusoidal.png`` (the table as a heatmap, and the
    learned table beside it when given), ``positions_dot_products.png`` (PE(pos)·PE(pos+k)
    against k, for several pos; the same for the learned table) and
    ``positions_rotation.png`` (one frequency pair's points on the unit circle, and the
    rotation property's error against k). Returns the paths."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Path(out)
    table = sinusoidal_table(length + length, d_model, base=base, dtype=torch.float64)
    panels = 1 if learned is None else 2
    paths = []

    def save(figure, name):
        FigureCanvasAgg(figure)
        figure.tight_layout()
        path = out / name
        figure.savefig(path, format="png")
        paths.append(path)

    figure = Figure(figsize=(6 * panels, 4.5), dpi=dpi)
    ax = figure.add_subplot(1, panels, 1)
    image = ax.imshow(table[:length].numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest")
    ax.set(title=f"sinusoidal PE, d_model={d_model}", xlabel="dimension", ylabel="position")
    figure.colorbar(image, ax=ax)
    if learned is not None:
        ax = figure.add_subplot(1, panels, 2)
        values = learned[:length].double().numpy()
        bound = float(np.abs(values).max())
        image = ax.imshow(values, aspect="auto", cmap="RdBu", vmin=-bound, vmax=bound, interpolation="nearest")
        ax.set(title=f"learned positions{': ' + learned_name if learned_name else ''}", xlabel="dimension",
               ylabel="position")
        figure.colorbar(image, ax=ax)
    save(figure, "positions_sinusoidal.png")

    starts = [0, length // 4, length // 2]
    figure = Figure(figsize=(6 * panels, 4), dpi=dpi)
    ax = figure.add_subplot(1, panels, 1)
    products = dot_products(table, starts, length - 1)
    for start, row in zip(starts, products):
        ax.plot(row.numpy(), label=f"pos={start}", linewidth=1)
    ax.set(title="sinusoidal: PE(pos)·PE(pos+k) depends on k only", xlabel="k", ylabel="dot product")
    ax.legend()
    if learned is not None:
        ax = figure.add_subplot(1, panels, 2)
        learned64 = learned.double()
        span = min(length, learned64.shape[0] // 2)
        for start in [0, span // 4, span // 2]:
            ax.plot(dot_products(learned64, [start], span - 1)[0].numpy(), label=f"pos={start}", linewidth=1)
        ax.set(title="learned: PE(pos)·PE(pos+k)", xlabel="k", ylabel="dot product")
        ax.legend()
    save(figure, "positions_dot_products.png")

    figure = Figure(figsize=(11, 4.5), dpi=dpi)
    ax = figure.add_subplot(1, 2, 1)
    pair = min(4, d_model // 2 - 1)
    points = table[:length, 2 * pair:2 * pair + 2].numpy()
    ax.plot(points[:, 0], points[:, 1], ".", markersize=3)
    for pos in (0, 1, 2):
        ax.annotate(f"pos {pos}", points[pos])
    ax.set(title=f"dimensions {2 * pair}, {2 * pair + 1}: each step rotates by ω={float(frequencies(d_model, base)[pair]):.3g}",
           xlabel=f"PE(pos, {2 * pair}) = sin", ylabel=f"PE(pos, {2 * pair + 1}) = cos", aspect="equal")
    ax = figure.add_subplot(1, 2, 2)
    offsets = list(range(1, length))
    errors = rotation_error(length, d_model, offsets, base)
    ax.semilogy(offsets, [max(errors[k], 1e-18) for k in offsets], linewidth=1)
    ax.set(title="max |PE(pos+k) − R(ωk)·PE(pos)| (float64)", xlabel="k", ylabel="error")
    save(figure, "positions_rotation.png")
    return paths
