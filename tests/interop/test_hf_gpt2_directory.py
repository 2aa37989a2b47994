"""A HuggingFace GPT-2 directory (config.json, model.safetensors, vocab.json, merges.txt)
loads into attnlab: the same logits as GPT2LMHeadModel, the same token ids as
GPT2TokenizerFast; `attnlab.load` and `attnlab generate` open it; what it refuses."""

from __future__ import annotations

import json
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEXT = ("ROMEO: But soft, what light through yonder window breaks? It is the east, and Juliet is the sun.\n"
        "JULIET: O Romeo, Romeo, wherefore art thou Romeo? Deny thy father and refuse thy name.\n") * 4


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gpt2") / "model"
    directory.mkdir()
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator([TEXT], vocab_size=300, min_frequency=1, show_progress=False)
    bpe.save_model(str(directory))  # vocab.json, merges.txt
    config = transformers.GPT2Config(vocab_size=bpe.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(str(directory), safe_serialization=True)
    return directory, model


def test_logits_and_tokens_equal_huggingface(gpt2_dir):
    from attnlab.interop.hf_gpt2 import is_hf_gpt2_directory, load_hf_gpt2

    directory, hf = gpt2_dir
    assert is_hf_gpt2_directory(directory)
    model, tokenizer = load_hf_gpt2(directory)
    reference = transformers.GPT2TokenizerFast.from_pretrained(str(directory))  # reads vocab.json + merges.txt
    text = "But soft, what light? Romeo is the sun."
    ids = tokenizer.encode(text)
    assert ids == reference(text)["input_ids"] and tokenizer.decode(ids) == text
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits
        got = model(torch.tensor([ids]))
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_attnlab_load_and_generate_open_it(gpt2_dir, capsys):
    import attnlab
    from attnlab.cli.main import main

    directory, hf = gpt2_dir
    lm = attnlab.load(directory)
    assert lm.family == "decoder_lm"
    prompt = "ROMEO: But"
    ids = lm.tokenizer.encode(prompt)
    with torch.no_grad():
        expected = hf.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=0,
                               eos_token_id=None)[0, len(ids):].tolist()
    continuation = lm.generate(prompt, max_new_tokens=8, greedy=True)
    assert continuation == lm.tokenizer.decode(expected)
    assert main(["generate", "--model", str(directory), "--prompt", prompt, "--max-new-tokens", "8", "--greedy"]) == 0
    assert continuation in capsys.readouterr().out


def test_what_it_refuses_is_named(gpt2_dir, tmp_path):
    from attnlab.interop.hf_gpt2 import load_hf_gpt2

    directory, _ = gpt2_dir
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for name in ("config.json", "vocab.json", "merges.txt"):
        (pickled / name).write_bytes((directory / name).read_bytes())
    (pickled / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(ValueError, match="pytorch_model.bin is a pickle, which attnlab never loads"):
        load_hf_gpt2(pickled)
    huge = tmp_path / "huge"
    huge.mkdir()
    for name in ("model.safetensors", "vocab.json", "merges.txt"):
        (huge / name).write_bytes((directory / name).read_bytes())
    values = json.loads((directory / "config.json").read_text())
    (huge / "config.json").write_text(json.dumps({**values, "n_layer": 10**7}))
    with pytest.raises(ValueError, match="config.json.*exceeds the cap"):
        load_hf_gpt2(huge)
    with pytest.raises(ValueError, match="not a HuggingFace GPT-2 directory"):
        load_hf_gpt2(tmp_path)
    # Within the caps but not the weights' size: refused on the meta device before the model
    # (16M x 4,096 floats, 262 GB here) is allocated.
    (huge / "config.json").write_text(json.dumps({**values, "vocab_size": 16_000_000, "n_embd": 4096}))
    with pytest.raises(ValueError, match="weights do not fit the config|has shape"):
        load_hf_gpt2(huge)


def test_the_explorer_and_export_onnx_open_it(gpt2_dir, tmp_path, capsys):
    from attnlab.cli.main import main
    from attnlab.viz.explorer import explorer_html

    directory, _ = gpt2_dir
    assert "decoder-only LM: 2 layers x 4 heads" in explorer_html(directory, "ROMEO: But soft")
    pytest.importorskip("onnx")
    out = tmp_path / "gpt2.onnx"
    assert main(["export-onnx", "--model", str(directory), "-o", str(out)]) in (0,)
    printed = capsys.readouterr().out
    assert out.is_file() and "inputs ids" in printed


# -- the directory is checked as attnlab's own are (issue 39) -----------------------------------
def _copy(directory, tmp_path, name="copy"):
    import shutil

    target = tmp_path / name
    shutil.copytree(directory, target)
    return target


@pytest.mark.parametrize("kind, message", [("int", "has dtype int64; weights must be floating point"),
                                           ("nan", "holds NaN or infinity"), ("inf", "holds NaN or infinity")])
def test_integer_or_non_finite_weights_are_refused_everywhere(gpt2_dir, tmp_path, capsys, kind, message):
    """Integer tensors or a NaN in model.safetensors loaded and generated garbage (exit 0);
    now every entry point refuses them, naming the file and the tensor as the file names it."""
    import attnlab
    from attnlab.cli.main import main
    from attnlab.interop.hf_gpt2 import load_hf_gpt2
    from reference.damaged import damage_weights

    directory = _copy(gpt2_dir[0], tmp_path)
    name = damage_weights(directory, kind)
    pattern = rf"model\.safetensors: tensor '{name}' {message}"
    with pytest.raises(ValueError, match=pattern):
        load_hf_gpt2(directory)
    with pytest.raises(ValueError, match=pattern):
        attnlab.load(directory)
    assert main(["generate", "--model", str(directory), "--prompt", "ROMEO", "--max-new-tokens", "3"]) == 2
    captured = capsys.readouterr()
    assert name in captured.err and "Traceback" not in captured.err and captured.out == ""


@pytest.mark.parametrize("field, value, message", [
    ("vocab_size", float("nan"), "vocab_size=nan is not an integer"),
    ("n_head", "4", "n_head='4' is not an integer"),
    ("n_embd", "32", "n_embd='32' is not an integer"),
    ("n_layer", 5000, "n_layer=5000 exceeds the cap"),
    ("n_layer", 0, "n_layer=0 must be >= 1"),
    ("n_head", 5, "n_embd=32 is not divisible by n_head=5"),
    ("layer_norm_epsilon", -1.0, "layer_norm_epsilon=-1.0 must be positive"),
    ("resid_pdrop", 1.5, r"resid_pdrop=1.5 must be in \[0, 1\)"),
    ("bos_token_id", "0", "bos_token_id='0' is not an integer"),
    ("activation_function", ["gelu"], "unsupported activation_function"),
])
def test_config_errors_name_gpt2s_own_fields(gpt2_dir, tmp_path, field, value, message):
    """vocab_size NaN said "pad_id=0 is outside the vocabulary [0, nan)", n_head "4" a
    Python TypeError, and errors named attnlab's DecoderLMConfig.num_layers: now each names
    config.json and the field as the file spells it."""
    from attnlab.interop.hf_gpt2 import load_hf_gpt2

    directory = _copy(gpt2_dir[0], tmp_path)
    values = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**values, field: value}))
    with pytest.raises(ValueError) as error:
        load_hf_gpt2(directory)
    text = str(error.value)
    assert text.startswith(f"{directory / 'config.json'}: ") and re.search(message, text), text
    assert "DecoderLMConfig" not in text and "num_layers" not in text and "num_heads" not in text


def test_only_a_pickle_says_how_to_convert(gpt2_dir, tmp_path):
    from attnlab.interop.hf_gpt2 import load_hf_gpt2

    directory = _copy(gpt2_dir[0], tmp_path)
    (directory / "model.safetensors").unlink()
    (directory / "pytorch_model.bin").write_bytes(b"never read")
    with pytest.raises(ValueError, match=r"never loads.*Convert it once.*save_file"):
        load_hf_gpt2(directory)


def test_sharded_weights_are_named(gpt2_dir, tmp_path):
    from attnlab.interop.hf_gpt2 import load_hf_gpt2

    directory = _copy(gpt2_dir[0], tmp_path)
    (directory / "model.safetensors").rename(directory / "model-00001-of-00001.safetensors")
    (directory / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    with pytest.raises(ValueError, match=r"split into shards \(model\.safetensors\.index\.json\)"):
        load_hf_gpt2(directory)
