"""--lora R on the training verbs (issue 37 section 2, the wiring; training/lora.py is tested in
tests/training/test_lora.py): a tiny `train lm --init DIR --lora 4` run trains only the adapters,
saves a plain merged model every verb opens, keeps the adapters apart with --lora-keep, resumes;
its checkpoints open merged (attnlab.load, --init, attnlab average); a ViT with new classes trains
its new head beside the adapters; bad inputs are one line, exit 2, nothing written."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attnlab.cli.main import main

pytestmark = pytest.mark.usefixtures("single_thread")

RUN = ["--context", "16", "--batch-size", "4", "--val-every", "2", "--val-batches", "2", "--save-every", "2",
       "--no-progress", "--device", "cpu"]
TEXT = "the quick brown fox jumps over the lazy dog.\n"
OTHER = "a lazy dog. the brown fox jumps.\n"


def _tree(directory):
    return sorted((str(p.relative_to(directory)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in directory.rglob("*")) if directory.exists() else None


def _is_lora(name):
    return name.endswith((".lora_A", ".lora_B"))


def _merged_reference(tensors, scale):
    """W + scale * B A in float64, the adapters dropped: the slow obvious merge."""
    out = {}
    for name, tensor in tensors.items():
        if _is_lora(name):
            continue
        prefix = name[: -len(".weight")] if name.endswith(".weight") else None
        if prefix is not None and prefix + ".lora_A" in tensors:
            a, b = tensors[prefix + ".lora_A"].double(), tensors[prefix + ".lora_B"].double()
            out[name] = tensor.double() + scale * sum(torch.outer(b[:, k], a[k]) for k in range(a.shape[0]))
        else:
            out[name] = tensor.double()
    return out


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    (root / "a.txt").write_text(TEXT * 30, encoding="utf-8")
    (root / "b.txt").write_text(OTHER * 30, encoding="utf-8")
    assert main(["train", "lm", "--text", str(root / "a.txt"), "--preset", "lm_tiny", "--max-steps", "4",
                 "--warmup", "1", "--out", str(root / "run"), *RUN]) == 0
    return root / "run" / "model"


@pytest.fixture(scope="module")
def lora_run(start):
    """A LoRA fine-tuning run of the start on another text: r=4, --lora-keep, 4 updates."""
    out = start.parent.parent / "lora"
    assert main(["train", "lm", "--text", str(start.parent.parent / "b.txt"), "--init", str(start), "--lora", "4",
                 "--lora-keep", "--lr", "3e-2", "--max-steps", "4", "--out", str(out), *RUN]) == 0
    return out


def test_only_the_adapters_train_and_the_saved_model_is_plain_and_merged(start, lora_run, capsys):
    import attnlab

    base = load_file(start / "model.safetensors")
    checkpoint = load_file(lora_run / "checkpoints" / "step_00000004" / "model.safetensors")
    adapters = [name for name in checkpoint if _is_lora(name)]
    assert len(adapters) == 2 * 2 * 2  # lm_tiny: 2 layers x (qkv, out) x (A, B)
    for name, tensor in base.items():  # every base weight unmoved, bit for bit
        assert torch.equal(checkpoint[name], tensor), name
    assert all(checkpoint[name].abs().max() > 0 for name in adapters if name.endswith("lora_B"))  # B left zero

    saved = load_file(lora_run / "model" / "model.safetensors")
    assert saved.keys() == base.keys()  # plain: the base names only
    record = json.loads((lora_run / "lora_run.json").read_text())
    assert record["rank"] == 4 and record["alpha"] == 8.0 and record["targets"] == ["attention"]
    reference = _merged_reference(checkpoint, record["alpha"] / record["rank"])
    for name, tensor in saved.items():
        torch.testing.assert_close(tensor.double(), reference[name], atol=1e-6, rtol=1e-6)
    assert any(not torch.equal(saved[name], base[name]) for name in base)  # the merge changed the weights
    assert sorted(p.name for p in (lora_run / "model").iterdir()) == sorted(
        ["char_tokenizer.json", "config.json", "lm.json", "model.safetensors", "start.json"])

    # every verb opens it: attnlab.load, generate, evaluate
    pipeline = attnlab.load(lora_run / "model")
    assert pipeline.model.num_parameters() == attnlab.load(start).model.num_parameters()
    capsys.readouterr()
    assert main(["generate", "--model", str(lora_run / "model"), "--prompt", "the ", "--max-new-tokens", "3"]) == 0
    assert main(["evaluate", "--model", str(lora_run / "model")]) == 0
    assert main(["export", "--model", str(lora_run / "model"), "--format", "hf", "-o", str(lora_run.parent / "hf")]) == 0


def test_the_run_says_the_trainable_count_and_scores_before_and_after(start, tmp_path, capsys):
    out = tmp_path / "ft"
    capsys.readouterr()
    assert main(["train", "lm", "--text", str(start.parent.parent / "b.txt"), "--init", str(start), "--lora", "2",
                 "--lora-targets", "attention,ffn", "--lora-alpha", "3", "--max-steps", "2", "--out", str(out),
                 *RUN]) == 0
    err = capsys.readouterr().err
    # lm_tiny: d_model 32, d_ff 64, 2 layers; r=2: qkv 2(32+96), out 2(32+32), ffn 2(32+64) twice
    per_layer = 2 * (32 + 96) + 2 * (32 + 32) + 2 * 2 * (32 + 64)
    assert f"LoRA r=2 alpha=3 on 4 attention projections and 4 feed-forward linears: {2 * per_layer:,} trainable" \
        in err
    assert "held-out before fine-tuning:" in err and "held-out: " in err and "LoRA: adapters merged" in err
    first = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] == 0 and first["start_valid_nll"] > 0
    assert not (out / "lora").exists()  # no --lora-keep


def test_kept_adapters_load_onto_the_base_model_and_give_the_merged_output(start, lora_run):
    from attnlab.models.registry import load_model
    from attnlab.training.lora import has_lora, load_lora

    assert sorted(p.name for p in (lora_run / "lora").iterdir()) == ["lora.json", "lora.safetensors"]
    unmerged = load_model(start).double()
    report = load_lora(unmerged, lora_run / "lora")
    assert has_lora(unmerged) and report.config.rank == 4
    merged = load_model(lora_run / "model").double()
    ids = torch.tensor([[3, 5, 7, 1, 2, 9, 4, 4]])
    with torch.no_grad():
        expected, got = unmerged(ids), merged(ids)
    # the saved weights are float32: the difference is their rounding, far below the adapters' effect
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        base = load_model(start).double()(ids)
    assert (base - expected).abs().max() > 1e-3


def test_a_checkpoint_of_a_lora_run_opens_merged_everywhere(start, lora_run, tmp_path, capsys):
    import attnlab

    checkpoints = sorted((lora_run / "checkpoints").iterdir())
    record = json.loads((checkpoints[-1] / "lora_run.json").read_text())
    scale = record["alpha"] / record["rank"]
    opened = attnlab.load(checkpoints[-1]).model.state_dict()
    reference = _merged_reference(load_file(checkpoints[-1] / "model.safetensors"), scale)
    for name, tensor in reference.items():
        torch.testing.assert_close(opened[name].double(), tensor, atol=1e-6, rtol=1e-6)
    # attnlab average merges each checkpoint, then averages (B A is not linear in A and B)
    out = tmp_path / "avg"
    assert main(["average", *map(str, checkpoints[-2:]), "-o", str(out)]) == 0
    averaged = load_file(out / "model.safetensors")
    assert not any(_is_lora(name) for name in averaged) and not (out / "lora_run.json").exists()
    first = _merged_reference(load_file(checkpoints[-2] / "model.safetensors"), scale)
    for name, tensor in averaged.items():
        torch.testing.assert_close(tensor.double(), (first[name] + reference[name]) / 2, atol=1e-6, rtol=1e-6)
    # --init from a checkpoint of a LoRA run starts from its merged weights
    capsys.readouterr()
    assert main(["train", "lm", "--text", str(start.parent.parent / "b.txt"), "--init", str(checkpoints[-1]),
                 "--max-steps", "1", "--out", str(tmp_path / "again"), *RUN]) == 0


def test_a_lora_run_resumes_and_refuses_other_lora_flags(start, tmp_path, capsys):
    text = str(start.parent.parent / "b.txt")
    out = tmp_path / "ft"
    command = ["train", "lm", "--text", text, "--init", str(start), "--lr", "3e-2", "--out", str(out), *RUN]
    assert main([*command, "--lora", "4", "--max-steps", "2"]) == 0
    assert main([*command, "--lora", "4", "--max-steps", "4", "--resume"]) == 0
    base = load_file(start / "model.safetensors")
    checkpoint = load_file(out / "checkpoints" / "step_00000004" / "model.safetensors")
    assert all(torch.equal(checkpoint[name], tensor) for name, tensor in base.items())  # still frozen
    assert load_file(out / "model" / "model.safetensors").keys() == base.keys()
    capsys.readouterr()
    was = _tree(out)
    for extra, named in [(["--lora", "8"], "--lora 8"), (["--lora", "4", "--lora-alpha", "4"], "--lora-alpha 4"),
                         (["--lora", "4", "--lora-targets", "attention,ffn"], "attention,ffn"),
                         ([], "no --lora")]:
        assert main([*command, *extra, "--max-steps", "6", "--resume"]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "--resume" in err and "was trained with --lora 4 --lora-alpha 8" in err and named in err, err
        assert _tree(out) == was
    # and a fine-tuning run without LoRA is not resumed as one
    plain = tmp_path / "plain"
    command = ["train", "lm", "--text", text, "--init", str(start), "--out", str(plain), *RUN]
    assert main([*command, "--max-steps", "2"]) == 0
    was = _tree(plain)
    assert main([*command, "--max-steps", "4", "--lora", "4", "--resume"]) == 2
    assert "was trained with no --lora" in capsys.readouterr().err and _tree(plain) == was


def test_bad_lora_inputs_are_one_line_exit_2_and_write_nothing(start, tmp_path, capsys):
    text = str(start.parent.parent / "b.txt")
    cases = [
        ([text, "--lora", "4"], "--lora 4 needs --init"),
        ([text, "--init", str(start), "--lora", "0"], "--lora"),
        ([text, "--init", str(start), "--lora", "33"], "--lora 33 is larger than"),  # d_model 32
        ([text, "--init", str(start), "--lora", "4", "--lora-targets", "mlp"], "--lora-targets"),
        ([text, "--init", str(start), "--lora-alpha", "4"], "--lora-alpha needs --lora"),
        ([text, "--init", str(start), "--lora", "4", "--lora-dropout", "1"], "--lora-dropout"),
    ]
    for extra, named in cases:
        out = tmp_path / "o"
        capsys.readouterr()
        try:
            status = main(["train", "lm", "--text", *extra, "--max-steps", "2", "--out", str(out), *RUN])
        except SystemExit as exit:  # the parser's refusals (argparse: usage, then the one error line)
            status = exit.code
        assert status == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert named in err[-1] and "Traceback" not in "\n".join(err), (extra, err)
        assert not out.exists()
    # --lora-keep never writes over a directory OUT/lora it did not write
    out = tmp_path / "taken"
    (out / "lora").mkdir(parents=True)
    (out / "lora" / "notes.txt").write_text("mine")
    was = _tree(out)
    assert main(["train", "lm", "--text", text, "--init", str(start), "--lora", "2", "--lora-keep", "--max-steps",
                 "2", "--out", str(out), *RUN]) == 2
    assert "--lora-keep" in capsys.readouterr().err.strip().splitlines()[-1] and _tree(out) == was


def _images(root, names):
    from PIL import Image

    rng = np.random.default_rng(0)
    for label, name in enumerate(names):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(16):
            pixels = rng.integers(0, 60, (8, 8))
            pixels[:, 3 * label:3 * label + 3] += 180
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i}.png")
    return root


def test_a_vit_with_new_classes_trains_its_new_head_beside_the_adapters(tmp_path, capsys):
    tiny = ["--set", "num_layers=2", "--set", "d_model=16", "--set", "num_heads=2", "--set", "d_ff=32"]
    run = ["--batch-size", "8", "--val-every", "2", "--save-every", "2", "--no-progress", "--device", "cpu"]
    assert main(["train", "vit", "--data", str(_images(tmp_path / "two", ("a", "b"))), "--max-steps", "2",
                 "--out", str(tmp_path / "start"), *tiny, *run]) == 0
    start = tmp_path / "start" / "model"
    out = tmp_path / "ft"
    capsys.readouterr()
    assert main(["train", "vit", "--data", str(_images(tmp_path / "three", ("a", "b", "c"))), "--init", str(start),
                 "--lora", "2", "--lr", "1e-2", "--max-steps", "4", "--out", str(out), *run]) == 0
    err = capsys.readouterr().err
    assert "(and head in full)" in err and "num_classes 2 -> 3 (a new head)" in err
    assert json.loads((out / "lora_run.json").read_text())["trainable"] == ["head"]
    base = load_file(start / "model.safetensors")
    early, late = (load_file(out / "checkpoints" / f"step_0000000{n}" / "model.safetensors") for n in (2, 4))
    assert late["head.weight"].shape == (3, 16) and not torch.equal(early["head.weight"], late["head.weight"])
    for name, tensor in base.items():  # the rest frozen (the old head is not in the new model)
        if not name.startswith("head."):
            assert torch.equal(late[name], tensor), name
    saved = load_file(out / "model" / "model.safetensors")
    assert torch.equal(saved["head.weight"], late["head.weight"]) and not any(_is_lora(n) for n in saved)
    import attnlab

    assert attnlab.load(out / "model").classify(np.zeros((8, 8, 1), np.uint8), top=1)[0][0] in ("a", "b", "c")


def test_a_translation_lora_run_averages_its_checkpoints_merged(tmp_path, capsys):
    """train translation saves the average of its last checkpoints: with LoRA each is merged
    first (averaging A and B apart would be another model), cross-attention's adapters included."""
    def pairs(name, words, count):
        src, tgt = tmp_path / f"{name}.de", tmp_path / f"{name}.en"
        src.write_text("".join(f"ein {w} {i}\n" for i in range(count) for w in words[0]), encoding="utf-8")
        tgt.write_text("".join(f"a {w} {i}\n" for i in range(count) for w in words[1]), encoding="utf-8")
        return [str(src), str(tgt)]

    run = ["--preset", "transformer_tiny", "--max-tokens", "256", "--max-length", "32", "--warmup", "1",
           "--val-every", "2", "--save-every", "2", "--no-progress", "--threads", "1"]
    first, second = pairs("a", (["hund", "katze"], ["dog", "cat"]), 30), pairs("b", (["haus"], ["house"]), 40)
    valid = pairs("v", (["haus"], ["house"]), 5)
    valid = ["--valid-src", valid[0], "--valid-tgt", valid[1]]
    assert main(["train", "translation", "--train-src", first[0], "--train-tgt", first[1], *valid, "--vocab-size",
                 "60", "--max-steps", "2", "--out", str(tmp_path / "start"), *run]) == 0
    start, out = tmp_path / "start" / "model", tmp_path / "ft"
    capsys.readouterr()
    assert main(["train", "translation", "--train-src", second[0], "--train-tgt", second[1], *valid, "--init",
                 str(start), "--lora", "2", "--lora-targets", "attention,ffn", "--lr-scale", "2", "--max-steps", "4",
                 "--average-last", "2", "--max-unknown", "100", "--out", str(out), *run]) == 0
    assert "(average of 2 checkpoints)" in capsys.readouterr().err
    base = load_file(start / "model.safetensors")
    record = json.loads((out / "lora_run.json").read_text())
    merged = []
    for step in (2, 4):
        tensors = load_file(out / "checkpoints" / f"step_0000000{step}" / "model.safetensors")
        assert all(torch.equal(tensors[name], tensor) for name, tensor in base.items())  # base frozen
        assert any("cross" in name for name in tensors if _is_lora(name)), sorted(tensors)[:5]
        merged.append(_merged_reference(tensors, record["alpha"] / record["rank"]))
    saved = load_file(out / "model" / "model.safetensors")
    assert saved.keys() == base.keys() and not (out / "model" / "lora_run.json").exists()
    for name, tensor in saved.items():
        torch.testing.assert_close(tensor.double(), (merged[0][name] + merged[1][name]) / 2, atol=1e-6, rtol=1e-6)
    assert any(not torch.equal(saved[name], base[name]) for name in base)
    import attnlab

    assert isinstance(attnlab.load(out / "model").translate("ein haus 3"), str)


def test_merge_low_rank_equals_merge_lora_in_float64_and_refuses_broken_pairs():
    import attnlab
    from attnlab.linear import merge_low_rank
    from attnlab.training.lora import LoraConfig, apply_lora, merge_lora

    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny").double()
    apply_lora(model, LoraConfig(rank=3, alpha=5.0, targets=("attention", "ffn")))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("lora_B"):
                parameter.normal_()
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    merged = merge_low_rank(state, 5.0 / 3)
    reference = _merged_reference(state, 5.0 / 3)
    expected = merge_lora(model).state_dict()
    assert merged.keys() == expected.keys() == reference.keys()
    for name in merged:
        torch.testing.assert_close(merged[name], expected[name], atol=1e-12, rtol=0)
        torch.testing.assert_close(merged[name], reference[name], atol=1e-12, rtol=0)
    broken = dict(state)
    name = next(n for n in state if n.endswith("lora_B"))
    del broken[name]
    with pytest.raises(ValueError, match="no matching lora_B"):
        merge_low_rank(broken, 1.0, source="f.safetensors")


def test_a_checkpoint_with_adapters_and_a_bad_or_missing_record_is_refused_naming_the_file(lora_run, tmp_path):
    import shutil

    from attnlab.models.registry import load_model

    checkpoint = tmp_path / "ckpt"
    shutil.copytree(sorted((lora_run / "checkpoints").iterdir())[-1], checkpoint)
    (checkpoint / "lora_run.json").write_text(json.dumps({"format": "attnlab-lora", "rank": 0, "alpha": 8}))
    with pytest.raises(ValueError, match="lora_run.json: not an attnlab LoRA record"):
        load_model(checkpoint)
    (checkpoint / "lora_run.json").unlink()
    with pytest.raises(ValueError, match="holds LoRA adapters .*lora_run.json is missing"):
        load_model(checkpoint)
