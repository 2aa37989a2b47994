"""The optimizer factory: Adam (the Transformer paper) or AdamW with decoupled weight decay.

``build_optimizer(model, "adam", ...)`` is the paper's optimizer, one parameter group
holding every parameter (what the Trainer always built, so old checkpoints still load).

``build_optimizer(model, "adamw", weight_decay=w, ...)`` is Loshchilov & Hutter's AdamW
(``p <- p - lr * (adam_update + w * p)``) with two parameter groups: weight matrices
decay; biases, normalisation weights, embedding tables and whatever the model names in
an optional ``no_weight_decay()`` (parameter names, e.g. a ViT's position embedding and
class token) do not. Decaying a LayerNorm gain or a bias pulls it towards zero, which
regularises nothing and only fights the normalisation (the usual practice of BERT, timm,
nanoGPT).

Both use torch's fused kernel wherever torch has one for every parameter (floating point, on
the CPU or a GPU): one pass over each tensor instead of the per-parameter loop's dozen
element-wise kernels (a GPT-2-small fine-tuning update on one CPU thread: 0.19 s less CPU
time, 1.07x the step rate; benchmarks/finetune_step.py, docs/benchmarks.md), the same update
up to float rounding (tested in float64). A checkpoint's parameter groups record the kernel of the run that wrote them;
loading one keeps this optimizer's choice (:func:`_keep_kernel`), so a run resumed from a
checkpoint of the per-parameter loop continues with the fused kernel and vice versa.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["OPTIMIZERS", "build_optimizer", "no_weight_decay_names"]

OPTIMIZERS = ("adam", "adamw")

_FUSED_DEVICES = ("cpu", "cuda")  # where torch's fused Adam/AdamW kernels run (cuda also covers ROCm)

_NORMS = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d,
          nn.InstanceNorm1d, nn.InstanceNorm2d, nn.RMSNorm)


def no_weight_decay_names(model: nn.Module) -> set[str]:
    """Names (as in ``model.named_parameters()``) of the parameters AdamW must not decay.

    Biases and every other parameter with fewer than two dimensions, the weights of
    normalisation layers and of ``nn.Embedding`` tables, and the names returned by
    ``model.no_weight_decay()`` when the model defines it. A parameter shared by several
    modules (tied embeddings) is exempt if any of its uses is.
    """
    exempt_ids = set()
    for module in model.modules():
        if isinstance(module, _NORMS + (nn.Embedding,)):
            exempt_ids.update(id(p) for p in module.parameters(recurse=False))
    named = dict(model.named_parameters(remove_duplicate=False))
    listed = set(model.no_weight_decay()) if callable(getattr(model, "no_weight_decay", None)) else set()
    unknown = sorted(listed - set(named))
    if unknown:
        raise ValueError(f"{type(model).__name__}.no_weight_decay() names {unknown}, which are not parameters of the model")
    exempt_ids.update(id(named[name]) for name in listed)
    return {name for name, p in named.items() if p.ndim < 2 or id(p) in exempt_ids}


def build_optimizer(model: nn.Module, name: str = "adam", *, lr: float, betas: tuple[float, float] = (0.9, 0.98),
                    eps: float = 1e-9, weight_decay: float = 0.0, fused: bool | None = None) -> torch.optim.Optimizer:
    """Adam or AdamW over ``model``'s trainable parameters.

    Args:
        name: ``"adam"`` (one group, no weight decay) or ``"adamw"`` (a decayed group
            and an exempt group; see :func:`no_weight_decay_names`).
        weight_decay: AdamW's decoupled decay coefficient (0 for Adam: Adam's own
            ``weight_decay`` is an L2 term added to the gradient, which is not what is
            meant here, so it is refused).
        fused: use torch's fused kernel; ``None`` = when it has one for every parameter
            (floating point, on the CPU or a GPU), else torch's default (the per-parameter
            loop on the CPU).
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")
    if not weight_decay >= 0.0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    if name == "adam" and weight_decay:
        raise ValueError(f"weight_decay={weight_decay} needs optimizer='adamw' (decoupled decay); "
                         "Adam's coupled L2 penalty is not offered")
    parameters = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if fused is None:
        fused = bool(parameters) and all(p.device.type in _FUSED_DEVICES and p.is_floating_point()
                                         for _, p in parameters)
    options = dict(lr=lr, betas=tuple(betas), eps=eps, fused=fused or None)
    if name == "adam":
        optimizer = torch.optim.Adam([p for _, p in parameters], **options)
    else:
        exempt = no_weight_decay_names(model)
        groups = [
            {"params": [p for n, p in parameters if n not in exempt], "weight_decay": weight_decay},
            {"params": [p for n, p in parameters if n in exempt], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, **options)
    optimizer.register_load_state_dict_pre_hook(_keep_kernel)
    return optimizer


def _keep_kernel(optimizer: torch.optim.Optimizer, state_dict: dict) -> dict:
    """``load_state_dict`` pre-hook: a checkpoint's parameter groups carry the ``fused`` and
    ``foreach`` flags of the run that wrote it (and torch's ``load_state_dict`` would adopt
    them); keep this optimizer's instead. The kernels compute the same update, and torch moves
    each loaded ``step`` counter where the kept kernel needs it. Groups that do not pair up
    are left for ``load_state_dict`` to refuse."""
    saved = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
    if not isinstance(saved, list) or len(saved) != len(optimizer.param_groups) \
            or not all(isinstance(group, dict) for group in saved):
        return state_dict
    groups = [{**old, "fused": new["fused"], "foreach": new["foreach"]}
              for old, new in zip(saved, optimizer.param_groups)]
    return {**state_dict, "param_groups": groups}
