"""attnlab.linear: the opt-in packed-GEMM path of Linear, and the decode step's one-row product, equal F.linear."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlab

from attnlab.linear import _MKL_PACKED, _ONEDNN, Linear, packed_inference

needs_mkl = pytest.mark.skipif(not _MKL_PACKED, reason="torch built without MKL: the packed path is never taken")


@needs_mkl
@pytest.mark.parametrize("rows", [2, 3, 8, 33])
def test_packed_path_equals_linear_and_is_taken(rows):
    layer = Linear(37, 53)
    x = torch.randn(rows, 1, 37)
    expected = F.linear(x, layer.weight, layer.bias)
    with torch.no_grad(), packed_inference():
        outputs = [layer(x) for _ in range(3)]  # plain, then packed from the second call on
    assert layer._packed_key is not None and layer._packed_key[0] == rows
    for out in outputs:
        assert out.shape == (rows, 1, 53)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@needs_mkl
def test_packed_weights_follow_weight_updates():
    layer = Linear(16, 8)
    x = torch.randn(4, 16)
    with torch.no_grad(), packed_inference():
        layer(x), layer(x)
        layer.weight.mul_(2.0)  # bumps the version: the old pack must not be used
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


def test_plain_path_outside_the_block_or_with_gradients():
    layer = Linear(16, 8)
    x = torch.randn(4, 16)
    with torch.no_grad():
        layer(x), layer(x)
    assert layer._packed_key is None  # not enabled
    with packed_inference():
        out = layer(x)
        layer(x)
    assert layer._packed_key is None and out.requires_grad  # autograd needs the plain path


@needs_mkl
@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_and_beam_search_same_with_and_without_packing(use_cache, monkeypatch):
    """The searches' fast kernels (cached: the step path's oneDNN products of a few rows,
    attnlab.linear.skinny_linear; without the cache: Linear's MKL packed GEMM where a row count
    repeats) give the plain kernels' hypotheses."""
    import attnlab
    import attnlab.linear as linear
    from attnlab.generation import beam_search, greedy_search

    monkeypatch.setattr(linear, "ONEDNN_MIN_WORK", 0)  # the tiny model's products to oneDNN on any CPU
    model = attnlab.create_model("transformer_tiny", vocab_size=40).eval()
    with torch.no_grad():
        model.src_embed.weight.mul_(8.0)  # decisive logits: no near-ties for rounding to flip
    src = torch.randint(3, 40, (3, 7))

    def search():
        return (greedy_search(model, src, max_len_b=8, use_cache=use_cache),
                beam_search(model, src, beam_size=3, max_len_b=8, use_cache=use_cache))

    fast = search()
    if use_cache and linear._ONEDNN:  # the search really took the fast path
        assert model.decoder.layers[0].ffn.linear1.weight in linear.ONEDNN_COPIES
    elif not use_cache:  # MKL's packed GEMM where a row count repeats
        assert any(getattr(module, "_packed_key", None) is not None for module in model.modules())
    # The searches enable the fast kernels themselves; switch them off at the source.
    saved = linear._MKL_PACKED, linear._ONEDNN
    linear._MKL_PACKED = linear._ONEDNN = False
    try:
        plain = search()
    finally:
        linear._MKL_PACKED, linear._ONEDNN = saved
    assert [h.tokens for h in fast[0]] == [h.tokens for h in plain[0]]
    assert [[h.tokens for h in b] for b in fast[1]] == [[h.tokens for h in b] for b in plain[1]]
    for a, b in zip(fast[0], plain[0]):
        assert a.score == pytest.approx(b.score, abs=1e-4)


@pytest.mark.skipif(not _ONEDNN, reason="torch without oneDNN: no reordered weights")
def test_beam_search_of_a_large_batch_multiplies_its_rows_through_onednn(monkeypatch):
    """Batch 32 x beam 4 is 128 rows a step: oneDNN's product on the reordered weight runs
    those 10-35 % faster than MKL's GEMM on the AVX512 host (docs/benchmarks.md, issue 40), so
    skinny_linear takes up to 256 rows (it stopped at 64). The hypotheses are the plain
    kernels'."""
    import attnlab.linear as linear
    from attnlab.generation import beam_search

    monkeypatch.setattr(linear, "ONEDNN_MIN_WORK", 0)  # the tiny model's products to oneDNN on any CPU
    model = attnlab.create_model("transformer_tiny", vocab_size=40).eval()
    with torch.no_grad():
        model.src_embed.weight.mul_(8.0)  # decisive logits: no near-ties for rounding to flip
    src = torch.randint(3, 40, (24, 7))  # 24 sources x beam 4 = 96 rows
    product = torch.ops.mkldnn._linear_pointwise
    rows_seen = []

    def counting(x, *args):
        rows_seen.append(x.numel() // x.shape[-1])
        return product(x, *args)

    monkeypatch.setattr(linear.torch.ops.mkldnn, "_linear_pointwise", counting)
    fast = beam_search(model, src, beam_size=4, max_len_b=6)
    assert 96 in rows_seen  # (the encoder's 168 rows too where linear.onednn_products())
    monkeypatch.setattr(linear, "_ONEDNN", False)
    plain = beam_search(model, src, beam_size=4, max_len_b=6)
    assert [[h.tokens for h in b] for b in fast] == [[h.tokens for h in b] for b in plain]


@pytest.mark.skipif(not _ONEDNN, reason="torch without oneDNN: no reordered weights")
def test_beam_search_reorders_each_weight_once_not_every_step(monkeypatch):
    """The decode step multiplies the same weight tensors at every step, so oneDNN's reordered
    copy (kept on the tensor) is made once per weight: a slice taken afresh per step (the
    cross-attention's query rows once were) reordered its weight at every step, a fifth of a
    small model's beam search. The count of reorders does not grow with the output length."""
    import attnlab.attention.multihead as multihead
    import attnlab.linear as linear
    from attnlab.generation import beam_search

    monkeypatch.setattr(linear, "ONEDNN_MIN_WORK", 0)  # the tiny model's products to oneDNN on any CPU
    model = attnlab.create_model("transformer_tiny", vocab_size=40).eval()
    src = torch.randint(3, 40, (2, 7))
    reorder = torch.ops.mkldnn._reorder_linear_weight
    calls = []

    def counting(weight, rows):
        calls.append(tuple(weight.shape))
        return reorder(weight, rows)

    monkeypatch.setattr(linear.torch.ops.mkldnn, "_reorder_linear_weight", counting)
    # The encoder's Linear layers pack their weights the second time they see a row count (oneDNN's
    # reorder where linear.onednn_products(), MKL's elsewhere): done before the runs counted.
    for _ in range(2):
        beam_search(model, src, beam_size=3, alpha=0.0, max_len_a=0, max_len_b=2)
    counts = []
    for steps in (4, 12):
        calls.clear()
        for parameter in model.parameters():  # forget earlier runs' copies: each run starts from none
            linear.ONEDNN_COPIES.pop(parameter, None)
            multihead._QUERY_ROWS.pop(parameter, None)
        beam_search(model, src, beam_size=3, alpha=0.0, max_len_a=0, max_len_b=steps)
        counts.append(len(calls))
    assert counts[0] > 0  # the oneDNN path was taken
    assert counts[0] == counts[1], f"reorders grow with the output length: {counts} for 4 and 12 steps"
    matrices = sum(p.dim() == 2 for p in model.decoder.parameters())
    assert counts[1] <= matrices + len(model.decoder.layers)  # each matrix (+ each query slice) once


@pytest.mark.parametrize("grad_mode", [False, True])
def test_a_model_stays_copyable_and_saveable_after_decoding(grad_mode):
    """What decoding keeps for its speed (oneDNN's reordered weights, MKL's packed ones, the
    query rows a cross-attention step multiplies, the head's transposed copy) never makes the
    model itself uncopyable: copy.deepcopy and torch.save of a whole model work after beam
    search, greedy search without the cache and sampling, and after a step cache made with
    gradients on. The copy decodes as the original does."""
    import copy
    import io

    from attnlab.generation import beam_search, generate, greedy_search

    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", vocab_size=40).eval()
    lm = attnlab.create_model("lm_tiny").eval()
    src = torch.randint(3, 40, (2, 7))
    with torch.set_grad_enabled(grad_mode):
        if grad_mode:  # a user's own step cache, made outside the searches' no_grad
            model.new_step_cache(model.encode(src)[0], rows_per_source=2, capacity=8)
            lm.new_cache(1, 8)
        expected = [[h.tokens for h in hyps] for hyps in beam_search(model, src, beam_size=3, max_len_b=6)]
        greedy_search(model, src, max_len_b=6, use_cache=False)
        generated = generate(lm, [[1, 2, 3]], max_new_tokens=5, greedy=True)
    for original, check in ((model, lambda m: [[h.tokens for h in hyps]
                                               for hyps in beam_search(m, src, beam_size=3, max_len_b=6)] == expected),
                            (lm, lambda m: generate(m, [[1, 2, 3]], max_new_tokens=5, greedy=True) == generated)):
        copied = copy.deepcopy(original)
        assert check(copied)
        buffer = io.BytesIO()
        torch.save(original, buffer)
        buffer.seek(0)
        assert check(torch.load(buffer, weights_only=False))  # a file this test wrote itself


def test_skinny_linear_equals_f_linear_for_any_row_count():
    from attnlab.linear import packed_inference, skinny_linear

    weight, bias = torch.randn(48, 32), torch.randn(48)
    with torch.no_grad(), packed_inference():
        for rows in (1, 2, 4, 7, 64, 65, 128, 256, 257):
            x = torch.randn(rows, 1, 32)
            torch.testing.assert_close(skinny_linear(x, weight, bias), F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)
        x = torch.randn(4, 32)
        with torch.no_grad():
            weight.mul_(2.0)  # an in-place write: the reordered copy must not serve stale values
        torch.testing.assert_close(skinny_linear(x, weight, None), F.linear(x, weight), atol=1e-5, rtol=1e-5)


def test_derived_key_changes_whenever_a_copy_would_be_stale():
    from attnlab.linear import derived_key

    weight = torch.nn.Parameter(torch.randn(4, 3))
    key = derived_key(weight)
    assert derived_key(weight) == key  # nothing changed
    with torch.no_grad():
        weight.add_(1.0)  # an optimizer step writes in place
    assert derived_key(weight) != key
    key = derived_key(weight)
    weight.data = weight.data.clone()  # new storage
    assert derived_key(weight) != key
    assert derived_key(weight.double()) != derived_key(weight)


@pytest.mark.parametrize("kernel", [dict(fused=True), dict(foreach=True), dict(foreach=False)])
def test_derived_key_changes_after_any_optimizer_step(kernel):
    """torch's fused Adam (attnlab's optimizer on the CPU) writes parameters without moving
    their version counters: the optimizers' step hook counts the write instead."""
    from attnlab.linear import derived_key

    weight, untouched = torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(2))
    optimizer = torch.optim.AdamW([weight], lr=0.1, **kernel)
    keys = derived_key(weight), derived_key(untouched)
    weight.grad = torch.ones_like(weight)
    optimizer.step()
    assert derived_key(weight) != keys[0] and derived_key(untouched) == keys[1]


def test_decoding_after_training_steps_reads_the_new_weights():
    """Decode, train a few steps with attnlab's optimizer (fused Adam on the CPU), decode again:
    the step path's derived copies (the tied head's transposed copy) follow the new weights, as
    a fresh copy of the model computes them. Before the step hook the head copy stayed stale."""
    import copy

    from attnlab.training.optim import build_optimizer

    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny", vocab_size=23, d_model=16, num_heads=2, d_ff=24, num_layers=2,
                                 max_positions=40)
    optimizer = build_optimizer(model, "adam", lr=0.5)
    prompt, token = torch.tensor([[3, 4, 5]]), torch.tensor([6])

    def step_logits(m):
        with torch.inference_mode():
            cache = m.new_cache(1, 8)
            m.prefill(prompt, cache)
            return m.step(token, cache)

    model.eval()
    step_logits(model)  # the derived copies are made here
    model.train()
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randint(1, 23, (4, 10))).logsumexp(-1).mean().backward()
        optimizer.step()
    model.eval()
    torch.testing.assert_close(step_logits(model), step_logits(copy.deepcopy(model)), atol=1e-5, rtol=1e-5)


def test_one_row_linear_equals_f_linear_for_one_row_and_many():
    from attnlab.linear import one_row_linear

    torch.manual_seed(0)
    weight, bias = torch.randn(12, 8), torch.randn(12)
    for shape in ((1, 1, 8), (3, 1, 8), (1, 4, 8)):
        x = torch.randn(*shape)
        for b in (bias, None):
            torch.testing.assert_close(one_row_linear(x, weight, b), F.linear(x, weight, b), atol=1e-6, rtol=1e-6)
    assert one_row_linear(torch.randn(1, 1, 8), weight, bias).shape == (1, 1, 12)


def test_step_linear_keeps_f_linear_where_addmv_does_not_apply():
    from attnlab.linear import one_row_linear, step_linear

    assert step_linear(nn.Parameter(torch.randn(4, 4))) is one_row_linear
    assert step_linear(torch.randn(4, 4, dtype=torch.float64)) is F.linear
    quantized = attnlab.create_model("lm_tiny").quantize("int8").decoder.stack.layers[0].self_attn.qkv_proj.weight
    product = step_linear(quantized)  # an Int8Weight brings its own product, not addmv
    assert product is type(quantized).step_product
    x, bias = torch.randn(3, 1, quantized.shape[1]), torch.randn(quantized.shape[0])
    assert torch.equal(product(x, quantized, bias), F.linear(x, quantized, bias))  # the same int8 kernel
    assert torch.equal(product(x, quantized[:8], None), F.linear(x, quantized[:8]))


def test_an_int8_weight_reached_outside_a_step_plan_brings_its_own_product_too(monkeypatch):
    """The head (skinny_linear) and cross-attention's rows (linear_rows) call the weight's
    step_product, so an exported step (generation/aot.py) never passes an Int8Weight to F.linear
    (strict export cannot trace F.linear's __torch_function__ on an object that is not a tensor)."""
    from attnlab.linear import linear_rows, products_for_folding, skinny_linear

    module = attnlab.create_model("lm_tiny").quantize("int8").decoder.stack.layers[0].self_attn.qkv_proj
    plain_linear = F.linear

    def tensors_only(x, weight, bias=None):
        assert isinstance(weight, torch.Tensor), f"F.linear was given {type(weight).__name__}"
        return plain_linear(x, weight, bias)

    monkeypatch.setattr(F, "linear", tensors_only)
    weight = module.weight
    x = torch.randn(3, 1, weight.shape[1])
    assert torch.equal(skinny_linear(x, weight, module.bias), weight.linear(x, module.bias))
    assert torch.equal(linear_rows(module, x, 0, 8), weight[:8].linear(x, module.bias[:8]))
    with products_for_folding():
        assert torch.equal(skinny_linear(x, weight, None), weight.folded_product(x, None))
        assert torch.equal(linear_rows(module, x, 8, 16), weight[8:16].folded_product(x, module.bias[8:16]))


@pytest.mark.skipif(not (_MKL_PACKED and _ONEDNN), reason="torch without MKL or oneDNN: packed_inference is off")
@pytest.mark.parametrize("shape", [(2, 37), (14, 37), (3, 100, 37), (300, 37)])
def test_onednn_products_equal_f_linear(monkeypatch, shape):
    """Where linear.onednn_products() (an AMD CPU with AVX-512; forced here on any CPU), Linear's
    products inside packed_inference go to oneDNN: the plain weight for a row count seen first,
    oneDNN's reordered copy from its second time in a row; linear_rows's too. All equal F.linear up
    to float32 summation order."""
    import attnlab.linear as linear

    monkeypatch.setattr(linear, "_amd_avx512", lambda: True)
    monkeypatch.setattr(linear, "ONEDNN_MIN_WORK", 0)  # these small products too
    layer = Linear(37, 53)
    x = torch.randn(*shape)
    calls = []
    product = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(linear.torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(1) or product(*a))
    with torch.no_grad(), packed_inference():
        assert linear.onednn_products()
        outputs = [layer(x) for _ in range(3)]  # the plain weight, then the reordered copy
        rows = linear.linear_rows(layer, x, 5, 20)
        no_bias = linear.plain_product(x, layer.weight)
    assert len(calls) == 5 and layer._packed_key[2] is True
    for out in outputs:
        torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rows, F.linear(x, layer.weight[5:20], layer.bias[5:20]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(no_bias, F.linear(x, layer.weight), rtol=1e-5, atol=1e-5)


def test_plain_product_is_f_linear_outside_inference_and_for_one_row(monkeypatch):
    import attnlab.linear as linear

    monkeypatch.setattr(linear, "_amd_avx512", lambda: True)
    monkeypatch.setattr(linear, "ONEDNN_MIN_WORK", 0)  # only the conditions below keep F.linear
    weight, bias = torch.randn(8, 6), torch.randn(8)
    x = torch.randn(5, 6)
    calls = []
    product = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(linear.torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(1) or product(*a))
    assert torch.equal(linear.plain_product(x, weight, bias), F.linear(x, weight, bias))  # not in packed_inference
    with packed_inference():
        assert torch.equal(linear.plain_product(x, weight.requires_grad_(), bias), F.linear(x, weight, bias))
        with torch.no_grad():
            assert torch.equal(linear.plain_product(x[:1], weight, bias), F.linear(x[:1], weight, bias))
            assert torch.equal(linear.plain_product(x.double(), weight.double()), F.linear(x.double(), weight.double()))
            assert torch.equal(linear.plain_product(x.t().contiguous().t(), weight, bias),
                               F.linear(x.t().contiguous().t(), weight, bias))
    assert calls == []


def test_cpu_vendor_reads_proc_cpuinfo(tmp_path):
    from attnlab.linear import cpu_vendor

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\n")
    assert cpu_vendor(str(info)) == "AuthenticAMD"
    assert cpu_vendor(str(tmp_path / "missing")) == ""


@pytest.mark.skipif(not (_MKL_PACKED and _ONEDNN), reason="torch without MKL or oneDNN: packed_inference is off")
def test_small_products_stay_with_mkl_where_onednn_products(monkeypatch):
    """oneDNN's call costs ~10 µs before any arithmetic: where linear.onednn_products(), a product of fewer
    than ONEDNN_MIN_WORK multiply-adds stays F.linear's (plain_product, Linear's packed road, skinny_linear);
    one of more goes to oneDNN."""
    import attnlab.linear as linear

    monkeypatch.setattr(linear, "_amd_avx512", lambda: True)
    calls = []
    product = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(linear.torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(1) or product(*a))
    small, large = Linear(32, 96), Linear(256, 768)
    with torch.no_grad(), packed_inference():
        for _ in range(3):
            small(torch.randn(8, 32))
        linear.skinny_linear(torch.randn(8, 32), small.weight, small.bias)
        linear.plain_product(torch.randn(300, 32), small.weight)  # 0.92 M: under 1 << 20, over 1 << 19
        assert len(calls) == (1 if linear.ONEDNN_MIN_WORK <= 300 * 32 * 96 else 0)
        calls.clear()
        x = torch.randn(8, 256)
        for _ in range(3):
            out = large(x)
        linear.skinny_linear(x, large.weight, large.bias)
    assert len(calls) == 4 and small._packed_key[2] is False and large._packed_key[2] is True
    torch.testing.assert_close(out, F.linear(x, large.weight, large.bias), rtol=1e-5, atol=1e-5)
