"""The Image Transformer: cached steps equal the full forward at every sub-pixel (1D, 2D,
full attention, class-conditional, super-resolution, colour; growing and fixed-shape caches); causality in the generation
order; uniform predictions are exactly 8 bits/dim; a tiny model overfits; bad inputs."""

import math

import pytest
import torch

import attnlab
from attnlab.models.image_transformer import bits_per_dim

LOCAL_1D = {"name": "local_1d", "block_length": 10}
LOCAL_2D = {"name": "local_2d", "query_shape": [2, 3], "memory_flange": [1, 2]}


def tiny(attention=LOCAL_1D, *, channels=1, dtype=torch.float64, **overrides):
    torch.manual_seed(0)
    settings = dict(height=6, width=6, channels=channels, d_model=16, num_heads=2, d_ff=24, num_layers=2,
                    dropout=0.0, attention=attention)
    settings.update(overrides)
    return attnlab.create_model("imagetransformer_mnist_small", **settings).to(dtype).eval()


def images(model, batch=2, *, low=False):
    torch.manual_seed(1)
    c = model.config
    size = c.low_resolution if low else c.height
    return torch.randint(0, 256, (batch, c.channels, size, size))


def in_generation_order(model, logits):
    """(B, C, H, W, 256) -> (B, L, 256) in the model's generation order."""
    return logits.permute(0, 2, 3, 1, 4).reshape(logits.shape[0], -1, 256).index_select(1, model.embedder.order)


CASES = {
    "local_1d": dict(),
    "local_2d": dict(attention=LOCAL_2D),
    "full": dict(attention="causal"),
    "sinusoidal-post-ln": dict(positional="sinusoidal", norm_first=False),
    "colour-2d-classes": dict(channels=3, attention={"name": "local_2d", "query_shape": [2, 6], "memory_flange": [1, 3]},
                              num_classes=4),
    "super-resolution": dict(low_resolution=3, num_encoder_layers=1, attention=LOCAL_2D),
    "super-resolution-shared-positions": dict(low_resolution=3, num_encoder_layers=1, low_res_positions="shared"),
    "super-resolution-low-res-input-2d-colour": dict(channels=3, low_resolution=3, num_encoder_layers=1, low_res_input=True,
                                                     attention={"name": "local_2d", "query_shape": [2, 6],
                                                                "memory_flange": [1, 3]}),
}


@pytest.mark.parametrize("fixed_shape", [False, True], ids=["eager", "fixed-shape"])
@pytest.mark.parametrize("case", list(CASES))
def test_cached_steps_equal_the_full_forward_at_every_sub_pixel(case, fixed_shape):
    model = tiny(**CASES[case])
    x = images(model)
    labels = torch.tensor([3, 1]) if model.config.num_classes else None
    low = images(model, low=True) if model.config.low_resolution else None
    with torch.no_grad():
        full = in_generation_order(model, model(x, labels, low))
    sequence = model.images_to_sequence(x)
    for given in (0, 7):
        cache = model.new_cache(2, fixed_shape=fixed_shape)  # fixed: what a compiled step runs
        logits = model.prefill(sequence[:, :given], cache, labels, low)
        torch.testing.assert_close(logits, full[:, given], atol=1e-10, rtol=1e-10)
        for t in range(given, model.config.sequence_length - 1):
            logits = model.step(sequence[:, t], cache)
            torch.testing.assert_close(logits, full[:, t + 1], atol=1e-10, rtol=1e-10)
    # The local patterns' caches hand each step only its window of keys.
    window = model.stack.layers[0].self_attn.pattern.cache_window
    assert window is None if case == "full" else window < model.config.sequence_length


@pytest.mark.parametrize("case", ["local_1d", "local_2d", "colour-2d-classes"])
def test_a_sub_pixel_never_changes_the_logits_of_itself_or_earlier_ones(case):
    model = tiny(**CASES[case])
    x = images(model, 1)
    labels = torch.tensor([2]) if model.config.num_classes else None
    with torch.no_grad():
        before = in_generation_order(model, model(x, labels))
    sequence = model.images_to_sequence(x)
    for t in (0, 5, 17, model.config.sequence_length - 1):
        changed = sequence.clone()
        changed[0, t] = (changed[0, t] + 128) % 256
        with torch.no_grad():
            after = in_generation_order(model, model(model.sequence_to_images(changed), labels))
        torch.testing.assert_close(after[:, :t + 1], before[:, :t + 1], atol=0, rtol=0)
        if t + 1 < model.config.sequence_length:
            assert (after[:, t + 1] - before[:, t + 1]).abs().max() > 1e-6  # the next one sees it


def test_generation_order_of_local_2d_is_block_raster():
    model = tiny(LOCAL_2D)
    x = torch.arange(36).reshape(1, 1, 6, 6)
    sequence = model.images_to_sequence(x)[0].tolist()
    assert sequence[:6] == [0, 1, 2, 6, 7, 8]  # the first 2×3 block, row by row
    assert sequence[6:9] == [3, 4, 5]
    assert torch.equal(model.sequence_to_images(model.images_to_sequence(x)), x)


def test_uniform_predictions_are_exactly_8_bits_per_dim():
    model = tiny(channels=3, dtype=torch.float32)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()  # every logit 0: the uniform distribution over 256 values
    with torch.no_grad():
        loss = model.loss(images(model, 3))
    # ln 256 / ln 2 = 8; float32 rounding of log-softmax over 256 values is ~8 ulp of ln 256.
    assert bits_per_dim(float(loss)) == pytest.approx(8.0, abs=16 * torch.finfo(torch.float32).eps * 8)


def test_a_tiny_model_overfits_a_few_images():
    model = tiny(LOCAL_2D, dtype=torch.float32, height=4, width=6, d_model=32, d_ff=64, num_classes=2).train()
    x = torch.randint(0, 256, (3, 1, 4, 6), generator=torch.Generator().manual_seed(3))
    labels = torch.tensor([0, 1, 1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = float(model.loss(x, labels).detach())
    for _ in range(60):
        optimizer.zero_grad()
        loss = model.loss(x, labels)
        loss.backward()
        optimizer.step()
    model.eval()
    assert bits_per_dim(first) > 7.5
    with torch.no_grad():
        assert bits_per_dim(float(model.loss(x, labels))) < 1.0  # memorised: ~0 bits for 72 sub-pixels


def test_bad_inputs_give_clear_errors():
    model = tiny()
    with pytest.raises(ValueError, match=r"shape \(1, 7, 6\).*takes \(1, 6, 6\)"):
        model(torch.zeros(1, 1, 7, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="value 256, outside the intensities"):
        model(torch.full((1, 1, 6, 6), 256))
    with pytest.raises(ValueError, match="value -1"):
        model(torch.full((1, 1, 6, 6), -1))
    with pytest.raises(ValueError, match="integer intensities"):
        model(torch.zeros(1, 1, 6, 6))
    with pytest.raises(ValueError, match="not class-conditional"):
        model(torch.zeros(1, 1, 6, 6, dtype=torch.long), torch.tensor([0]))
    with pytest.raises(ValueError, match=r"query_shape \[4, 3\] does not tile the 6×6 grid"):
        tiny({"name": "local_2d", "query_shape": [4, 3], "memory_flange": [1, 1]})
    with pytest.raises(ValueError, match=r"does not tile the 6×18 grid"):
        tiny({"name": "local_2d", "query_shape": [2, 4], "memory_flange": [1, 1]}, channels=3)
    with pytest.raises(ValueError, match="not a causal pattern"):
        tiny("full")
    with pytest.raises(ValueError, match="low_resolution=4 must divide"):
        tiny(low_resolution=4, num_encoder_layers=1)
    conditional = tiny(num_classes=3)
    with pytest.raises(ValueError, match="label 3 is outside"):
        conditional(torch.zeros(1, 1, 6, 6, dtype=torch.long), torch.tensor([3]))
    with pytest.raises(ValueError, match="class-conditional: give labels"):
        conditional(torch.zeros(1, 1, 6, 6, dtype=torch.long))
    sr = tiny(low_resolution=3, num_encoder_layers=1)
    with pytest.raises(ValueError, match=r"low-resolution images have shape \(1, 2, 2\)"):
        sr(torch.zeros(1, 1, 6, 6, dtype=torch.long), low_res=torch.zeros(1, 1, 2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="needs the 3×3"):
        sr(torch.zeros(1, 1, 6, 6, dtype=torch.long))


def test_save_load_and_presets(tmp_path):
    model = tiny(LOCAL_2D, channels=3, num_classes=2, dtype=torch.float32)
    model.save_pretrained(tmp_path)
    loaded = attnlab.load_model(tmp_path)
    assert loaded.config == model.config
    assert loaded.stack.layers[0].self_attn.pattern.width == 18  # W·C, filled in by the model
    x = images(model)
    torch.testing.assert_close(loaded(x, torch.tensor([0, 1])), model(x, torch.tensor([0, 1])))
    with torch.device("meta"):
        base = attnlab.create_model("imagetransformer_cifar10_base")
    c = base.config
    assert (c.num_layers, c.d_model, c.d_ff, c.num_heads, c.dropout, c.attention["block_length"]) == (
        12, 512, 2048, 4, 0.3, 256)
    # 12 layers of 4·512² + 2·512·2048 weights, biases and 2 LayerNorms, the final norm (pre-LN), the
    # 768-row embedding (256 intensities × 3 channels), the 256-way head, row/column/channel positions.
    layers = 12 * (4 * 512 * 512 + 4 * 512 + 2 * 512 * 2048 + 2048 + 512 + 2 * 2 * 512)
    assert base.num_parameters() == layers + 2 * 512 + 768 * 512 + 512 * 256 + 256 + (32 + 32 + 3) * 512
    for name in ("imagetransformer_mnist_small", "imagetransformer_mnist_2d_small", "imagetransformer_colour_small",
                 "imagetransformer_sr_mnist_small", "imagetransformer_sr_colour_small"):
        with torch.device("meta"):
            assert attnlab.create_model(name).config.sequence_length in (784, 3072)
    assert math.isclose(bits_per_dim(math.log(256)), 8.0)


def test_attention_maps_for_the_explorer_are_local():
    from attnlab.viz.explorer.maps import attention_maps
    from reference.local_patterns import local_2d_mask

    model = tiny(LOCAL_2D, dtype=torch.float32, low_resolution=3, num_encoder_layers=1)
    maps = attention_maps(model, images=images(model, 1), low_res=images(model, 1, low=True))
    assert maps["self"].shape == (2, 2, 36, 36) and maps["cross"].shape == (2, 2, 36, 9)
    allowed = local_2d_mask(36, 6, (2, 3), (1, 2), masked=True)
    assert (maps["self"][..., ~allowed] == 0).all()
    torch.testing.assert_close(maps["self"].sum(-1), torch.ones(2, 2, 36))


def test_shared_low_resolution_positions_come_from_the_decoder_table_at_block_centres(tmp_path):
    model = tiny(low_resolution=3, num_encoder_layers=1, low_res_positions="shared", dtype=torch.float32)
    table = model.embedder.positions.tables  # the decoder's 6×6 rows, columns, channels
    assert model.low_res_embedder.positions is None
    assert not any(name.startswith("low_res_embedder.positions") for name in model.state_dict())
    low = images(model, low=True)  # (2, 1, 3, 3)
    with torch.no_grad():
        got = model.low_res_embedder(model.low_res_embedder.to_sequence(low), shift=False)
        tokens = model.low_res_embedder.embed(low.reshape(2, -1))
        # low-res pixel (r, c) covers full-resolution rows 2r, 2r+1: its centre row is 2r + 1
        expected = torch.stack([tokens[:, 3 * r + c] + (table[0][2 * r + 1] + table[1][2 * c + 1] + table[2][0])
                                for r in range(3) for c in range(3)], dim=1)
    # The same element-wise float32 additions in the same order (no reduction, no matrix
    # product): correctly rounded on every CPU, so exactly equal.
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    x = images(model)
    model.train()
    model.loss(x, low_res=low).backward()  # the encoder's use of the table reaches its gradient
    assert table[0].grad is not None and table[0].grad.abs().sum() > 0
    model.eval().save_pretrained(tmp_path)
    loaded = attnlab.load_model(tmp_path).eval()
    assert loaded.config.low_res_positions == "shared"
    with torch.no_grad():
        # Same weights, other buffers: a BLAS may block them differently, so float32 tolerances.
        torch.testing.assert_close(loaded(x, low_res=low), model(x, low_res=low), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="low_res_positions='grid' must be 'own' or 'shared'"):
        tiny(low_resolution=3, num_encoder_layers=1, low_res_positions="grid")


def test_low_res_input_adds_the_covering_low_resolution_sub_pixel_to_every_decoder_input(tmp_path):
    model = tiny(channels=3, low_resolution=3, num_encoder_layers=1, low_res_input=True, num_classes=2,
                 attention={"name": "local_2d", "query_shape": [2, 6], "memory_flange": [1, 3]})
    x, low, labels = images(model), images(model, low=True), torch.tensor([1, 0])  # (2, 3, 6, 6), (2, 3, 3, 3)
    table = model.low_res_input_embed
    with torch.no_grad():
        # The decoder's inputs with the table's output replaced by zeros, then with it back.
        values = model.images_to_sequence(x)
        previous = torch.cat([values.new_zeros(2, 1), values[:, :-1]], 1)
        with_it = model.embedder(previous, shift=True, extra=model._conditioning(labels, low, 2))
        without = model.embedder(previous, shift=True, extra=model._class_vectors(labels, 2))
        order = model.embedder.order.tolist()  # raster index (row, column, channel) of each position
        for b in range(2):
            for t, raster in enumerate(order):
                row, col, channel = raster // 18, raster // 3 % 6, raster % 3
                token = int(low[b, channel, row // 2, col // 2]) + 256 * channel  # the 2×2 block's low-res pixel
                # float64 (tiny() builds the model in double): a sum and a difference of a few
                # numbers of size ~10 round at ~1e-15, far inside 1e-12 on any CPU.
                torch.testing.assert_close(with_it[b, t] - without[b, t], table(torch.tensor([token]))[0],
                                           rtol=1e-12, atol=1e-12)
    model.train()
    model.loss(x, labels, low).backward()
    assert table.weight.grad.abs().sum() > 0
    model.eval().save_pretrained(tmp_path)
    loaded = attnlab.load_model(tmp_path).double().eval()
    assert loaded.config.low_res_input is True
    with torch.no_grad():
        # The weights were drawn in float32 and never updated, so they survive the round trip
        # exactly; both models then run in float64, where other buffers or BLAS blockings
        # differ by ~1e-15, far inside 1e-10.
        torch.testing.assert_close(loaded(x, labels, low), model(x, labels, low), rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="low_res_input=True needs a super-resolution model"):
        tiny(low_res_input=True)


def test_a_super_resolution_model_learns_what_only_the_low_resolution_image_tells():
    """Images made of constant 2×2 blocks, each black or white at random: without the 2×2
    low-resolution image the first pixel of every block is a coin flip, so no model that
    ignores it can go below 4·ln 2 / 16 = 0.173 nats per sub-pixel; one that reads it can
    reach 0.

    How soon the model finds the cross-attention path depends on the seed and on the CPU's
    rounding: 300 steps left some seeds above the floor (0.19), so it trains 600, where
    every seed tried (12) was below 0.05 by step 390 and ended under 0.002 on fresh images.
    Fresh images are scored, not the last training batch, and with every low-resolution
    pixel inverted the same model must be confidently wrong (every seed tried: > 2.5 nats),
    which a model that ignores the image, or sees the answer some other way, is not."""
    from attnlab.families.image.task import downsample, image_loss

    torch.manual_seed(0)
    model = attnlab.create_model("imagetransformer_sr_mnist_small", height=4, width=4, channels=1, low_resolution=2,
                                 num_encoder_layers=1, num_layers=1, d_model=32, num_heads=2, d_ff=64, dropout=0.0,
                                 attention={"name": "local_1d", "block_length": 4})
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    def blocks(count, generator):
        low = torch.randint(0, 2, (count, 1, 2, 2), generator=generator) * 255
        return low.repeat_interleave(2, -1).repeat_interleave(2, -2).to(torch.uint8)

    generator = torch.Generator().manual_seed(1)
    for _ in range(600):
        images = blocks(32, generator)
        nll, count, _ = image_loss(model, {"images": images, "labels": torch.zeros(32, dtype=torch.long)})
        optimizer.zero_grad()
        (nll / count).backward()
        optimizer.step()
    model.eval()
    fresh = blocks(256, torch.Generator().manual_seed(2))
    low = downsample(fresh, 2)
    with torch.no_grad():
        reading = float(model.loss(fresh, low_res=low))
        misled = float(model.loss(fresh, low_res=255 - low))
    floor = 4 * math.log(2) / 16
    assert reading < 0.05 < floor, reading
    assert misled > 1.0, misled
