"""The Trainer does not wait for the device after every micro-batch: the number of host
syncs (tensor -> Python number) per update does not grow with gradient accumulation."""

import torch
import torch.nn.functional as F
from ._toys import PAD, make_model, make_source

from attnlab.training import TrainConfig, Trainer


def tensor_loss(model, batch):
    """A loss that itself never syncs: the token count stays a tensor."""
    logits = model(batch["tokens"])
    loss = F.cross_entropy(logits.flatten(0, 1), batch["target"].flatten(), ignore_index=PAD, reduction="sum")
    return loss, (batch["target"] != PAD).sum(), {"nll": loss.detach()}


def count_syncs(monkeypatch, tmp_path, accumulation: int) -> int:
    calls = []
    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    model = make_model()
    config = TrainConfig(out_dir=str(tmp_path / f"accum{accumulation}"), max_steps=3, schedule="cosine",
                         peak_lr=1e-2, warmup_steps=1, grad_accum_steps=accumulation, log_every=100,
                         checkpoint_every=None, progress_bar=False, tune_malloc=False)
    trainer = Trainer(model, tensor_loss, make_source(count=64), config)  # no epoch boundary
    start = len(calls)
    for _ in range(3):
        trainer._update()
    count = len(calls) - start
    monkeypatch.undo()
    return count


def test_host_syncs_per_update_do_not_grow_with_accumulation(monkeypatch, tmp_path):
    one = count_syncs(monkeypatch, tmp_path, 1)
    eight = count_syncs(monkeypatch, tmp_path, 8)
    assert eight == one, f"{one} syncs in 3 updates of 1 micro-batch, {eight} with 8"
