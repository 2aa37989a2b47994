"""The optimizer factory: Adam as the paper, AdamW with decay only on weight matrices."""

import copy
import json

import pytest
import torch
from torch import nn

from attnlab.training import checkpoint as ckpt
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
                               lr=0.05, betas=(0.9, 0.95), eps=1e-8, fused=True)  # the kernel build_optimizer picks
    for net, optimizer in ((model, ours), (reference, theirs)):
        for _ in range(2):
            net(tokens).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    for (name, a), b in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(a, b), name


def _steps(model, optimizer, count, seed):
    """``count`` updates of ``model`` on fixed random tokens (the same for every call with ``seed``)."""
    tokens = torch.randint(0, 7, (3, 5), generator=torch.Generator().manual_seed(seed))
    for _ in range(count):
        model(tokens).sin().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def _assert_close64(model, reference):
    for (name, a), b in zip(model.named_parameters(), reference.parameters()):
        # float64 rounding of a few updates of size lr: far below 1e-12
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("name, decay", [("adam", 0.0), ("adamw", 0.3)])
def test_fused_kernel_on_the_cpu_equals_the_per_parameter_loop_in_float64(name, decay):
    torch.manual_seed(0)
    model = _Net().double()
    reference = copy.deepcopy(model)
    fused = build_optimizer(model, name, lr=0.05, betas=(0.9, 0.95), eps=1e-8, weight_decay=decay)
    loop = build_optimizer(reference, name, lr=0.05, betas=(0.9, 0.95), eps=1e-8, weight_decay=decay, fused=False)
    assert all(group["fused"] for group in fused.param_groups)  # the default on the CPU
    assert not any(group["fused"] for group in loop.param_groups)
    _steps(model, fused, 4, seed=1)
    _steps(reference, loop, 4, seed=1)
    _assert_close64(model, reference)


def test_parameters_without_a_fused_kernel_keep_the_loop():
    model = nn.Linear(3, 3)
    assert build_optimizer(model, lr=1e-3).param_groups[0]["fused"]
    model.weight = nn.Parameter(torch.randn(3, 3, dtype=torch.complex64))  # torch fuses real types only
    assert not build_optimizer(model, lr=1e-3).param_groups[0]["fused"]


@pytest.mark.parametrize("saved_fused", [False, True])
def test_a_checkpoint_of_either_kernel_resumes_with_this_runs_kernel(saved_fused):
    """A checkpoint written by the per-parameter loop (every checkpoint of a CPU run before the
    fused kernel) resumes with the fused one, and the other way round; the continued run equals
    the uninterrupted one up to float64 rounding. The state goes through the checkpoint's
    JSON + tensors encoding."""
    torch.manual_seed(0)
    straight = _Net().double()
    writer = copy.deepcopy(straight)
    _steps(straight, build_optimizer(straight, "adamw", lr=0.05, weight_decay=0.1), 5, seed=2)

    first = build_optimizer(writer, "adamw", lr=0.05, weight_decay=0.1, fused=saved_fused)
    _steps(writer, first, 2, seed=2)
    encoded, tensors = ckpt.encode_state({"optimizer": first.state_dict()})
    saved = ckpt.decode_state(json.loads(json.dumps(encoded)), tensors)["optimizer"]
    assert [group["fused"] for group in saved["param_groups"]] == [saved_fused or None] * 2

    resumed = copy.deepcopy(writer)
    second = build_optimizer(resumed, "adamw", lr=0.05, weight_decay=0.1, fused=not saved_fused)
    second.load_state_dict(saved)
    assert [group["fused"] for group in second.param_groups] == [(not saved_fused) or None] * 2
    assert [group["weight_decay"] for group in second.param_groups] == [0.1, 0.0]
    _steps(resumed, second, 3, seed=2)
    _assert_close64(resumed, straight)


def test_a_checkpoint_with_other_groups_is_still_refused():
    model = _Net()
    adam = build_optimizer(model, "adam", lr=1e-3)  # one group
    adamw = build_optimizer(model, "adamw", lr=1e-3, weight_decay=0.1)  # two
    with pytest.raises(ValueError, match="different number of parameter groups"):
        adamw.load_state_dict(adam.state_dict())


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
