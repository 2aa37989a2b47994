"""Worker for test_distributed.py, run as ``torchrun --nproc_per_node=2 _ddp_worker.py OUT_DIR``.

Trains the toy model for 3 steps, then resumes a fresh Trainer from the
checkpoint for 3 more: this exercises DDP, global token normalisation,
per-rank RNG gathering, rank-0-only writing and resume under DDP. Then a run
whose time budget is already spent must stop every rank after one update, and a
SIGINT that only rank 1 receives (twice, as under torchrun's forwarding, during update 3)
must stop both ranks after update 3 with one checkpoint.
"""

import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))  # run as a script: import the sibling helpers directly

from _toys import loss_fn, make_batches, make_model, make_source  # noqa: E402

from attnlab.training import TrainConfig, Trainer  # noqa: E402
from attnlab.training.trainer import TrainingInterrupted  # noqa: E402

# Per rank: micro-batches per update; the global batch is WORLD_SIZE times this.
GRAD_ACCUM_PER_RANK = 2


def run(out_dir: str, max_steps: int, grad_accum_steps: int, *, resume: bool,
        max_minutes: float | None = None) -> Trainer:
    """Shared with the single-process reference run in test_distributed.py."""
    config = TrainConfig(
        out_dir=out_dir, max_steps=max_steps, d_model=8, warmup_steps=2, grad_accum_steps=grad_accum_steps,
        clip_grad_norm=1.0, log_every=1, validate_every=3, checkpoint_every=3, progress_bar=False,
        max_minutes=max_minutes,
    )
    trainer = Trainer(make_model(seed=0), loss_fn, make_source(count=7), config, valid_batches=make_batches(3, seed=11))
    trainer.train(resume=resume)
    return trainer


if __name__ == "__main__":
    torch.set_num_threads(1)
    output = sys.argv[1]
    first = run(output, 3, GRAD_ACCUM_PER_RANK, resume=False)
    assert first.context.world_size == 2 and dist.is_initialized(), "expected to run under torchrun"
    run(output, 6, GRAD_ACCUM_PER_RANK, resume=True)
    # A spent time budget stops both ranks after the same first update (no hang, one checkpoint).
    budget = run(output + "_budget", 100, GRAD_ACCUM_PER_RANK, resume=False, max_minutes=1e-9)
    assert budget.step == 1, budget.step
    calls = [0]

    def signalled_on_rank_1(model, batch):
        calls[0] += 1
        if calls[0] == 5 and dist.get_rank() == 1:  # update 3's first micro-batch, on rank 1 only
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # torchrun forwards a Ctrl-C the worker already got
        return loss_fn(model, batch)

    config = TrainConfig(out_dir=output + "_signal", max_steps=100, d_model=8, warmup_steps=2,
                         grad_accum_steps=GRAD_ACCUM_PER_RANK, log_every=1, progress_bar=False)
    stopped = Trainer(make_model(seed=0), signalled_on_rank_1, make_source(count=7), config)
    try:
        stopped.train()
        raise AssertionError("no TrainingInterrupted")
    except TrainingInterrupted as error:
        assert error.step == stopped.step == 3 and error.signal_number == signal.SIGINT, (error.step, stopped.step)
        assert not error.immediate
    dist.destroy_process_group()
