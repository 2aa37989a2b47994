"""The optimizer factory: Adam as the paper, AdamW with decay only on weight matrices."""

import copy

import pytest
import torch
from torch import nn

from attnlab.training import ListBatchSource, TrainConfig, Trainer, build_optimizer
from attnlab.training.optim import no_weight_decay_names

from ._toys import loss_fn, make_batches, make_model, make_source


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(7, 4)
        self.pos = nn.Parameter(torch.randn(1, 5, 4))
        self.norm = nn.LayerNorm(4)
        self.proj = nn.Linear(4, 4)
        self.conv = nn.Conv2d(2, 4, 3)
        self.head = nn.Linear(4, 7, bias=False)
        self.head.weight = self.embed.weight  # tied: exempt because the embedding is

    def no_weight_decay(self):
        return {"pos"}

    def forward(self, tokens):
        return self.head(self.proj(self.norm(self.embed(tokens) + self.pos[:, : tokens.shape[1]])))


def test_groups_exempt_biases_norms_embeddings_and_named_parameters():
    model = _Net()
    assert no_weight_decay_names(model) == {"embed.weight", "head.weight", "pos", "norm.weight", "norm.bias",
                                            "proj.bias", "conv.bias"}
    optimizer = build_optimizer(model, "adamw", lr=1e-3, weight_decay=0.1)
    assert isinstance(optimizer, torch.optim.AdamW)
    decayed, exempt = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and exempt["weight_decay"] == 0.0
    assert {id(p) for p in decayed["params"]} == {id(model.proj.weight), id(model.conv.weight)}
    assert len(exempt["params"]) == 6  # the tied table counted once


def test_adam_is_one_group_without_decay():
    model = _Net()
    optimizer = build_optimizer(model, lr=1e-3)
    assert type(optimizer) is torch.optim.Adam and len(optimizer.param_groups) == 1
    assert optimizer.param_groups[0]["weight_decay"] == 0


def test_one_step_equals_torch_adamw_with_the_same_groups():
    torch.manual_seed(0)
    model = _Net()
    reference = copy.deepcopy(model)
    tokens = torch.randint(0, 7, (3, 5))
    ours = build_optimizer(model, "adamw", lr=0.05, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.3)
    exempt = [reference.embed.weight, reference.pos, reference.norm.weight, reference.norm.bias,
              reference.proj.bias, reference.conv.bias]
    decayed = [reference.proj.weight, reference.conv.weight]
    theirs = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.3}, {"params": exempt, "weight_decay": 0.0}],
                               lr=0.05, betas=(0.9, 0.95), eps=1e-8)
    for net, optimizer in ((model, ours), (reference, theirs)):
        for _ in range(2):
            net(tokens).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    for (name, a), b in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(a, b), name


def test_decay_shrinks_only_the_decayed_group():
    model = _Net()
    before = copy.deepcopy(model)
    optimizer = build_optimizer(model, "adamw", lr=0.1, weight_decay=0.5)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # a zero gradient: AdamW's step is the decay alone
    optimizer.step()
    torch.testing.assert_close(model.proj.weight, before.proj.weight * (1 - 0.1 * 0.5), rtol=1e-6, atol=0)
    assert torch.equal(model.pos, before.pos) and torch.equal(model.norm.weight, before.norm.weight)
    assert torch.equal(model.embed.weight, before.embed.weight) and torch.equal(model.proj.bias, before.proj.bias)


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="sgd"), "optimizer must be one of"),
    (dict(name="adam", weight_decay=0.1), "needs optimizer='adamw'"),
    (dict(name="adamw", weight_decay=-1.0), "weight_decay must be >= 0"),
])
def test_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_optimizer(_Net(), lr=1e-3, **kwargs)


def test_unknown_no_weight_decay_name_is_an_error():
    model = _Net()
    model.no_weight_decay = lambda: {"nope"}
    with pytest.raises(ValueError, match="nope"):
        build_optimizer(model, "adamw", lr=1e-3, weight_decay=0.1)


def _adamw_run(out_dir, max_steps, *, resume=False, model_seed=0):
    model = make_model(seed=model_seed, dropout=0.2)
    # Noam: a schedule that does not depend on max_steps, so 3 steps + 3 resumed = 6 straight.
    config = TrainConfig(out_dir=str(out_dir), max_steps=max_steps, d_model=8, warmup_steps=2,
                         optimizer="adamw", weight_decay=0.05, betas=(0.9, 0.999), eps=1e-8, log_every=2,
                         checkpoint_every=3, progress_bar=False, tensorboard=False)
    trainer = Trainer(model, loss_fn, make_source(count=5), config)
    trainer.train(resume=resume)
    return model, trainer


def test_trainer_uses_adamw_and_resume_is_exact(tmp_path):
    straight, trainer = _adamw_run(tmp_path / "straight", 6)
    assert isinstance(trainer.optimizer, torch.optim.AdamW)
    assert [g["weight_decay"] for g in trainer.optimizer.param_groups] == [0.05, 0.0]
    _adamw_run(tmp_path / "split", 3)
    resumed, _ = _adamw_run(tmp_path / "split", 6, resume=True, model_seed=99)
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_trainer_config_rejects_decay_without_adamw(tmp_path):
    with pytest.raises(ValueError, match="adamw"):
        TrainConfig(out_dir=str(tmp_path), max_steps=1, d_model=8, weight_decay=0.1)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        TrainConfig(out_dir=str(tmp_path), max_steps=1, d_model=8, optimizer="sgd")


def test_trainer_adamw_step_matches_torch(tmp_path):
    batches = make_batches(1, seed=4)
    model = make_model(seed=1)
    reference = copy.deepcopy(model)
    config = TrainConfig(out_dir=str(tmp_path), max_steps=1, schedule="cosine", peak_lr=1e-2, warmup_steps=1,
                         optimizer="adamw", weight_decay=0.1, log_every=1, progress_bar=False, tensorboard=False)
    Trainer(model, loss_fn, ListBatchSource(batches, shuffle=False), config).train()
    exempt = {"embed.weight", "hidden.bias", "out.bias"}
    named = dict(reference.named_parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for n, p in named.items() if n not in exempt], "weight_decay": 0.1},
         {"params": [p for n, p in named.items() if n in exempt], "weight_decay": 0.0}],
        lr=config.build_schedule()(1), betas=config.betas, eps=config.eps)
    loss_sum, count, _ = loss_fn(reference, batches[0])
    (loss_sum / count).backward()
    optimizer.step()
    for (name, a), b in zip(model.named_parameters(), reference.parameters()):
        # The gradients differ by rounding (the trainer scales after backward), but a first
        # Adam step is lr * g / (|g| + eps), nearly blind to that: a few ulps of the parameter.
        torch.testing.assert_close(a, b, rtol=0, atol=4 * torch.finfo(torch.float32).eps * float(b.detach().abs().max()),
                                   msg=name)
