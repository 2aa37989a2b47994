"""BERT weights from HuggingFace give the same hidden states, pooled outputs, MLM logits and
attention weights; the real all-MiniLM-L6-v2 gives transformers' hidden states and the
reference mean-pooled sentence embeddings; bad model directories give clear errors."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnlab.interop import from_hf_bert, load_hf_bert  # noqa: E402
from attnlab.interop.hf_bert import config_from_hf_bert  # noqa: E402
from attnlab.models.bert import BertEncoder, mean_pool  # noqa: E402

CONFIGS = [
    dict(vocab_size=101, hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=80,
         max_position_embeddings=40, type_vocab_size=2, hidden_act="gelu"),
    dict(vocab_size=57, hidden_size=30, num_hidden_layers=2, num_attention_heads=5, intermediate_size=33,
         max_position_embeddings=23, type_vocab_size=3, hidden_act="relu", layer_norm_eps=1e-7, pad_token_id=3),
]


def _random_batch(vocab, types, pad_id, generator):
    ids = torch.randint(0, vocab, (3, 13), generator=generator)
    ids[ids == pad_id] = (pad_id + 1) % vocab
    mask = torch.ones(3, 13, dtype=torch.long)
    mask[1, 9:] = 0  # right padding in one row, none in the others
    mask[2, 4:] = 0
    ids[mask == 0] = pad_id
    token_types = torch.randint(0, types, (3, 13), generator=generator)
    return ids, mask, token_types


@pytest.mark.parametrize("values", CONFIGS)
def test_random_init_parity_float64(values):
    torch.manual_seed(0)
    hf = transformers.BertForMaskedLM(transformers.BertConfig(**values, attn_implementation="eager")).eval().double()
    # BertForMaskedLM has no pooler: check it separately on a BertModel with the same weights.
    hf_base = transformers.BertModel(hf.config, add_pooling_layer=True).eval().double()
    model = from_hf_bert(hf).double()
    assert model.config.mlm_head and not model.config.pooler
    ids, mask, types = _random_batch(values["vocab_size"], values["type_vocab_size"], values.get("pad_token_id", 0),
                                     torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True,
                      output_attentions=True)
        out = model(ids, attention_mask=mask, token_type_ids=types, need_weights=True)
        logits = model.mlm_logits(out.hidden)
    real = mask.bool()
    assert (out.hidden[real] - expected.hidden_states[-1][real]).abs().max() < 1e-10
    assert (logits[real] - expected.logits[real]).abs().max() < 1e-9
    for ours, theirs in zip(out.attentions, expected.attentions, strict=True):
        assert (ours - theirs).abs().max() < 1e-12
        assert (ours.sum(-1) - 1).abs().max() < 1e-12  # every row sums to one
        assert ours.masked_select(~real[:, None, None, :]).abs().max() == 0  # padding gets no attention

    with torch.no_grad():
        base = from_hf_bert(hf_base).double()
        theirs = hf_base(ids, attention_mask=mask, token_type_ids=types)
        ours = base(ids, attention_mask=mask, token_type_ids=types)
    assert base.config.pooler and not base.config.mlm_head
    assert (ours.pooled - theirs.pooler_output).abs().max() < 1e-10


def test_default_mask_is_pad_tokens_and_state_dict_path():
    torch.manual_seed(0)
    hf = transformers.BertModel(transformers.BertConfig(**CONFIGS[0])).eval()
    model = from_hf_bert(hf.state_dict(), config_from_hf_bert(hf.config))
    ids, mask, _ = _random_batch(101, 2, 0, torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).last_hidden_state
        got = model(ids).hidden  # attention_mask defaults to ids != pad_id
    assert (got - expected)[mask.bool()].abs().max() < 1e-4


def test_converter_errors():
    hf = transformers.BertModel(transformers.BertConfig(**CONFIGS[0]))
    state = hf.state_dict()
    with pytest.raises(ValueError, match="pass config="):
        from_hf_bert(state)
    broken = {k: v for k, v in state.items() if "layer.1.attention.self.key.weight" not in k}
    with pytest.raises(ValueError, match="layer.1.attention.self.key.weight"):
        from_hf_bert(broken, config_from_hf_bert(hf.config))
    with pytest.raises(ValueError, match="more than"):
        from_hf_bert(state, config_from_hf_bert(hf.config).replace(num_layers=2))
    with pytest.raises(ValueError, match="model_type"):
        config_from_hf_bert({"model_type": "gpt2"})


# -- the real pretrained all-MiniLM-L6-v2 -------------------------------------------------


SENTENCES = ["The animal didn't cross the street because it was too tired.",
             "A man is playing a guitar.", "Someone plays an instrument.", "Zürich's café"]


def test_minilm_matches_transformers(minilm_dir):
    model, tokenizer = load_hf_bert(minilm_dir)
    hf = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
    reference_tokenizer = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
    batch, tokens = tokenizer.encode(SENTENCES)
    expected_batch = reference_tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert torch.equal(batch["ids"], expected_batch["input_ids"])
    assert torch.equal(batch["attention_mask"], expected_batch["attention_mask"])
    assert tokens[0][:3] == ["[CLS]", "the", "animal"]
    with torch.no_grad():
        expected = hf(input_ids=batch["ids"], attention_mask=batch["attention_mask"],
                      token_type_ids=batch["token_type_ids"])
        out = model(batch["ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"])
    real = batch["attention_mask"].bool()
    assert (out.hidden[real] - expected.last_hidden_state[real]).abs().max() < 1e-4
    assert (out.pooled - expected.pooler_output).abs().max() < 1e-4

    # Reference mean pooling (sentence-transformers' Pooling + Normalize), written out in float64.
    hidden = expected.last_hidden_state.double()
    reference = []
    for row in range(len(SENTENCES)):
        n = int(real[row].sum())
        vector = hidden[row, :n].sum(0) / n
        reference.append(vector / vector.norm())
    reference = torch.stack(reference)
    ours = torch.nn.functional.normalize(mean_pool(out.hidden, batch["attention_mask"]), dim=-1)
    assert (ours.double() - reference).abs().max() < 1e-5
    # The pretrained model's sense of similarity: the two music sentences are closest.
    similarity = ours @ ours.T
    assert similarity[1, 2] > similarity[0, 1] and similarity[1, 2] > similarity[0, 2]


# -- bad directories ------------------------------------------------------------------------
def _tiny_dir(tmp_path):
    torch.manual_seed(0)
    hf = transformers.BertModel(transformers.BertConfig(**CONFIGS[0]))
    directory = tmp_path / "bert"
    hf.save_pretrained(directory)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(90)]
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n")
    return directory


def test_tiny_directory_round_trip(tmp_path):
    directory = _tiny_dir(tmp_path)
    model, tokenizer = load_hf_bert(directory)
    assert isinstance(model, BertEncoder) and model.config.num_layers == 3
    batch, tokens = tokenizer.encode(["w1 w2 zzz", "w3"])
    assert tokens[0] == ["[CLS]", "w1", "w2", "[UNK]", "[SEP]"]
    assert batch["attention_mask"].tolist() == [[1] * 5, [1, 1, 1, 0, 0]]


@pytest.mark.parametrize("damage, message", [
    ("no_dir", "not a directory"),
    ("no_config", r"config\.json: no such file"),
    ("no_weights", r"model\.safetensors: no such file"),
    ("no_vocab", r"vocab\.txt: no such file"),
    ("bad_json", r"config\.json: not valid JSON"),
    ("gpt2_config", "is not a BERT model"),
    ("truncated_weights", "not a readable safetensors"),
    ("wrong_size", "shape"),
    ("vocab_without_cls", r"vocab\.txt: .*(cls_token|\[CLS\])"),
])
def test_bad_directories(tmp_path, damage, message):
    directory = _tiny_dir(tmp_path)
    config = directory / "config.json"
    if damage == "no_dir":
        directory = tmp_path / "missing"
    elif damage == "no_config":
        config.unlink()
    elif damage == "no_weights":
        (directory / "model.safetensors").unlink()
    elif damage == "no_vocab":
        (directory / "vocab.txt").unlink()
    elif damage == "bad_json":
        config.write_text("{not json")
    elif damage == "gpt2_config":
        config.write_text(json.dumps({**json.loads(config.read_text()), "model_type": "gpt2"}))
    elif damage == "truncated_weights":
        weights = directory / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    elif damage == "wrong_size":
        config.write_text(json.dumps({**json.loads(config.read_text()), "hidden_size": 64}))
    elif damage == "vocab_without_cls":
        (directory / "vocab.txt").write_text("[PAD]\n[UNK]\n[SEP]\nw1\n")
    before = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else None
    with pytest.raises(ValueError, match=message):
        load_hf_bert(directory)
    if before is not None:
        assert sorted(p.name for p in directory.iterdir()) == before  # nothing written or removed


# -- the directory is checked as attnlab's own are (issue 39) -----------------------------------
@pytest.mark.parametrize("kind, message", [("int", "has dtype int64; weights must be floating point"),
                                           ("nan", "holds NaN or infinity")])
def test_integer_or_non_finite_weights_are_refused(tmp_path, capsys, kind, message):
    """embed returned NaNs (and integer weights loaded silently); now refused by every entry point."""
    import attnlab
    from attnlab.cli.main import main
    from reference.damaged import damage_weights

    directory = _tiny_dir(tmp_path)
    name = damage_weights(directory, kind)
    pattern = rf"model\.safetensors: tensor '{name}' {message}"
    with pytest.raises(ValueError, match=pattern):
        load_hf_bert(directory)
    with pytest.raises(ValueError, match=pattern):
        attnlab.load(directory)
    assert main(["embed", "--model", str(directory), "w1 w2"]) == 2
    err = capsys.readouterr().err
    assert name in err and "Traceback" not in err


def test_an_unused_integer_buffer_is_not_a_weight(tmp_path):
    """Older BERT files carry embeddings.position_ids (int64), which no converter reads: still loads."""
    from safetensors.torch import load_file, save_file

    directory = _tiny_dir(tmp_path)
    tensors = load_file(str(directory / "model.safetensors"))
    tensors["embeddings.position_ids"] = torch.arange(40).unsqueeze(0)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    model, _ = load_hf_bert(directory)
    assert model.config.num_layers == 3


def test_only_a_pickle_is_refused_saying_how_to_convert(tmp_path, capsys):
    """A BERT directory with only pytorch_model.bin said "model.safetensors: no such file"."""
    from attnlab.cli.main import main

    directory = _tiny_dir(tmp_path)
    (directory / "model.safetensors").unlink()
    (directory / "pytorch_model.bin").write_bytes(b"never read")
    with pytest.raises(ValueError, match=r"pytorch_model\.bin is a pickle, which attnlab never loads.*Convert it once"):
        load_hf_bert(directory)
    assert main(["embed", "--model", str(directory), "w1"]) == 2
    assert "never loads" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["tokenizer_config.json", "config.json"])
def test_deeply_nested_json_is_one_line_naming_the_file(tmp_path, capsys, name):
    """A tokenizer_config.json nested 100k deep raised RecursionError from attnlab.load."""
    import attnlab
    from attnlab.cli.main import main
    from reference.damaged import nested_json

    directory = _tiny_dir(tmp_path)
    (directory / name).write_text(nested_json())
    with pytest.raises(ValueError, match=rf"{name}: .*nested too deeply"):
        attnlab.load(directory)
    assert main(["embed", "--model", str(directory), "w1"]) == 2
    err = capsys.readouterr().err
    assert name in err and "Traceback" not in err


@pytest.mark.parametrize("values, message", [
    ({"do_lower_case": "false"}, r"tokenizer_config\.json: do_lower_case='false' is not true or false"),
])
def test_tokenizer_config_values_are_checked(tmp_path, values, message):
    directory = _tiny_dir(tmp_path)
    (directory / "tokenizer_config.json").write_text(json.dumps(values))
    with pytest.raises(ValueError, match=message):
        load_hf_bert(directory)


@pytest.mark.parametrize("field, value, message", [
    ("hidden_size", "48", "hidden_size='48' is not an integer"),
    ("num_hidden_layers", 5000, "num_hidden_layers=5000 exceeds the cap"),
    ("vocab_size", float("nan"), "vocab_size=nan is not an integer"),
    ("hidden_act", ["gelu"], "unsupported hidden_act"),
    ("is_decoder", "false", "is_decoder='false' is not true or false"),
])
def test_config_errors_name_berts_own_fields(tmp_path, field, value, message):
    directory = _tiny_dir(tmp_path)
    config = directory / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), field: value}))
    with pytest.raises(ValueError, match=message) as error:
        load_hf_bert(directory)
    assert str(error.value).startswith(str(config)) and "BertConfig" not in str(error.value)
