"""Multi-process training under ``torchrun``: process group, DDP wrapping, collectives.

Launch the same training script with ``torchrun --nproc_per_node=N script.py``;
torchrun sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` and
:func:`init_distributed` picks them up (gloo on CPU, nccl when CUDA is there).
Without those variables everything here degrades to a single process with no
communication at all, so the trainer has one code path.

How work is split (see :class:`attnlab.training.trainer.Trainer`): every rank
iterates the *same* batch source in the same order and keeps every
``world_size``-th micro-batch, starting at its rank. The global batch of one
update is therefore ``world_size * grad_accum_steps`` consecutive micro-batches,
exactly the batch a single process sees with ``grad_accum_steps`` multiplied by
``world_size``; and the data position is the same on every rank, so one
checkpoint serves them all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["DistributedContext", "init_distributed", "wrap_model", "unwrap_model", "all_reduce_sum", "gather_bytes"]


@dataclass(frozen=True)
class DistributedContext:
    """Who this process is. The default is a single process.

    ``device`` is where this rank's model and batches belong (``cuda:LOCAL_RANK``
    under nccl), or ``None`` to leave the model where the caller put it.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    device: torch.device | None = None

    @property
    def is_main(self) -> bool:
        """Rank 0: the only process that writes files, logs and shows progress."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def comm_device(self) -> torch.device:
        """Where tensors must live to be communicated (nccl only moves CUDA tensors)."""
        if self.backend == "nccl":
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def barrier(self) -> None:
        if self.is_distributed:
            dist.barrier()


def init_distributed(backend: str | None = None) -> DistributedContext:
    """Join the process group torchrun describes in the environment, if any.

    Reuses an already initialised default group. ``backend`` defaults to nccl
    when CUDA is available, else gloo.
    """
    if dist.is_available() and dist.is_initialized():
        backend = dist.get_backend()
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local_rank) if backend == "nccl" else None
        return DistributedContext(dist.get_rank(), dist.get_world_size(), local_rank, backend, device)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistributedContext()
    if not dist.is_available():
        raise ValueError(f"WORLD_SIZE={world_size} but this torch build has no torch.distributed")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend not in {"nccl", "gloo"}:
        raise ValueError(f"backend must be 'nccl' or 'gloo', got {backend!r}")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = None
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend)
    return DistributedContext(dist.get_rank(), dist.get_world_size(), local_rank, backend, device)


def wrap_model(model: torch.nn.Module, context: DistributedContext) -> torch.nn.Module:
    """``DistributedDataParallel(model)`` when there are several processes, else ``model``.

    DDP broadcasts rank 0's parameters and buffers at construction, so every
    rank starts from the same weights whatever its own initialisation was.
    """
    if not context.is_distributed:
        return model
    device_ids = [context.device.index] if context.device is not None and context.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The bare module inside a DDP wrapper (or the module itself)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def all_reduce_sum(values: torch.Tensor, context: DistributedContext) -> torch.Tensor:
    """Sum ``values`` over all ranks; returns a new tensor on ``values``' device."""
    if not context.is_distributed:
        return values.clone()
    reduced = values.detach().to(context.comm_device, copy=True)
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    return reduced.to(values.device)


def gather_bytes(data: bytes, context: DistributedContext) -> list[bytes]:
    """Every rank's ``data``, in rank order, on every rank.

    Used for per-rank RNG states; unlike ``all_gather_object`` it never pickles.
    """
    if not context.is_distributed:
        return [data]
    device = context.comm_device
    length = torch.tensor([len(data)], dtype=torch.int64, device=device)
    lengths = [torch.zeros_like(length) for _ in range(context.world_size)]
    dist.all_gather(lengths, length)
    longest = max(int(n.item()) for n in lengths)
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    if data:
        padded[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    gathered = [torch.empty_like(padded) for _ in range(context.world_size)]
    dist.all_gather(gathered, padded)
    return [bytes(t[: int(n.item())].cpu().numpy().tobytes()) for t, n in zip(gathered, lengths)]
