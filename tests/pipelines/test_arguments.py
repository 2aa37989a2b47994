"""Every pipeline call checks its arguments as the CLI's flags are checked (issue 39, point 12):
a NaN temperature, an empty text, an empty primer or a huge beam is one ValueError (or a
TypeError for a wrong type) naming the argument, before any work; never torch's
"probability tensor contains either inf, nan", a silent vector or a silent generation."""

import numpy as np
import pytest

import attnlab

NAN, INF = float("nan"), float("inf")
IMAGE = np.zeros((28, 28), dtype=np.uint8)
SCENE = np.zeros((32, 32, 3), dtype=np.uint8)

# (fixture, call, exception, message)
CASES = [
    # language model: the case, then every sampling argument as `attnlab generate` bounds it
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, temperature=NAN), ValueError, "temperature=nan"),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, temperature=INF), ValueError, "temperature=inf"),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, temperature=1000.0), ValueError,
     "at most 100"),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, temperature=True), ValueError, "temperature=True"),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, top_p=NAN), ValueError, "top_p=nan"),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, top_p=1.5), ValueError, "top_p=1.5"),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, top_p=0.0), ValueError, "top_p=0.0"),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, top_k=0), ValueError, "top_k=0"),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, seed=-1), ValueError, "seed=-1"),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, seed=2**64), ValueError, "seed="),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=2**40), ValueError, "max_new_tokens="),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, greedy="yes"), TypeError, "greedy="),
    ("lm_char_dir", lambda p: p.generate("", max_new_tokens=5), ValueError, "prompt: an empty string"),
    ("lm_char_dir", lambda p: p.generate([], max_new_tokens=5), ValueError, "prompt: an empty list"),
    ("lm_char_dir", lambda p: p.generate("to be", max_new_tokens=5, stop=[""]), ValueError, "stop: an empty string"),
    # BERT: an empty text has nothing to embed
    ("bert_dir", lambda p: p.embed(""), ValueError, "texts: an empty string"),
    ("bert_dir", lambda p: p.embed("   "), ValueError, "texts: only white space"),
    ("bert_dir", lambda p: p.embed(["a man", ""]), ValueError, r"texts\[1\]: an empty string"),
    ("bert_dir", lambda p: p.embed([]), ValueError, "texts: an empty list"),
    ("bert_dir", lambda p: p.attention(""), ValueError, "text: an empty string"),
    ("hf_bert_dir", lambda p: p.embed(""), ValueError, "texts: an empty string"),
    # music: an empty primer list is not "start from nothing" (that is None)
    ("music_dir", lambda p: p.continue_music([], steps=4), ValueError, "primer: an empty list"),
    ("music_dir", lambda p: p.continue_music(None, steps=4, temperature=NAN), ValueError, "temperature=nan"),
    ("music_dir", lambda p: p.continue_music(None, steps=4, top_p=2.0), ValueError, "top_p=2.0"),
    ("music_dir", lambda p: p.continue_music(None, steps=4, top_k=0), ValueError, "top_k=0"),
    ("music_dir", lambda p: p.continue_music(None, steps=4, seed=-5), ValueError, "seed=-5"),
    ("music_dir", lambda p: p.prompt("jsb-valid:abc"), ValueError, "jsb-valid:N with N a chorale number"),
    # translation: beam as --beam (1..64), alpha and lengths finite and >= 0
    ("translation_dir", lambda p: p.translate("ein hund", beam=0), ValueError, "beam=0"),
    ("translation_dir", lambda p: p.translate("ein hund", beam=1_000_000_000), ValueError, "beam=1000000000"),
    ("translation_dir", lambda p: p.translate("ein hund", beam=2.0), TypeError, "beam=2.0"),
    ("translation_dir", lambda p: p.translate("ein hund", alpha=NAN), ValueError, "alpha=nan"),
    ("translation_dir", lambda p: p.translate("ein hund", max_len_a=INF), ValueError, "max_len_a=inf"),
    ("translation_dir", lambda p: p.translate("ein hund", max_len_b=-1), ValueError, "max_len_b=-1"),
    ("translation_dir", lambda p: p.translate("ein hund", batch_size=0), ValueError, "batch_size=0"),
    # images
    ("vit_dir", lambda p: p.classify(IMAGE, top=0), ValueError, "top=0"),
    ("captioner_dir", lambda p: p.caption(SCENE, beam=65), ValueError, "beam=65"),
    ("captioner_dir", lambda p: p.caption(SCENE, alpha=NAN), ValueError, "alpha=nan"),
    ("captioner_dir", lambda p: p.caption(SCENE, compile=True), ValueError, "compile=True must be False, 'aot'"),
    ("captioner_dir", lambda p: p.attention(SCENE, caption=""), ValueError, "caption: an empty string"),
    ("image_dir", lambda p: p.sample(1, seed=-1), ValueError, "seed=-1"),
    ("image_dir", lambda p: p.sample(1, seed=2**63), ValueError, "seed="),
    ("image_dir", lambda p: p.sample(5000), ValueError, "n=5000"),
    ("text_to_image_dir", lambda p: p.imagine("a red circle", seed=2**64), ValueError, "seed="),
    ("text_to_image_dir", lambda p: p.imagine(["a red circle"] * 3, n=2000), ValueError, "6,000 images"),
]


@pytest.mark.parametrize("fixture, call, error, message", CASES,
                         ids=[f"{case[0]}-{index}" for index, case in enumerate(CASES)])
def test_bad_arguments_are_refused_naming_them(fixture, call, error, message, request):
    pipeline = attnlab.load(request.getfixturevalue(fixture))
    with pytest.raises(error, match=message):
        call(pipeline)


def test_the_good_arguments_still_run(lm_char_dir, music_dir, bert_dir):
    """The bounds are the CLI's: their edges are accepted."""
    lm = attnlab.load(lm_char_dir)
    assert isinstance(lm.generate("to be", max_new_tokens=2, temperature=100.0, top_p=1.0, top_k=1, seed=2**63 - 1),
                      str)
    assert len(attnlab.load(music_dir).continue_music([1, 2], steps=2, seed=0).primer) >= 2
    assert attnlab.load(bert_dir).embed("a man").shape == (attnlab.load(bert_dir).model.config.d_model,)


def test_to_checks_the_device_as_load_does(lm_char_dir):
    import torch

    pipeline = attnlab.load(lm_char_dir)
    with pytest.raises(ValueError, match="device='gpu': not a torch device"):
        pipeline.to("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            pipeline.to("cuda")
    assert pipeline.to("cpu") is pipeline


def test_the_translator_takes_a_list_not_a_string(translation_dir):
    """Translator.translate("Ein Hund") translated it character by character."""
    from attnlab.translation import Translator

    translator = Translator.load(translation_dir)
    with pytest.raises(TypeError, match="sentences: a list of strings"):
        translator.translate("ein hund")
    with pytest.raises(TypeError, match=r"sentences\[1\]"):
        translator.translate(["ein hund", 3])


@pytest.mark.parametrize("sentence, message", [("", "sentence 2 is empty"), ("  ", "sentence 2 is only white space")])
def test_the_embed_verb_refuses_an_empty_sentence_as_embed_does(hf_bert_dir, capsys, sentence, message):
    from attnlab.cli.main import main

    assert main(["embed", "--model", str(hf_bert_dir), "a man", sentence]) == 2
    assert message in capsys.readouterr().err
