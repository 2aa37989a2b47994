"""What a Vision Transformer learned: the paper's interpretability figures (Dosovitskiy et al.
2021, Figures 7 and 6) and the quantities behind them.

Quantities (pure functions, tested against their definitions):

* :func:`filter_components`: principal components of the patch-embedding filters;
* :func:`position_similarity`: cosine similarity of each patch's position embedding
  with every other's;
* :func:`mean_attention_distance`: per head, the distance in pixels between a query
  patch and the patches it attends to, weighted by attention (class token excluded,
  each query's weights renormalised over the patches);
* :func:`attention_rollout` (Abnar & Zuidema 2020): per layer the heads' mean attention
  plus the identity for the residual, rows renormalised, multiplied through the layers.

Figures use matplotlib's Agg canvas directly (no pyplot), one PNG each, written to a
temporary name and renamed into place.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnlab.viz.figures import new_figure, save_figure

__all__ = ["attention_rollout", "filter_components", "mean_attention_distance", "patch_distances",
           "position_similarity", "write_vit_figures", "FIGURE_NAMES"]

FIGURE_NAMES = ("embedding_filters.png", "position_similarity.png", "attention_distance.png", "attention_maps.png")


# ---------------------------------------------------------------------- quantities
def filter_components(weight: Tensor, count: int = 28) -> tuple[Tensor, Tensor]:
    """Principal components of the ``d`` patch filters ``weight (d, C, P, P)``.

    Returns the top ``count`` (at most ``min(d, C·P·P)``) unit-norm components as
    ``(count, C, P, P)`` and the share of the variance each explains.
    """
    d = weight.shape[0]
    flat = weight.detach().double().reshape(d, -1)
    centred = flat - flat.mean(0, keepdim=True)
    _, singular, vh = torch.linalg.svd(centred, full_matrices=False)
    count = min(count, vh.shape[0])
    variance = singular.square()
    return vh[:count].reshape(count, *weight.shape[1:]), (variance[:count] / variance.sum().clamp_min(1e-300))


def position_similarity(table: Tensor, grid: tuple[int, int]) -> Tensor:
    """Cosine similarities ``(h, w, h, w)`` between the patch position embeddings
    ``table (h·w, d)`` (class token already removed)."""
    unit = torch.nn.functional.normalize(table.detach().double(), dim=-1)
    return (unit @ unit.T).reshape(grid[0], grid[1], grid[0], grid[1])


def patch_distances(grid: tuple[int, int], patch_size: int) -> Tensor:
    """Euclidean distances in pixels between patch centres, ``(h·w, h·w)`` float64."""
    rows, cols = torch.meshgrid(torch.arange(grid[0], dtype=torch.float64),
                                torch.arange(grid[1], dtype=torch.float64), indexing="ij")
    centres = torch.stack([rows.flatten(), cols.flatten()], dim=1) * patch_size
    return torch.cdist(centres, centres)


def mean_attention_distance(weights: Tensor, grid: tuple[int, int], patch_size: int, num_prefix: int) -> Tensor:
    """Per head, the attention-weighted mean distance (pixels) from each query patch to the
    patches it attends to, averaged over queries and images.

    ``weights (B, H, L, L)`` with ``L = num_prefix + h·w``; the prefix (class token) rows
    and columns are dropped and each query's weights renormalised over the patches.
    Returns ``(H,)`` float64.
    """
    patches = weights.detach().double()[:, :, num_prefix:, num_prefix:]
    patches = patches / patches.sum(-1, keepdim=True).clamp_min(1e-300)
    distances = patch_distances(grid, patch_size).to(patches.device)
    return (patches * distances).sum(-1).mean(dim=(0, 2))


def attention_rollout(layer_weights: list[Tensor]) -> Tensor:
    """Attention rollout ``(B, L, L)`` of per-layer weights ``(B, H, L, L)``: row i says how
    much the output at token i draws from each input token through all layers."""
    rollout = None
    for weights in layer_weights:
        mixed = weights.detach().double().mean(dim=1)
        mixed = mixed + torch.eye(mixed.shape[-1], dtype=mixed.dtype, device=mixed.device)
        mixed = mixed / mixed.sum(-1, keepdim=True)
        rollout = mixed if rollout is None else mixed @ rollout
    return rollout


# ---------------------------------------------------------------------- figures
def _to_display(image: np.ndarray) -> tuple[np.ndarray, str | None]:
    """(C, H, W) -> something imshow draws: grey 2-D with a colour map, or RGB in [0, 1]."""
    if image.shape[0] == 1:
        return image[0], "gray"
    if image.shape[0] == 3:
        low, high = image.min(), image.max()
        return np.transpose((image - low) / max(high - low, 1e-12), (1, 2, 0)), None
    return image.mean(0), "gray"  # other channel counts: their mean


def plot_filters(model, path, *, dpi: int = 100) -> Path:
    """The first layer's filters in pixels: the patch embedding's, or for a hybrid the
    stem's first 3x3 convolution (its patch embedding sees feature maps, not pixels)."""
    stem = model.patch_embed.stem
    weight = model.patch_embed.proj.weight if stem is None else stem.first_conv.weight
    components, explained = filter_components(weight)
    count = len(components)
    columns = min(7, count)
    rows = math.ceil(count / columns)
    figure = new_figure(1.3 * columns + 1.2, 1.3 * rows + 0.8, dpi)
    axes = figure.subplots(rows, columns, squeeze=False)
    limit = float(components.abs().max())
    image = None
    for index, ax in enumerate(axes.flat):
        ax.set_xticks([])
        ax.set_yticks([])
        if index >= count:
            ax.set_axis_off()
            continue
        shown = components[index].numpy()
        if shown.shape[0] == 3:
            ax.imshow(_to_display(shown)[0])
        else:
            image = ax.imshow(shown.mean(0), cmap="RdBu_r", vmin=-limit, vmax=limit)
        ax.set_title(f"PC {index + 1} ({100 * float(explained[index]):.0f}%)", fontsize=7)
        if index % columns == 0:
            ax.set_ylabel("pixel row", fontsize=6)
        if index // columns == rows - 1:
            ax.set_xlabel("pixel column", fontsize=6)
    if image is not None:
        figure.colorbar(image, ax=axes, shrink=0.8, label="component weight")
    size = weight.shape[-1]
    what = "patch-embedding filters" if stem is None else "filters of the stem's first convolution"
    figure.suptitle(f"Principal components of the {weight.shape[0]} {what} ({size}x{size} pixels)", fontsize=9)
    return save_figure(figure, path)


def plot_position_similarity(model, path, *, dpi: int = 100) -> Path:
    config = model.config
    table = model.position_embedding[0, config.num_prefix_tokens:]
    grid = config.grid
    similarity = position_similarity(table, grid).numpy()
    figure = new_figure(1.0 * grid[1] + 1.6, 1.0 * grid[0] + 1.0, dpi)
    axes = figure.subplots(grid[0], grid[1], squeeze=False)
    image = None
    for r in range(grid[0]):
        for c in range(grid[1]):
            ax = axes[r][c]
            image = ax.imshow(similarity[r, c], cmap="viridis", vmin=-1.0, vmax=1.0)
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(f"row {r + 1}", fontsize=6)
            if r == grid[0] - 1:
                ax.set_xlabel(f"col {c + 1}", fontsize=6)
    figure.colorbar(image, ax=axes, shrink=0.8, label="cosine similarity")
    figure.suptitle("Position embedding similarity (each tile: one input patch vs all patches)", fontsize=9)
    return save_figure(figure, path)


def plot_attention_distance(distances: Tensor, patch_size: int, image_size: int, path, *, dpi: int = 100) -> Path:
    """``distances (layers, heads)`` in pixels: the paper's scatter of heads against depth."""
    layers, heads = distances.shape
    figure = new_figure(6.4, 4.8, dpi)
    ax = figure.subplots()
    depth = np.repeat(np.arange(1, layers + 1), heads)
    head_index = np.tile(np.arange(1, heads + 1), layers)
    points = ax.scatter(depth, distances.numpy().ravel(), c=head_index, cmap="tab10" if heads <= 10 else "viridis",
                        s=22)
    figure.colorbar(points, ax=ax, label="head")
    ax.set_xlabel("network depth (layer)")
    ax.set_ylabel("mean attention distance (pixels)")
    ax.set_xticks(range(1, layers + 1))
    ax.set_ylim(0, image_size * math.sqrt(2) / 2)
    ax.set_title(f"Mean attention distance per head ({patch_size}x{patch_size} patches, {image_size}px images)",
                 fontsize=9)
    ax.grid(alpha=0.3)
    return save_figure(figure, path)


def plot_attention_maps(model, image: Tensor, layer_weights: list[Tensor], path, *, dpi: int = 100) -> Path:
    """Class-token attention of each head of the last layer and the attention rollout,
    overlaid on ``image (C, H, W)`` (the model input, any scale). Without a class token
    the maps show the mean attention each patch receives instead."""
    config = model.config
    grid, prefix = config.grid, config.num_prefix_tokens
    last = layer_weights[-1][0].detach().double()  # (H, L, L) for the first image
    if prefix:
        per_head = last[:, 0, prefix:]  # the class token's query row
        rolled = attention_rollout([w[:1] for w in layer_weights])[0, 0, prefix:]
        what = "class-token attention"
    else:
        per_head = last.mean(dim=1)
        rolled = attention_rollout([w[:1] for w in layer_weights])[0].mean(dim=0)
        what = "mean attention received"
    heads = per_head.shape[0]
    shown, cmap = _to_display(image.detach().float().cpu().numpy())
    height, width = image.shape[-2:]
    panels = heads + 2
    columns = min(panels, 5)
    rows = math.ceil(panels / columns)
    figure = new_figure(2.3 * columns + 1.0, 2.3 * rows + 0.6, dpi)
    axes = figure.subplots(rows, columns, squeeze=False)
    maps = [None] + [per_head[h] for h in range(heads)] + [rolled]
    titles = ["input"] + [f"last layer, head {h + 1}" for h in range(heads)] + ["rollout (all layers)"]
    overlay = None
    for index, ax in enumerate(axes.flat):
        if index >= panels:
            ax.set_axis_off()
            continue
        ax.imshow(shown, cmap=cmap, extent=(0, width, height, 0))
        if maps[index] is not None:
            values = maps[index].reshape(grid).numpy()
            values = values / max(values.max(), 1e-12)
            overlay = ax.imshow(values, cmap="inferno", alpha=0.6, vmin=0.0, vmax=1.0, extent=(0, width, height, 0),
                                interpolation="nearest")
        ax.set_title(titles[index], fontsize=7)
        ax.set_xlabel("x (pixels)", fontsize=6)
        ax.set_ylabel("y (pixels)", fontsize=6)
        ax.tick_params(labelsize=5)
    figure.colorbar(overlay, ax=axes, shrink=0.8, label=f"{what} (relative to the map's maximum)")
    figure.suptitle(f"{what.capitalize()} per head and attention rollout", fontsize=9)
    return save_figure(figure, path)


@torch.no_grad()
def write_vit_figures(model, images: Tensor, out_dir: str | os.PathLike, *, dpi: int = 100) -> list[Path]:
    """The four figures of a trained ViT into ``out_dir`` (``FIGURE_NAMES``); ``images``
    are model inputs ``(B, C, H, W)`` at the model's image size (distances are averaged
    over all of them, the maps drawn for the first)."""
    model.eval()
    out_dir = Path(out_dir)
    config = model.config
    if tuple(images.shape[-2:]) != (config.image_size, config.image_size):
        raise ValueError(f"figures need images of the model's size {config.image_size}x{config.image_size}, "
                         f"got {tuple(images.shape[-2:])}")
    _, weights = model.encode(images, need_weights=True)
    per_layer = [layer.self_attn for layer in weights]
    distances = torch.stack([mean_attention_distance(w, config.grid, config.patch_pixels, config.num_prefix_tokens)
                             for w in per_layer])
    paths = [plot_filters(model, out_dir / FIGURE_NAMES[0], dpi=dpi)]
    paths.append(plot_position_similarity(model, out_dir / FIGURE_NAMES[1], dpi=dpi))
    paths.append(plot_attention_distance(distances.cpu(), config.patch_pixels, config.image_size,
                                         out_dir / FIGURE_NAMES[2], dpi=dpi))
    paths.append(plot_attention_maps(model, images[0].cpu(), [w.cpu() for w in per_layer], out_dir / FIGURE_NAMES[3],
                                     dpi=dpi))
    return paths
