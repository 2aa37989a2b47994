"""Token-weighted sums of a run's loss and logs: one update's, a log line's, the last updates'.

A loss function returns sums (the summed loss and logs of a micro-batch, and the number of
target tokens it counted); the Trainer adds them up and reports per-token means.
:class:`Sums` adds micro-batches as device tensors and brings them to the host once per
update (:meth:`Sums.all_reduce`, one collective under torchrun); :class:`Window` is what
happened since the last log line (its throughput counts the updates only);
:class:`RecentUpdates` keeps the last updates for a run's final figures.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from attnlab.training.distributed import DistributedContext, all_reduce_sum

__all__ = ["RecentUpdates", "Sums", "Window", "float64_on_host"]


@dataclass
class Sums:
    """A token count with the loss and logs summed over it (micro-batches, updates or ranks).

    Tensors are summed as tensors, on their device: adding a micro-batch's results costs no
    host sync; :meth:`all_reduce` brings everything to the host at once (once per update)."""

    tokens: Any = 0
    loss: Any = 0.0
    logs: dict[str, Any] = field(default_factory=dict)

    def add(self, loss_sum: torch.Tensor | float, num_tokens, logs: Mapping[str, Any]) -> None:
        self.tokens = self.tokens + _detached(num_tokens)
        self.loss = self.loss + _detached(loss_sum)
        for key, value in logs.items():
            self.logs[key] = self.logs.get(key, 0.0) + _detached(value)

    def all_reduce(self, context: DistributedContext) -> Sums:
        """The sums over all ranks as Python numbers, in one collective and one host sync
        (log keys are the same on every rank)."""
        keys = sorted(self.logs)
        local = float64_on_host([self.tokens, self.loss, *(self.logs[k] for k in keys)])
        total = all_reduce_sum(local, context).tolist()
        return Sums(int(total[0]), total[1], dict(zip(keys, total[2:])))

    def means(self, prefix: str = "") -> dict[str, float]:
        """Per-token means of the loss and every log; a log named ``nll`` also gives ``ppl``."""
        result = {f"{prefix}loss": self.loss / self.tokens}
        result.update({f"{prefix}{key}": value / self.tokens for key, value in self.logs.items()})
        if "nll" in self.logs:
            result[f"{prefix}ppl"] = math.exp(min(self.logs["nll"] / self.tokens, 700.0))  # exp overflows past ~709
        return result


class Window:
    """What happened since the last log line."""

    def __init__(self) -> None:
        self.sums = Sums()
        self.seconds = 0.0
        self.grad_norm: float | None = None

    def add(self, update: Mapping[str, Any]) -> None:
        sums = update["sums"]
        self.sums.add(sums.loss, sums.tokens, sums.logs)
        self.seconds += update["seconds"]
        self.grad_norm = update["grad_norm"]

    def summary(self) -> dict[str, float]:
        # Throughput of the updates themselves: validation and checkpoints are not counted.
        summary = {
            **self.sums.means(),
            "tokens": self.sums.tokens,
            "tokens_per_s": self.sums.tokens / max(self.seconds, 1e-9),
        }
        if self.grad_norm is not None:
            summary["grad_norm"] = self.grad_norm
        return summary


class RecentUpdates:
    """The sums of the last ``size`` updates, for a run's final figures."""

    def __init__(self, size: int) -> None:
        self._recent: deque[tuple[float, int, dict[str, float]]] = deque(maxlen=size)

    def add(self, sums: Sums) -> None:
        self._recent.append((sums.loss, sums.tokens, dict(sums.logs)))

    def means(self) -> dict[str, float]:
        """Per-token means over the kept updates whose loss is finite, as ``loss``, ``nll``,
        ... with ``updates`` (how many); empty when there is none."""
        kept = [(loss, tokens, logs) for loss, tokens, logs in self._recent if math.isfinite(loss) and tokens]
        result: dict[str, float] = {}
        if kept:
            total = Sums()
            for loss, tokens, logs in kept:
                total.add(loss, tokens, logs)
            result.update(total.means())
            result["updates"] = len(kept)
        return result


def _detached(value):
    return value.detach() if isinstance(value, torch.Tensor) else value


def float64_on_host(values: Sequence[Any]) -> torch.Tensor:
    """``(len(values),)`` float64 CPU tensor of numbers and scalar tensors, with one copy
    from the device for all tensors (the only host sync of a training update)."""
    tensors = [(i, v) for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    out = torch.tensor([0.0 if isinstance(v, torch.Tensor) else float(v) for v in values], dtype=torch.float64)
    if tensors:
        device = tensors[0][1].device
        stacked = torch.stack([v.detach().reshape(()).to(device=device, dtype=torch.float64) for _, v in tensors])
        out[[i for i, _ in tensors]] = stacked.cpu()
    return out

