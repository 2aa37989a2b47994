"""ViT, captioner, text-to-image and Image Transformer pipelines equal their verbs' routes."""

import numpy as np
import pytest
import torch
from PIL import Image

import attnlab
from attnlab.cli.main import main

from conftest import VIT_CLASSES


def _stdout(argv, capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def _digit(seed: int, size: int = 28) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(size, size), dtype=np.uint8)


# -- ViT ------------------------------------------------------------------------------------
def test_classify_equals_predict_and_attnlab_classify(vit_dir, tmp_path, capsys):
    from attnlab.families.vit.task import predict

    vit = attnlab.load(vit_dir)
    assert vit.classes == VIT_CLASSES
    images = [_digit(0), _digit(1)]
    ranked = vit.classify(images, top=3)
    probabilities = predict(vit.model, torch.stack([torch.from_numpy(i)[None] for i in images]))
    for row, result in zip(probabilities, ranked):
        order = row.argsort(descending=True).tolist()
        assert [name for name, _ in result] == [VIT_CLASSES[i] for i in order]
        assert [p for _, p in result] == pytest.approx(row[order].tolist(), abs=1e-6)
    assert ranked[0][0][1] > ranked[0][-1][1] + 0.01  # the classes are told apart (not the zero head's 1/3 each)
    paths = []
    for index, image in enumerate(images):
        paths.append(tmp_path / f"digit{index}.png")
        Image.fromarray(image).save(paths[-1])
    lines = _stdout(["classify", "--model", str(vit_dir), *map(str, paths), "--top-k", "2", "--device", "cpu"],
                    capsys).splitlines()
    for line, path, result in zip(lines, paths, vit.classify(paths, top=2)):
        shown = ", ".join(f"{name} {100 * p:.1f}%" for name, p in result)
        assert line == f"{path}: {shown}"


def test_a_0_1_float_image_and_its_uint8_version_give_the_same_classes(vit_dir):
    vit = attnlab.load(vit_dir)
    image = _digit(2)
    as_uint8 = vit.classify(image, top=3)
    as_float = vit.classify(image.astype(np.float32) / 255, top=3)
    assert [name for name, _ in as_float] == [name for name, _ in as_uint8]
    assert [p for _, p in as_float] == pytest.approx([p for _, p in as_uint8], abs=1e-6)
    assert vit.classify(torch.from_numpy(image).double() / 255, top=1)[0][0] == as_uint8[0][0]
    with pytest.raises(ValueError, match=r"images: float pixels must be in \[0, 1\].*0\.\.255 values"):
        vit.classify(image.astype(np.float32))  # 0..255 floats: refused, not classified wrongly


def test_classify_checks_images_against_the_model(vit_dir, tmp_path):
    vit = attnlab.load(vit_dir)
    with pytest.raises(ValueError, match="3 channels.*takes 1"):
        vit.classify(np.zeros((28, 28, 3), np.uint8))
    with pytest.raises(ValueError, match=r"images\[1\].*20x20 .*takes 28x28"):
        vit.classify([_digit(0), _digit(0, size=20)])  # arrays are not resized behind the user's back
    big = Image.fromarray(_digit(3, size=56)).convert("RGB")
    big.save(tmp_path / "big.png")
    assert vit.classify(big) == vit.classify(tmp_path / "big.png")  # PIL images and files are, as the verb does
    with pytest.raises(ValueError, match="top=0"):
        vit.classify(_digit(0), top=0)


def test_vit_attention_is_the_encoders_over_class_token_and_patches(vit_dir):
    from attnlab.data.images import normalize

    vit = attnlab.load(vit_dir)
    groups = vit.attention(_digit(4))
    with torch.no_grad():
        _, weights = vit.model.encode(normalize(torch.from_numpy(_digit(4))[None, None]), need_weights=True)
    torch.testing.assert_close(groups["self"], torch.stack([w.self_attn[0] for w in weights]))
    config = vit.model.config
    tokens = config.num_prefix_tokens + config.grid[0] * config.grid[1]
    assert groups["self"].shape == (config.num_layers, config.num_heads, tokens, tokens)
    torch.testing.assert_close(groups["self"].sum(-1), torch.ones(config.num_layers, config.num_heads, tokens))
    with pytest.raises(ValueError, match="one image"):
        vit.attention([_digit(4), _digit(5)])


# -- captioner -----------------------------------------------------------------------------
def _scene(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(32, 32, 3), dtype=np.uint8)


def test_caption_equals_generate_captions_and_attnlab_caption(captioner_dir, tmp_path, capsys):
    from attnlab.families.caption.task import generate_captions, load_captioner

    captioner = attnlab.load(captioner_dir)
    images = [_scene(0), _scene(1)]
    model, tokenizer, _ = load_captioner(captioner_dir)
    expected = generate_captions(model, tokenizer, torch.stack([torch.from_numpy(i).permute(2, 0, 1) for i in images]),
                                 beam_size=2)
    assert captioner.caption(images, beam=2) == [c.text for c in expected]
    assert captioner.caption(images[1], beam=2) == expected[1].text
    path = tmp_path / "scene.png"
    Image.fromarray(images[0]).save(path)
    cli = _stdout(["caption", "--model", str(captioner_dir), str(path), "--beam", "2", "--device", "cpu"], capsys)
    assert cli == f"{path}\t{captioner.caption(path, beam=2)}\n"


def test_caption_compile_aot_without_a_compiler_warns_and_captions_eagerly(captioner_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    captioner = attnlab.load(captioner_dir)
    images = [_scene(0), _scene(1)]
    with pytest.warns(RuntimeWarning, match="no-such-c\\+\\+' is not found; decoding eagerly"):
        assert captioner.caption(images, beam=2, compile="aot") == captioner.caption(images, beam=2)


def test_caption_attention_matches_the_word_attention_route(captioner_dir):
    from attnlab.families.caption.task import generate_captions, word_attention

    captioner = attnlab.load(captioner_dir)
    image = torch.from_numpy(_scene(0)).permute(2, 0, 1)
    groups = captioner.attention(_scene(0), beam=2)
    assert sorted(groups) == ["cross", "decoder self", "image encoder self"]
    tokens = generate_captions(captioner.model, captioner.tokenizer, image[None], beam_size=2)[0].tokens
    expected = word_attention(captioner.model, image, tokens)  # last layer, mean over heads, on the grid
    torch.testing.assert_close(groups["cross"][-1].mean(0).view(expected.shape), expected)
    given = captioner.attention(_scene(0), "a red circle")
    assert given["cross"].shape[-2] == 1 + len(captioner.tokenizer.encode("a red circle"))


# -- text-to-image ---------------------------------------------------------------------------
def test_imagine_equals_the_task_route(text_to_image_dir):
    from attnlab.families.text_to_image.task import imagine, load_text_to_image

    pipeline = attnlab.load(text_to_image_dir)
    prompts = ["a red circle above a blue triangle", "a green square"]
    images = pipeline.imagine(prompts, n=2, temperature=0.9, top_k=8, seed=5)
    model, vqvae, tokenizer = load_text_to_image(text_to_image_dir)
    expected = imagine(model, vqvae, tokenizer, prompts, n=2, temperature=0.9, top_k=8, seed=5)
    assert images.dtype == np.uint8 and images.shape == (4, 32, 32, 3)
    assert np.array_equal(images, expected.permute(0, 2, 3, 1).numpy())
    one = imagine(model, vqvae, tokenizer, prompts[1:], n=2, temperature=0.9, top_k=8, seed=5)
    assert np.array_equal(pipeline.imagine(prompts[1], n=2, temperature=0.9, top_k=8, seed=5),
                          one.permute(0, 2, 3, 1).numpy())  # one string is one prompt
    with pytest.raises(ValueError, match="vocabulary does not know"):
        pipeline.imagine("a purple circle")


def test_text_to_image_attention_reads_the_prompt_and_the_images_codes(text_to_image_dir):
    from attnlab.data.images import normalize
    from attnlab.families.text_to_image.task import encode_prompt

    pipeline = attnlab.load(text_to_image_dir)
    image = pipeline.imagine("a red circle", n=1, seed=1)[0]
    groups = pipeline.attention("a red circle", image)
    codes = pipeline.vqvae.encode(normalize(torch.from_numpy(image).permute(2, 0, 1)[None]))
    text = torch.tensor([encode_prompt(pipeline.tokenizer, "a red circle", pipeline.model.config.text_length)])
    with torch.no_grad():
        _, weights = pipeline.model(text, codes, need_weights=True)
    torch.testing.assert_close(groups["self"], torch.stack([w.self_attn[0] for w in weights]))
    assert groups["self"].shape[-1] == pipeline.model.config.text_length + pipeline.model.config.image_tokens - 1


# -- Image Transformer ----------------------------------------------------------------------
def test_sample_equals_sample_images(image_dir):
    from attnlab.generation.images import sample_images

    pipeline = attnlab.load(image_dir)
    images = pipeline.sample(3, temperature=0.8, top_k=20, seed=4)
    expected = sample_images(pipeline.model, 3, temperature=0.8, top_k=20,
                             generator=torch.Generator().manual_seed(4))
    assert images.dtype == np.uint8 and images.shape == (3, 4, 4, 1)
    assert np.array_equal(images, expected.permute(0, 2, 3, 1).numpy())
    with pytest.raises(ValueError, match="label: this model is not class-conditional"):
        pipeline.sample(1, label=0)
    with pytest.raises(ValueError, match="not a super-resolution model"):
        pipeline.super_resolve(np.zeros((2, 2), np.uint8))


def test_class_conditional_sampling_takes_names_or_indices(class_image_dir):
    from attnlab.generation.images import sample_images

    pipeline = attnlab.load(class_image_dir)
    assert pipeline.classes == ["dark", "light"]
    by_name = pipeline.sample(2, label="light", seed=1)
    assert np.array_equal(by_name, pipeline.sample(2, label=1, seed=1))
    expected = sample_images(pipeline.model, 2, labels=torch.tensor([1, 0]), generator=torch.Generator().manual_seed(1))
    assert np.array_equal(pipeline.sample(2, label=["light", "dark"], seed=1), expected.permute(0, 2, 3, 1).numpy())
    with pytest.raises(ValueError, match="class-conditional; give a class name"):
        pipeline.sample(1)
    with pytest.raises(ValueError, match="'grey': not one of the model's 2 class names"):
        pipeline.sample(1, label="grey")


def test_super_resolve_equals_attnlab_super_resolve(super_resolution_dir, tmp_path, capsys):
    from attnlab.generation.images import sample_images

    pipeline = attnlab.load(super_resolution_dir)
    low = np.array([[0, 200], [90, 255]], np.uint8)
    big = pipeline.super_resolve(low, seed=2)
    assert big.shape == (4, 4, 1)
    expected = sample_images(pipeline.model, 1, low_res=torch.from_numpy(low)[None, None],
                             generator=torch.Generator().manual_seed(2))
    assert np.array_equal(big, expected[0].permute(1, 2, 0).numpy())
    Image.fromarray(low).save(tmp_path / "low.png")
    _stdout(["super-resolve", "--model", str(super_resolution_dir), str(tmp_path / "low.png"), "--out",
             str(tmp_path / "big.png"), "--scale", "1", "--seed", "0", "--no-progress", "--device", "cpu"], capsys)
    assert np.array_equal(np.asarray(Image.open(tmp_path / "big.png")), pipeline.super_resolve(low)[:, :, 0])
    with pytest.raises(ValueError, match="4x4 .* takes 2x2"):
        pipeline.super_resolve(np.zeros((4, 4), np.uint8))  # the low-resolution size exactly, as the verb
    with pytest.raises(ValueError, match="super-resolution model: use super_resolve"):
        pipeline.sample(1)


def test_image_transformer_attention_is_the_models(super_resolution_dir, image_dir):
    from attnlab.families.image.task import downsample

    pipeline = attnlab.load(super_resolution_dir)
    image = np.arange(16, dtype=np.uint8).reshape(4, 4) * 16
    groups = pipeline.attention(image)
    pixels = torch.from_numpy(image)[None, None]
    with torch.no_grad():
        _, weights = pipeline.model(pixels, None, downsample(pixels, 2), need_weights=True)
    torch.testing.assert_close(groups["self"], torch.stack([w.self_attn[0] for w in weights]))
    torch.testing.assert_close(groups["cross"], torch.stack([w.cross_attn[0] for w in weights]))
    assert sorted(attnlab.load(image_dir).attention(image)) == ["self"]
    with pytest.raises(ValueError, match="low_res: this is not a super-resolution model"):
        attnlab.load(image_dir).attention(image, low_res=image[:2, :2])


@pytest.mark.parametrize("temperature", [-0.5, float("nan"), float("inf"), True, "1"])
def test_sampling_temperatures_are_checked(image_dir, text_to_image_dir, temperature):
    with pytest.raises(ValueError, match="temperature="):
        attnlab.load(image_dir).sample(1, temperature=temperature)
    with pytest.raises(ValueError, match="temperature="):
        attnlab.load(text_to_image_dir).imagine("a red circle", temperature=temperature)
    with pytest.raises(ValueError, match="temperature=0 must be a finite number > 0 and at most 100"):
        attnlab.load(text_to_image_dir).imagine("a red circle", temperature=0)
    assert attnlab.load(image_dir).sample(1, temperature=0).shape == (1, 4, 4, 1)  # 0: greedy
