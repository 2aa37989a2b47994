"""attnlab.load: one registry by family, bad directories, the shared pipeline surface."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.pipelines import Pipeline, known_pipelines

FAMILY_FIXTURES = {
    "translation_dir": "transformer", "lm_char_dir": "decoder_lm", "bert_dir": "bert", "hf_bert_dir": "bert",
    "vit_dir": "vit", "captioner_dir": "captioner", "text_to_image_dir": "text_to_image",
    "image_dir": "image_transformer", "music_dir": "music_transformer", "text_classifier_dir": "bert_classifier",
}


@pytest.mark.parametrize("fixture", sorted(FAMILY_FIXTURES))
def test_each_directory_loads_its_familys_pipeline(fixture, request):
    directory = request.getfixturevalue(fixture)
    pipeline = attnlab.load(directory)
    assert isinstance(pipeline, Pipeline) and pipeline.family == FAMILY_FIXTURES[fixture]
    assert pipeline.model.config.family == ("bert" if fixture == "hf_bert_dir" else pipeline.family)
    assert not pipeline.model.training
    assert pipeline.device == torch.device("cpu") and pipeline.to("cpu") is pipeline
    assert pipeline.directory == Path(directory)
    text = repr(pipeline)
    assert text.startswith(type(pipeline).__name__) and repr(pipeline.family) in text and "\n" not in text
    assert attnlab.load(str(directory)).family == pipeline.family  # str or Path


def test_every_model_family_with_a_verb_has_a_pipeline():
    assert known_pipelines() == ["bert", "bert_classifier", "captioner", "decoder_lm", "image_transformer",
                                 "music_transformer", "text_to_image", "transformer", "vit"]


def _one_line_error(directory, *fragments, kind=ValueError):
    with pytest.raises(kind) as error:
        attnlab.load(directory)
    message = str(error.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_bad_directories_are_named_with_the_known_families(tmp_path, text_to_image_dir):
    _one_line_error(tmp_path / "missing", str(tmp_path / "missing"), "no such model directory", "decoder_lm", "vit")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    _one_line_error(a_file, str(a_file), "a file, not a model directory", f"give the directory ({tmp_path})")
    empty = tmp_path / "empty"
    empty.mkdir()
    _one_line_error(empty, str(empty), "config.json", "image_transformer", "HuggingFace BERT")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"family": "mamba"}))
    _one_line_error(foreign, str(foreign), "'mamba'", "music_transformer")
    not_json = tmp_path / "not_json"
    not_json.mkdir()
    (not_json / "config.json").write_text("{")
    _one_line_error(not_json, str(not_json), "JSON", "captioner")
    # A model directory of a family without a pipeline (the text-to-image model's VQ-VAE).
    _one_line_error(text_to_image_dir / "vqvae", "'vqvae'", "no pipeline", "text_to_image")
    _one_line_error(None, "directory", kind=TypeError)


def test_a_directory_without_its_tokenizer_is_refused(tmp_path, lm_char_dir):
    bare = tmp_path / "bare"
    attnlab.load_model(lm_char_dir).save_pretrained(bare)  # the weights without char_tokenizer.json
    _one_line_error(bare, str(bare), "tokenizer")


def test_import_attnlab_stays_light_and_exports_load():
    code = ("import sys, attnlab; assert 'torch' not in sys.modules, 'import attnlab imported torch'; "
            "import attnlab.pipelines; assert attnlab.load is attnlab.pipelines.load; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_load_model_on_a_huggingface_bert_directory_points_to_attnlab_load(hf_bert_dir):
    with pytest.raises(ValueError, match=r"a HuggingFace BERT directory.*attnlab\.load\(directory\)"):
        attnlab.load_model(hf_bert_dir)
    assert attnlab.load(hf_bert_dir).family == "bert"


TOY_PIPELINE = """
import torch
from attnlab.pipelines import Pipeline


class ToyPipeline(Pipeline):
    family = "toy_family"

    @classmethod
    def load(cls, directory, *, device="cpu"):
        return cls(torch.nn.Linear(2, 2), directory)


def is_toy_directory(directory):
    return (directory / "toy.marker").is_file()
"""


def test_a_family_can_claim_directories_another_library_wrote(tmp_path, monkeypatch):
    from attnlab.families import Family, register_family, unregister_family

    (tmp_path / "toy_pipeline_module.py").write_text(TOY_PIPELINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    register_family(Family(name="toy_family", config_family="toy_family", title="toy",
                           pipeline="toy_pipeline_module:ToyPipeline",
                           recognise=("toy_pipeline_module:is_toy_directory",)))
    try:
        foreign = tmp_path / "foreign"
        foreign.mkdir()
        (foreign / "toy.marker").write_text("")
        pipeline = attnlab.load(foreign)
        assert type(pipeline).__name__ == "ToyPipeline" and pipeline.family == "toy_family"
        assert "toy_family" in known_pipelines()
        with pytest.raises(ValueError, match="'toy_family' pipeline does not show its attention yet.*decoder_lm"):
            pipeline.attention("anything")
    finally:
        unregister_family("toy_family")
    assert "toy_family" not in known_pipelines()


def test_a_bad_device_is_named(lm_char_dir):
    with pytest.raises(ValueError, match="device='gpu': not a torch device"):
        attnlab.load(lm_char_dir, device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda': no CUDA GPU"):
            attnlab.load(lm_char_dir, device="cuda")
    assert attnlab.load(lm_char_dir, device=torch.device("cpu")).device == torch.device("cpu")
