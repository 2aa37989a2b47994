"""LoRA (attnlab.training.lora): merged == unmerged in float64 on every kind of model, the
zero-initialised adapter is the base model exactly, only adapters train, parity with peft on
HuggingFace GPT-2, decoding an unmerged model, training through the Trainer (loss falls,
checkpoint + resume bit-identical), adapters saved apart, and the bad inputs."""

from __future__ import annotations

import argparse
import copy
import json

import pytest
import torch

import attnlab
from attnlab.cli.options import add_lora_arguments, lora_config_from_args
from attnlab.generation import aot, beam_search, generate
from attnlab.linear import Linear, derived_key
from attnlab.training import ListBatchSource, TrainConfig, Trainer
from attnlab.training.losses import lm_loss
from attnlab.training.lora import (LoraConfig, LoraLinear, apply_lora, has_lora, load_lora, lora_state_dict,
                                   merge_lora, save_lora)


def _lm(seed=0):
    torch.manual_seed(seed)
    return attnlab.create_model("lm_tiny")


def _inputs(kind):
    generator = torch.Generator().manual_seed(5)
    if kind == "lm_tiny":
        return (torch.randint(0, 64, (2, 9), generator=generator),)
    if kind == "transformer_tiny":
        return torch.randint(4, 64, (2, 7), generator=generator), torch.randint(4, 64, (2, 6), generator=generator)
    if kind == "bert_tiny":
        return (torch.randint(5, 100, (2, 8), generator=generator),)
    return (torch.rand(2, 1, 28, 28, generator=generator, dtype=torch.float64),)  # vit_tiny_patch7_28


def _output(model, inputs):
    if hasattr(model, "forward_features"):  # a ViT's head starts at zero: compare the features
        return model.forward_features(*inputs)
    out = model(*inputs)
    return out.hidden if isinstance(out, tuple) else out


def _randomise_adapters(model, seed=1):
    """B is zero after apply_lora; give every adapter values so that it changes the output."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoraLinear):
                module.lora_B.copy_(torch.randn(module.lora_B.shape, generator=generator, dtype=module.lora_B.dtype))


def _reference_linear(module, x):
    """The obviously-correct float64 formula: x (W + scale·B·A)^T + b."""
    weight = module.weight.double() + module.scale * module.lora_B.double() @ module.lora_A.double()
    out = x.double() @ weight.T
    return out if module.bias is None else out + module.bias.double()


@pytest.mark.parametrize("preset", ["lm_tiny", "transformer_tiny", "vit_tiny_patch7_28", "bert_tiny"])
def test_merged_forward_equals_the_unmerged_forward_in_float64(preset):
    torch.manual_seed(0)
    model = attnlab.create_model(preset).double().eval()
    names = list(model.state_dict())
    inputs = _inputs(preset)
    base = _output(model, inputs)
    report = apply_lora(model, LoraConfig(rank=4, alpha=6.0, targets=("attention", "ffn")))
    assert report.attention_layers > 0 and report.ffn_layers > 0
    assert torch.equal(_output(model, inputs), base)  # B = 0: exactly the base model
    _randomise_adapters(model)
    unmerged = _output(model, inputs)
    assert (unmerged - base).abs().max() > 1e-2  # the adapters do something
    merged_model = merge_lora(model)
    assert not has_lora(merged_model)
    assert list(merged_model.state_dict()) == names  # the original names, nothing more
    assert all(type(m) is not LoraLinear for m in merged_model.modules())
    torch.testing.assert_close(_output(merged_model, inputs), unmerged, rtol=1e-12, atol=1e-12)


def test_an_adapted_layer_is_the_low_rank_formula_and_its_row_slices_too():
    torch.manual_seed(0)
    base = Linear(12, 30).double()
    layer = LoraLinear(base, rank=3, alpha=5.0)
    torch.nn.init.normal_(layer.lora_B)
    x = torch.randn(4, 5, 12, dtype=torch.float64)
    torch.testing.assert_close(layer(x), _reference_linear(layer, x), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(layer.forward_rows(x, 10, 30), _reference_linear(layer, x)[..., 10:30],
                               rtol=1e-13, atol=1e-13)
    weight, bias = layer.merged_weights()
    torch.testing.assert_close(torch.nn.functional.linear(x, weight, bias), _reference_linear(layer, x),
                               rtol=1e-13, atol=1e-13)


def test_lora_dropout_applies_in_training_only():
    torch.manual_seed(0)
    layer = LoraLinear(Linear(16, 16).double(), rank=2, alpha=2.0, dropout=0.5)
    torch.nn.init.normal_(layer.lora_B)
    x = torch.randn(3, 16, dtype=torch.float64)
    layer.eval()
    torch.testing.assert_close(layer(x), _reference_linear(layer, x), rtol=1e-13, atol=1e-13)
    layer.train()
    assert not torch.allclose(layer(x), _reference_linear(layer, x))


def test_only_the_adapters_and_the_named_parameters_get_gradients():
    torch.manual_seed(0)
    model = attnlab.create_model("vit_tiny_patch7_28")
    report = apply_lora(model, LoraConfig(rank=2), trainable=("head",))
    images = torch.rand(3, 1, 28, 28)
    model(images).logsumexp(-1).sum().backward()
    with_grad = {name for name, p in model.named_parameters() if p.grad is not None}
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert with_grad == trainable
    assert trainable == {n for n in trainable if n.endswith((".lora_A", ".lora_B")) or n.startswith("head.")}
    assert {"head.weight", "head.bias"} <= trainable
    # 4 layers x (qkv (96 -> 288) + out (96 -> 96)) at r = 2, and the 96 x 10 head
    expected = 4 * 2 * ((96 + 288) + (96 + 96)) + 96 * 10 + 10
    assert report.trainable == expected == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert report.layers == 8 and report.ffn_layers == 0
    assert report.describe().startswith("LoRA r=2 alpha=4 on 8 attention projections (and head in full): "
                                        f"{expected:,} trainable of ")
    merge_lora(model)
    assert all(p.requires_grad for p in model.parameters())  # as it was before apply_lora


def test_parity_with_peft_on_hugging_face_gpt2():
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from attnlab.interop import from_hf_gpt2

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=97, n_positions=40, n_embd=48, n_layer=3, n_head=4)
    hf = transformers.GPT2LMHeadModel(config).double().eval()
    ours = from_hf_gpt2(hf).double().eval()
    # peft's names: attn.c_attn (joint qkv) and attn.c_proj = attention; mlp.c_fc, mlp.c_proj = ffn
    peft_config = peft.LoraConfig(r=4, lora_alpha=12, lora_dropout=0.0, fan_in_fan_out=True,
                                  target_modules=r".*\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)")
    adapted = peft.get_peft_model(hf, peft_config).eval()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:  # peft zero-initialises B too; give it values
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    apply_lora(ours, LoraConfig(rank=4, alpha=12.0, targets=("attention", "ffn")))
    names = {"attn.c_attn": "self_attn.qkv_proj", "attn.c_proj": "self_attn.out_proj",
             "mlp.c_fc": "ffn.linear1", "mlp.c_proj": "ffn.linear2"}
    ours_parameters = dict(ours.named_parameters())
    copied = 0
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if ".lora_" not in name:
                continue
            layer = int(name.split(".h.")[1].split(".")[0])
            hf_module = next(key for key in names if f".{key}." in name)
            which = "lora_A" if ".lora_A." in name else "lora_B"
            target = ours_parameters[f"decoder.stack.layers.{layer}.{names[hf_module]}.{which}"]
            assert target.shape == parameter.shape
            target.copy_(parameter)
            copied += 1
    assert copied == 3 * 4 * 2
    ids = torch.randint(0, 97, (2, 11), generator=generator)
    with torch.no_grad():
        expected = adapted(ids).logits
        unmerged = ours(ids)
        torch.testing.assert_close(unmerged, expected, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(merge_lora(ours)(ids), adapted.merge_and_unload()(ids).logits,
                                   rtol=1e-10, atol=1e-10)


def test_an_unmerged_model_decodes_as_the_merged_one():
    torch.manual_seed(0)
    lm = attnlab.create_model("lm_tiny").double().eval()
    generate(lm, [[1, 2, 3]], max_new_tokens=3, greedy=True)  # step plans made before the adapters
    apply_lora(lm, LoraConfig(rank=4, alpha=32.0, targets=("attention", "ffn")))
    _randomise_adapters(lm)
    prompts = [[1, 2, 3], [7, 8]]
    unmerged = generate(lm, prompts, max_new_tokens=12, greedy=True)
    # the cached greedy tokens are the argmax of the unmerged model's full forward
    for prompt, tokens in zip(prompts, unmerged):
        sequence = list(prompt)
        for token in tokens:
            with torch.no_grad():
                assert token == int(lm(torch.tensor([sequence]))[0, -1].argmax())
            sequence.append(token)
    assert unmerged == generate(merge_lora(lm), prompts, max_new_tokens=12, greedy=True)

    torch.manual_seed(0)
    translation = attnlab.create_model("transformer_tiny").double().eval()
    apply_lora(translation, LoraConfig(rank=4, alpha=32.0))  # self- and cross-attention
    _randomise_adapters(translation)
    source = torch.randint(4, 64, (2, 7), generator=torch.Generator().manual_seed(2))
    cached = beam_search(translation, source, beam_size=3, max_len_b=10)
    uncached = beam_search(translation, source, beam_size=3, max_len_b=10, use_cache=False)
    merged = beam_search(merge_lora(translation), source, beam_size=3, max_len_b=10)
    for a, b, c in zip(cached, uncached, merged):
        assert a[0].tokens == b[0].tokens == c[0].tokens


def test_a_decode_steps_merged_weight_is_one_tensor_whose_key_moves_at_every_new_value():
    """merged_weights() is kept per layer while W, A, B and scale are unchanged (no merge per new decode
    cache), and written again in place after any change: the same storage, its version moved, so its
    derived_key (which an ahead-of-time package's weights snapshot holds) never comes back, and the
    step decodes with the new values."""
    lm = _lm().eval()
    apply_lora(lm, LoraConfig(rank=4, alpha=8.0, targets=("attention", "ffn")))
    _randomise_adapters(lm)
    layer = lm.decoder.stack.layers[1].ffn.linear1
    lm.new_cache(1, 16)
    merged = lm.decoder.stack.layers[1]._step_plan[6][0]  # the FFN's first weight, as the step multiplies it
    keys, snapshots = [derived_key(merged)], [aot.weights_snapshot(lm)]
    lm.new_cache(1, 16)
    assert layer.merged_weights()[0] is merged and derived_key(merged) == keys[0]
    assert aot.weights_snapshot(lm) == snapshots[0]

    def scale():
        for module in lm.modules():
            if isinstance(module, LoraLinear):
                module.scale *= -1.5

    def adapter_in_place():
        with torch.no_grad():
            layer.lora_B.mul_(0.5)

    def optimizer_step():  # torch.optim's step: counted (linear.OPTIMIZER_WRITES), not by version counters
        layer.lora_A.grad = torch.ones_like(layer.lora_A)
        torch.optim.SGD([layer.lora_A], lr=0.1).step()
        layer.lora_A.grad = None

    for change in (scale, adapter_in_place, optimizer_step, scale):
        change()
        lm.new_cache(1, 16)
        assert layer.merged_weights()[0] is merged  # written again in place
        assert derived_key(merged) not in keys and aot.weights_snapshot(lm) not in snapshots
        keys.append(derived_key(merged))
        snapshots.append(aot.weights_snapshot(lm))
        reference = layer.weight.double() + layer.scale * layer.lora_B.double() @ layer.lora_A.double()
        torch.testing.assert_close(merged.double(), reference, rtol=1e-5, atol=1e-5)
    prompts = [[1, 2, 3], [7, 8]]
    assert generate(lm, prompts, max_new_tokens=10, greedy=True) == \
        generate(merge_lora(copy.deepcopy(lm)), prompts, max_new_tokens=10, greedy=True)


def _pattern_batches(count, seed):
    """Windows of a fixed repeating token pattern: a base model has not seen it, an adapter learns it."""
    generator = torch.Generator().manual_seed(seed)
    pattern = torch.tensor([5, 9, 2, 33, 17, 40, 11, 28])
    batches = []
    for _ in range(count):
        starts = torch.randint(0, len(pattern), (4,), generator=generator)
        ids = torch.stack([pattern.roll(-int(s)).repeat(3)[:17] for s in starts])
        batches.append({"ids": ids})
    return batches


def _lora_run(out_dir, max_steps, *, resume=False, model_seed=0):
    model = _lm(seed=model_seed)
    apply_lora(model, LoraConfig(rank=4, targets=("attention", "ffn"), dropout=0.1),
               trainable=("decoder.stack.final_norm",))  # dropout: the resumed random stream matters
    # noam: the schedule does not depend on max_steps, so 3 + 3 updates are the 6 of one run
    config = TrainConfig(out_dir=str(out_dir), max_steps=max_steps, d_model=32, lr_scale=2.0, warmup_steps=2,
                         optimizer="adamw", weight_decay=0.01, log_every=1, checkpoint_every=3, keep_last=5,
                         clip_grad_norm=1.0, progress_bar=False, tensorboard=False, tune_malloc=False)
    trainer = Trainer(model, lm_loss, ListBatchSource(_pattern_batches(12, seed=0), shuffle=True, seed=0), config,
                      model_config=model.config.to_dict())
    trainer.train(resume=resume)
    return model, trainer


def test_a_lora_model_trains_through_the_trainer_and_resumes_bit_identically(tmp_path):
    frozen_before = {name: p.detach().clone() for name, p in _lm().named_parameters()}
    straight, trainer = _lora_run(tmp_path / "straight", 6)
    trainable = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert trainable == {id(p) for p in straight.parameters() if p.requires_grad}
    for name, parameter in straight.named_parameters():  # frozen weights did not move
        if not parameter.requires_grad:
            assert torch.equal(parameter, frozen_before[name]), name
    checkpoint = trainer.checkpoint_root / "step_00000006"
    assert checkpoint.is_dir()
    _lora_run(tmp_path / "split", 3)
    resumed, resumed_trainer = _lora_run(tmp_path / "split", 6, resume=True, model_seed=123)
    assert resumed_trainer.step == 6
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name  # the frozen base too: from the checkpoint, not seed 123
    records = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lora_fine_tuning_lowers_the_loss(tmp_path, seed):
    model = _lm(seed=seed)
    with torch.no_grad():  # the base: an output embedding wider than lm_tiny's initial 0.02 (as after training),
        model.decoder.embed.weight.mul_(5)  # so that frozen, tied to the head, it can express a peaked prediction
    held_out = _pattern_batches(4, seed=100 + seed)

    def held_out_loss():
        model.eval()
        with torch.no_grad():
            total = sum(float(lm_loss(model, batch)[0]) for batch in held_out)
        model.train()
        return total / sum(batch["ids"][:, 1:].numel() for batch in held_out)

    before = held_out_loss()
    apply_lora(model, LoraConfig(rank=4, targets=("attention", "ffn")))
    config = TrainConfig(out_dir=str(tmp_path), max_steps=40, schedule="cosine", peak_lr=2e-2, warmup_steps=4,
                         optimizer="adamw", log_every=10, progress_bar=False, tensorboard=False, tune_malloc=False)
    Trainer(model, lm_loss, ListBatchSource(_pattern_batches(16, seed=seed), shuffle=True, seed=seed), config,
            model_config=model.config.to_dict()).train()
    after = held_out_loss()
    merge_lora(model)
    assert abs(held_out_loss() - after) < 1e-4
    # ln 64 = 4.16 nats is the uniform guess; 40 updates of the adapters alone reach ~1.8 (seeds 0-2)
    assert before > 4.0 and after < 2.6, (before, after)


def test_adapters_saved_apart_load_onto_the_base_model(tmp_path):
    base_state = {k: v.clone() for k, v in _lm().state_dict().items()}
    model = _lm()
    apply_lora(model, LoraConfig(rank=3, alpha=5.0, targets=("ffn",)), trainable=("decoder.stack.final_norm",))
    _randomise_adapters(model)
    with torch.no_grad():
        model.decoder.stack.final_norm.weight.add_(0.5)
    ids = _inputs("lm_tiny")[0]
    expected = model(ids)
    save_lora(model, tmp_path / "lora")
    saved = json.loads((tmp_path / "lora" / "lora.json").read_text())
    assert saved["rank"] == 3 and saved["alpha"] == 5.0 and saved["targets"] == ["ffn"]
    assert set(lora_state_dict(model)) == {n for n in model.state_dict() if "lora_" in n} | {
        "decoder.stack.final_norm.weight", "decoder.stack.final_norm.bias"}
    fresh = _lm()
    fresh.load_state_dict(base_state)
    report = load_lora(fresh, tmp_path / "lora")
    assert report.ffn_layers == 4
    torch.testing.assert_close(fresh(ids), expected, rtol=0, atol=0)
    # a base model of another shape: refused, naming the file, and left as it was
    torch.manual_seed(0)
    other = attnlab.create_model("lm_tiny", d_ff=32)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(ValueError, match=r"lora\.safetensors: does not fit this model"):
        load_lora(other, tmp_path / "lora")
    assert not has_lora(other) and all(torch.equal(v, before[k]) for k, v in other.state_dict().items())
    (tmp_path / "lora" / "lora.json").write_text('{"format": "attnlab-lora", "rank": 0}')
    with pytest.raises(ValueError, match=r"lora\.json: --lora: the rank must be"):
        load_lora(_lm(), tmp_path / "lora")
    with pytest.raises(ValueError, match="no such file"):
        load_lora(_lm(), tmp_path / "missing")


def test_bad_inputs_name_the_flag():
    with pytest.raises(ValueError, match="--lora: the rank must be .* at least 1, got 0"):
        LoraConfig(rank=0)
    with pytest.raises(ValueError, match="--lora-alpha must be a positive number"):
        LoraConfig(rank=2, alpha=0.0)
    with pytest.raises(ValueError, match="--lora-targets: unknown target 'mlp'"):
        LoraConfig(rank=2, targets=("attention", "mlp"))
    with pytest.raises(ValueError, match="--lora-dropout"):
        LoraConfig(rank=2, dropout=1.0)
    model = _lm()  # d_model 32: qkv (32 -> 96), out (32 -> 32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"--lora 33 is larger than decoder\.stack\.layers\.0\.self_attn\.qkv_proj's "
                                         r"smaller side \(min\(in, out\) = 32\)"):
        apply_lora(model, LoraConfig(rank=33))
    with pytest.raises(ValueError, match="trainable: 'nohead' names no parameter"):
        apply_lora(model, LoraConfig(rank=2), trainable=("nohead",))
    assert not has_lora(model) and list(model.state_dict()) == list(before)
    assert all(p.requires_grad for p in model.parameters())
    apply_lora(model, LoraConfig(rank=32))  # the largest rank that fits
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        apply_lora(model, LoraConfig(rank=2))
    with pytest.raises(ValueError, match="unmerged LoRA adapters"):
        model.quantize("int8")


def _parse(*argv):
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_lora_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_command_line_options():
    assert lora_config_from_args(_parse()) is None
    config = lora_config_from_args(_parse("--lora", "8"))
    assert (config.rank, config.lora_alpha, config.scale, config.targets) == (8, 16.0, 2.0, ("attention",))
    config = lora_config_from_args(_parse("--lora", "4", "--lora-alpha", "4", "--lora-targets", "attention,ffn",
                                          "--lora-dropout", "0.1"))
    assert (config.rank, config.lora_alpha, config.targets, config.dropout) == (4, 4.0, ("attention", "ffn"), 0.1)
    with pytest.raises(ValueError, match="--lora-targets: unknown target 'attn'"):
        lora_config_from_args(_parse("--lora", "4", "--lora-targets", "attn"))
    with pytest.raises(ValueError, match="--lora-alpha needs --lora R"):
        lora_config_from_args(_parse("--lora-alpha", "3"))
    with pytest.raises(ValueError, match="--lora-keep needs --lora R"):
        lora_config_from_args(_parse("--lora-keep"))
    with pytest.raises(ValueError, match="--lora-dropout must be in"):
        lora_config_from_args(_parse("--lora", "2", "--lora-dropout", "1"))
    for argv in (["--lora", "0"], ["--lora", "2", "--lora-alpha", "0"], ["--lora", "2", "--lora-alpha", "-1"]):
        with pytest.raises(argparse.ArgumentError, match="--lora"):
            _parse(*argv)
