"""The explorer for the image and music families (issue 30): each family's source loads
from a saved model directory, shows exactly what ``attention_maps`` gives with labels that
mean something, draws image inputs over their grid, and ``attnlab explore --html`` and the
served API take each family's input (and refuse a bad one clearly)."""

import base64
import io
import json
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.cli.main import main
from attnlab.viz.explorer import attention_maps, load_source
from attnlab.viz.explorer.inputs import example_images
from attnlab.viz.explorer.payload import full_payload

REPO = Path(__file__).resolve().parents[2]
DIGIT = str(REPO / "examples" / "digits" / "7.png")
SCENE = str(REPO / "examples" / "scenes" / "scene-1.png")
MIDI = str(REPO / "examples" / "midi" / "phrase-g.mid")


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    yield


def _rows_sum_to_one(group):
    assert torch.allclose(group.weights.sum(-1), torch.ones(group.weights.shape[:-1]), atol=1e-5)


def _pixels(path, channels, size):
    from attnlab.data.images import read_image

    return read_image(path, image_size=size, channels=channels)[None]


def test_vit_shows_cls_and_patches_exactly(vit_dir):
    from attnlab.data.images import normalize

    source = load_source(vit_dir)
    analysis = source.analyse(DIGIT, files=True)
    (group,) = analysis.groups
    model = source.pipeline.model
    expected = attention_maps(model, images=normalize(_pixels(DIGIT, 1, 28)))["self"]
    assert torch.equal(group.weights, expected) and group.weights.shape == (4, 4, 17, 17)
    assert group.query_tokens[:3] == ["CLS", "patch (0,0)", "patch (0,1)"] and group.key_tokens[-1] == "patch (3,3)"
    assert group.key_cells[0] is None and group.key_cells[1:] == [(r, c) for r in range(4) for c in range(4)]
    assert group.query_cells == group.key_cells
    _rows_sum_to_one(group)
    assert analysis.output.split(" ")[0] in ("zero", "one", "two")
    assert analysis.image.pixels.shape == (1, 28, 28) and (analysis.image.rows, analysis.image.cols) == (4, 4)
    # the pipeline's attention() is the same source
    assert torch.equal(attnlab.load(vit_dir).attention(DIGIT)["self"], expected)


def test_captioner_shows_decoder_cross_and_encoder_over_the_grid(captioner_dir):
    from attnlab.families.caption.task import generate_captions
    from attnlab.data.images import normalize

    source = load_source(captioner_dir)
    analysis = source.analyse(SCENE, files=True)
    model, tokenizer = source.pipeline.model, source.pipeline.tokenizer
    pixels = _pixels(SCENE, 3, 32)
    tokens = generate_captions(model, tokenizer, pixels, beam_size=1)[0].tokens
    tgt_in = ([model.config.bos_id] + tokens)[:model.config.max_positions]
    expected = attention_maps(model, images=normalize(pixels), tgt_in_ids=torch.tensor([tgt_in]))
    groups = {g.name: g for g in analysis.groups}
    assert list(groups) == ["image encoder self", "decoder self", "cross"]
    for name, group in groups.items():
        assert torch.equal(group.weights, expected[name])
        _rows_sum_to_one(group)
    cross = groups["cross"]
    assert cross.weights.shape[-2:] == (len(tgt_in), 64) and cross.key_tokens[9] == "cell (1,1)"
    assert cross.key_cells[9] == (1, 1) and groups["decoder self"].key_cells is None
    assert groups["decoder self"].query_tokens[0] == tokenizer.pieces([model.config.bos_id])[0]
    assert cross.query_tokens == tokenizer.pieces((tokens + [model.config.eos_id])[:len(tgt_in)])
    assert analysis.output == tokenizer.decode(tokens) and (analysis.image.rows, analysis.image.cols) == (8, 8)


def test_image_transformer_shows_sub_pixels_in_their_local_window(image_dir):
    source = load_source(image_dir)
    analysis = source.analyse(DIGIT, files=True)
    (group,) = analysis.groups
    pixels = _pixels(DIGIT, 1, 4)
    expected = attention_maps(source.pipeline.model, images=pixels)["self"]
    assert torch.equal(group.weights, expected) and group.weights.shape == (2, 2, 16, 16)
    assert group.query_tokens[:3] == ["(0,0,0)", "(0,1,0)", "(0,2,0)"] and group.key_cells[5] == (1, 1)
    _rows_sum_to_one(group)
    # local 1D, blocks of 8, causal: query 12 sees keys 8..12 of its block and 0..7 of the one before, nothing later
    assert (group.weights[..., 12, 13:] == 0).all() and (group.weights[..., 3, 4:] == 0).all()
    assert "bits per sub-pixel" in analysis.output


def test_image_transformer_larger_than_the_explorer_shows_is_refused(tmp_path):
    model = attnlab.create_model("imagetransformer_mnist_small", height=20, width=20, channels=3, d_model=16,
                                 num_heads=2, d_ff=24, num_layers=1, attention={"name": "local_1d", "block_length": 64})
    directory = model.save_pretrained(tmp_path / "big")
    with pytest.raises(ValueError, match="20x20x3 = 1200 sub-pixels; the explorer shows at most 1024"):
        load_source(directory)
    assert attnlab.load(directory).attention(torch.zeros(20, 20, 3, dtype=torch.uint8))["self"].shape[-1] == 1200


@pytest.mark.parametrize("encoding", ["jsb", "performance"])
def test_music_names_its_events_and_generates(encoding, music_dir, performance_dir):
    from attnlab.data.music import START

    source = load_source(music_dir if encoding == "jsb" else performance_dir)
    text = "76 71 68 52" if encoding == "jsb" else "63 62 280"
    analysis = source.analyse(text, generate=3)
    (group,) = analysis.groups
    prompt = [START] + [int(t) for t in text.split()]
    assert group.weights.shape[-1] >= len(prompt) + 1 and analysis.output  # greedy; END may stop it early
    if encoding == "jsb":
        assert group.query_tokens[:5] == ["START", "0 S C5 (72)", "0 A G4 (67)", "0 T E4 (64)", "0 B C3 (48)"]
    else:
        assert group.query_tokens[:4] == ["START", "NOTE_ON(60)", "NOTE_ON(59)", "TIME_SHIFT(220ms)"]
    _rows_sum_to_one(group)
    assert (group.weights.triu(1) == 0).all()  # causal
    plain = source.analyse(text)
    expected = attention_maps(source.pipeline.model, ids=torch.tensor([prompt]))["self"]
    assert torch.equal(plain.groups[0].weights, expected)
    assert torch.equal(attnlab.load(music_dir if encoding == "jsb" else performance_dir).attention(prompt)["self"],
                       expected)


def test_music_primers_by_name_and_file(performance_dir, music_dir):
    source = load_source(performance_dir)
    assert source.default_text == "example:0"
    assert source.analyse("example:2").groups[0].query_tokens[0] == "START"
    assert source.analyse(MIDI, files=True).groups[0].weights.shape[-1] == 64  # the last 63 events fit
    with pytest.raises(ValueError, match="reads no files"):
        source.analyse(MIDI)  # the served page never opens a file a request names
    with pytest.raises(ValueError, match="example:N with N in 0..2"):
        source.analyse("example:9")
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        load_source(music_dir).analyse("999")
    with pytest.raises(ValueError, match="at most 64"):
        load_source(music_dir).analyse("60 " * 70)


def test_text_to_image_shows_text_slots_then_image_tokens(text_to_image_dir):
    from attnlab.generation import generate
    from attnlab.families.text_to_image.task import encode_prompt

    source = load_source(text_to_image_dir)
    analysis = source.analyse("a red circle")
    (group,) = analysis.groups
    config = source.pipeline.model.config
    length = config.text_length + config.image_tokens - 1
    assert group.weights.shape == (2, 4, length, length)
    assert group.query_tokens[0] == "<s>" and group.query_tokens[config.text_length] == "image (0,0)"
    assert group.key_tokens[-1] == "image (3,2)" and group.key_cells[config.text_length + 5] == (1, 1)
    assert group.key_cells[:config.text_length] == [None] * config.text_length
    _rows_sum_to_one(group)
    # the image tokens are imagine's draw (seed 0, top-k 32); the weights are the model's on them
    row = encode_prompt(source.pipeline.tokenizer, "a red circle", config.text_length)
    drawn = generate(source.pipeline.model, [row], max_new_tokens=config.image_tokens, top_k=32,
                     generator=torch.Generator().manual_seed(0))[0]
    codes = (torch.tensor([drawn]) - config.text_vocab_size).view(1, config.grid, config.grid)
    expected = attention_maps(source.pipeline.model, text_ids=torch.tensor([row]), codes=codes)["self"]
    assert torch.equal(group.weights, expected) and analysis.image.pixels.shape == (3, 32, 32)
    assert torch.equal(source.analyse_codes("a red circle", codes).groups[0].weights, expected)


def _png_uri(path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def test_image_inputs_example_upload_and_refusals(vit_dir):
    source = load_source(vit_dir)
    assert source.default_text == "example:0" and len(example_images(1)) == 3
    by_example = source.analyse("example:2").groups[0].weights
    by_upload = source.analyse(_png_uri(DIGIT))
    assert torch.equal(by_example, by_upload.groups[0].weights)  # examples/digits sorted: 2, 5, 7
    assert by_upload.text == "an uploaded image"
    for text, message in [(DIGIT, "reads no files"), ("example:3", "example:N with N in 0..2"),
                          ("data:image/png;base64,AAAA", "cannot be read"), ("data:text/plain,hi", "data:image"),
                          ("", "give an image")]:
        with pytest.raises(ValueError, match=message):
            source.analyse(text)
    with pytest.raises(ValueError, match="no such image file"):
        source.analyse("missing.png", files=True)


def test_payload_carries_the_image_and_key_cells(vit_dir):
    from PIL import Image

    payload = full_payload(load_source(vit_dir).analyse("example:0"))
    image = payload["image"]
    assert (image["rows"], image["cols"], image["height"], image["width"]) == (4, 4, 28, 28)
    png = Image.open(io.BytesIO(base64.b64decode(image["src"].split(",", 1)[1])))
    assert png.size == (28, 28)
    assert payload["groups"][0]["key_cells"][:2] == [None, [0, 0]] == payload["groups"][0]["query_cells"][:2]


FAMILIES = {"vit": ("vit_dir", DIGIT), "caption": ("captioner_dir", SCENE), "image": ("image_dir", DIGIT),
            "music": ("performance_dir", MIDI), "text_to_image": ("text_to_image_dir", "a red circle")}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_explore_html_for_every_family(family, request, tmp_path, capsys):
    fixture, text = FAMILIES[family]
    directory = request.getfixturevalue(fixture)
    out = tmp_path / "page.html"
    assert main(["explore", "--model", str(directory), "--html", str(out), text]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "http://" not in page.replace("http://www.w3.org", "")
    data = json.loads(page.split('id="attnlab-data">', 1)[1].split("</script>", 1)[0])
    assert data["groups"] and ("image" in data) == (family != "music")
    capsys.readouterr()
    # a bad input: one clear line, exit 2, no traceback, no file
    bad = {"music": "no-such.mid", "text_to_image": "ünïcode ☃"}.get(family, "no-such.png")
    assert main(["explore", "--model", str(directory), "--html", str(tmp_path / "bad.html"), bad]) == 2
    err = capsys.readouterr().err
    assert err.strip() and "Traceback" not in err and not (tmp_path / "bad.html").exists()
    assert (bad in err) if family != "text_to_image" else "vocabulary" in err


def test_explore_html_default_input(vit_dir, tmp_path):
    assert main(["explore", "--model", str(vit_dir), "--html", str(tmp_path / "p.html")]) == 0
    assert "example:0" in (tmp_path / "p.html").read_text(encoding="utf-8")


def test_served_api_analyses_an_image_and_refuses_a_server_path(vit_dir):
    from attnlab.viz.explorer.server import ExplorerApp

    app = ExplorerApp(load_source(vit_dir))
    assert app.info()["default_text"] == "example:0" and app.info()["generates"] is False
    assert "example:0 … example:2" in app.info()["hint"] and app.info()["image_input"] is True
    status, overview = app.handle("POST", "/api/analyse", json.dumps({"text": "example:1"}).encode())
    assert status == 200 and overview["image"]["rows"] == 4 and overview["groups"][0]["key_cells"][0] is None
    status, upload = app.handle("POST", "/api/analyse", json.dumps({"text": _png_uri(DIGIT)}).encode())
    assert status == 200 and upload["text"] == "an uploaded image"
    status, layer = app.handle("GET", f"/api/layer?id={overview['id']}&group=self&layer=0")
    assert status == 200 and layer["queries"] == 17
    with pytest.raises(ValueError, match="reads no files"):
        app.handle("POST", "/api/analyse", json.dumps({"text": DIGIT, "files": True}).encode())  # HTTP: 400


def test_served_music_generates(performance_dir):
    from attnlab.viz.explorer.server import ExplorerApp

    app = ExplorerApp(load_source(performance_dir))
    assert app.info()["generates"] is True and "token ids" in app.info()["hint"]
    status, overview = app.handle("POST", "/api/analyse", json.dumps({"text": "60 64", "generate": 2}).encode())
    assert status == 200 and overview["groups"][0]["queries"] == 5


def test_broken_and_huge_uploads_are_refused(vit_dir):
    from PIL import Image

    source = load_source(vit_dir)
    png = Path(DIGIT).read_bytes()
    broken = "data:image/png;base64," + base64.b64encode(png[:60]).decode()
    with pytest.raises(ValueError, match="the uploaded image cannot be read"):
        source.analyse(broken)
    buffer = io.BytesIO()
    Image.new("L", (5000, 5000)).save(buffer, format="PNG")  # a few KB of PNG, 25 million pixels
    huge = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    with pytest.raises(ValueError, match="5000x5000 pixels; the explorer reads at most"):
        source.analyse(huge)


def test_served_image_family_over_http(vit_dir):
    import threading
    import urllib.error
    import urllib.request

    from attnlab.viz.explorer.server import make_server

    server = make_server(load_source(vit_dir), "127.0.0.1", 0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/api/analyse"

    def post(text):
        request = urllib.request.Request(url, json.dumps({"text": text}).encode(),
                                         {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    try:
        status, overview = post("example:0")
        assert status == 200 and overview["image"]["src"].startswith("data:image/png;base64,")
        assert overview["groups"][0]["key_tokens"][:2] == ["CLS", "patch (0,0)"]
        status, answer = post(DIGIT)  # a server file named by the request: refused
        assert status == 400 and "reads no files" in answer["error"]
        status, answer = post("example:99")
        assert status == 400 and "example:N with N in 0..2" in answer["error"]
    finally:
        server.shutdown()
        server.server_close()


def _vit_with_data(vit_dir, tmp_path, data) -> Path:
    """``vit_dir`` whose classes.json records ``data`` (as train vit writes it)."""
    import shutil

    directory = tmp_path / "vit"
    shutil.copytree(vit_dir, directory)
    record = json.loads((directory / "classes.json").read_text())
    (directory / "classes.json").write_text(json.dumps({**record, "data": str(data)}))
    return directory


def test_the_default_image_is_the_models_own_held_out_image(vit_dir, tmp_path, capsys):
    # Issue 39, 4: a ViT trained on a user's folder opened on the shipped MNIST "2" and called it
    # "sandal (33 %)"; the default is now the first held-out image of the data classes.json records
    import numpy as np
    from PIL import Image

    from attnlab.data.images import load_images
    from attnlab.viz.explorer.server import ExplorerApp

    folder = tmp_path / "clothes"
    rng = np.random.default_rng(0)
    for name in ("zero", "one", "two"):
        (folder / name).mkdir(parents=True)
        for i in range(10):
            Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8)).save(folder / name / f"{i}.png")
    directory = _vit_with_data(vit_dir, tmp_path, folder)
    source = load_source(directory)
    held_out = load_images(str(folder), "test", image_size=28, channels=1, classes=["zero", "one", "two"])
    assert source.default_text.startswith("data:image/png;base64,")
    analysis = source.analyse(source.default_text)
    assert torch.equal(analysis.image.pixels, held_out.images[0])  # the first held-out image, exactly
    label = held_out.classes[int(held_out.labels[0])]
    assert analysis.text == f"the first held-out image of {folder} (labelled {label})"
    assert "from the model's own held-out data" in source.description
    assert "from the model's own held-out data" in ExplorerApp(source).info()["default_note"]
    assert main(["explore", "--model", str(directory), "--html", str(tmp_path / "p.html")]) == 0
    assert f"default image: the first held-out image of {folder}" in capsys.readouterr().out


@pytest.mark.parametrize("recorded", [None, "gone"])
def test_a_shipped_default_image_says_it_is_from_another_data_set(vit_dir, tmp_path, recorded, capsys):
    directory = vit_dir if recorded is None else _vit_with_data(vit_dir, tmp_path, tmp_path / "gone-folder")
    source = load_source(directory)
    assert source.default_text == "example:0"
    note = source.default_note
    assert "shipped with attnlab, not from this model's data" in note and note[1:] in source.description
    if recorded:
        assert "gone-folder" in note
    assert main(["explore", "--model", str(directory), "--html", str(tmp_path / "p.html")]) == 0
    assert "not from this model's data" in capsys.readouterr().out


def test_an_image_transformer_without_its_data_says_its_default_is_shipped(image_dir):
    source = load_source(image_dir)  # no image.json: the shipped digit, said to be from another data set
    assert source.default_text == "example:0" and "not from this model's data" in source.default_note


def test_a_captioner_opens_on_its_own_held_out_image(captioner_dir, tmp_path):
    import shutil

    from attnlab.data.scenes import load_scenes

    directory = tmp_path / "captioner"
    shutil.copytree(captioner_dir, directory)
    (directory / "caption.json").write_text(json.dumps({"data": "scenes", "image_size": 32}))
    source = load_source(directory)
    analysis = source.analyse(source.default_text)
    test = load_scenes("test", count=1)
    assert torch.equal(analysis.image.pixels, test.images[0])
    assert analysis.text == f"the first held-out image of scenes (captioned {test.captions[0][0]!r})"
    assert "not from this model's data" in load_source(captioner_dir).default_note  # no caption.json
