"""``model.quantize("int8")``: int8 weights (one scale per output row) through torch's
dynamically quantised linear kernel, on every decoding road (forward, search, the step
path); stated tolerances against float32, token agreement on a small trained model, the
``--quantize`` flag end to end and its errors."""

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.cli.main import main
from attnlab.generation import beam_search, generate, greedy_search
from attnlab.quantize import QUANTIZE_MODES, Int8Weight, QuantizedLinear, full_range_inputs

pytestmark = pytest.mark.skipif(not torch.backends.quantized.supported_engines,
                                reason="torch has no quantized CPU engine")


def _activation_error_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """What quantising the input to 8 bits where the kernel takes them, else 7 (one affine
    scale for the whole call, range including 0) can change in ``x @ weight.T``: half a step
    times sum_k |w_k|, per output."""
    rows = x.reshape(-1, x.shape[-1]).double()
    low, high = min(float(rows.min()), 0.0), max(float(rows.max()), 0.0)
    step = (high - low) / (255 if full_range_inputs() else 127)
    return (0.5 * step * weight.double().abs().sum(dim=1)) * 1.01 + 1e-5  # (out,)


def test_int8_weight_rounds_each_row_to_its_own_scale():
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(24, 40, generator=generator) * torch.logspace(-2, 1, 24)[:, None]  # rows of very different size
    q = Int8Weight.from_float(weight)
    # each row's scale: max |w| / 127 rounded up to a bfloat16 number (at most 2**-7 above it), so a
    # folded package's bf16 product multiplies by exactly the same scale
    ideal = weight.double().abs().amax(dim=1) / 127
    assert (q.scales >= ideal).all() and (q.scales <= ideal * (1 + 2 ** -7)).all()
    assert torch.equal(q.scales_bf16.double(), q.scales)
    error = (q.dequantize() - weight).abs()
    assert (error <= q.scales[:, None].float() * 0.5 + 1e-7).all()
    assert q.values.dtype == torch.int8 and q.values.abs().amax(dim=1).min() >= 126 and q.values.abs().max() <= 127


def test_bf16_ceil_is_the_smallest_bfloat16_at_or_above():
    from attnlab.quantize import bf16_ceil

    values = torch.tensor([1.0, 1.0 + 2 ** -9, 3.0 - 2 ** -20, 1e-12, 0.1, 255.5], dtype=torch.float64)
    up = bf16_ceil(values)
    assert torch.equal(up.to(torch.bfloat16).double(), up)  # bfloat16 numbers
    assert (up >= values).all()
    below = (up.to(torch.bfloat16).view(torch.int16) - 1).view(torch.bfloat16).double()  # the next bf16 down
    assert ((below < values) | (up == values)).all()
    assert up[0] == 1.0 and up[1] == 1.0 + 2 ** -7


@pytest.mark.parametrize("shape", [(1, 40), (3, 5, 40)])
def test_linear_is_the_product_with_the_dequantised_weight_within_the_input_rounding(shape):
    generator = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(24, 40, generator=generator), torch.randn(24, generator=generator)
    x = torch.randn(*shape, generator=generator)
    q = Int8Weight.from_float(weight)
    out = F.linear(x, q, bias)  # through __torch_function__, as the step path calls it
    reference = x.double() @ q.dequantize().double().T + bias.double()
    assert out.shape == (*shape[:-1], 24) and out.dtype == torch.float32
    assert ((out.double() - reference).abs() <= _activation_error_bound(x, q.dequantize())).all()
    # ... and not merely close to the float weight by luck: the bound is far tighter than the error of a
    # wrongly scaled or transposed weight
    wrong = x.double() @ (q.dequantize().double() * 1.05).T + bias.double()
    assert not ((out.double() - wrong).abs() <= _activation_error_bound(x, q.dequantize())).all()


_WORST_CASE = """
import json, torch
from attnlab.quantize import Int8Weight, full_range_inputs
out = {"full_range": full_range_inputs(), "within": [], "raw_8_bit_exact": []}
for rows, width in ((1, 96), (5, 512)):
    weight = Int8Weight(torch.full((8, width), 127, dtype=torch.int8), torch.ones(8, dtype=torch.float64))
    x = torch.full((rows, width), 255.0)
    x[:, 0] = 0.0
    exact = 255.0 * (width - 1) * 127
    out["within"].append(float(((weight.linear(x, None) - exact).abs() / exact).max()))
    raw = torch.ops.quantized.linear_dynamic(x, weight.packed, False)
    out["raw_8_bit_exact"].append(bool(((raw - exact).abs() <= 0.01 * exact).all()))
print(json.dumps(out))
"""


@pytest.mark.parametrize("instructions", [None, "AVX2"])
def test_the_kernels_sums_never_saturate(instructions):
    """8-bit inputs only where the kernel sums them in 32 bits: the worst case (every input
    at the top code against weights of 127) comes out within the inputs' rounding, with the
    machine's own kernel and with fbgemm held to AVX2 (16-bit pair sums, which would clip it
    to about half with 8-bit inputs); and the probe's answer is what the raw kernel does."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    if instructions:
        env["FBGEMM_ENABLE_INSTRUCTIONS"] = instructions
    else:
        env.pop("FBGEMM_ENABLE_INSTRUCTIONS", None)
    result = subprocess.run([sys.executable, "-c", _WORST_CASE], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert max(found["within"]) < 0.01, found
    assert found["full_range"] == all(found["raw_8_bit_exact"]), found


def test_row_slices_equal_the_rows_of_the_whole_product():
    """Cross-attention projects queries with weight[:d] and memory with weight[d:]."""
    generator = torch.Generator().manual_seed(2)
    weight, bias = torch.randn(96, 32, generator=generator), torch.randn(96, generator=generator)
    x = torch.randn(4, 32, generator=generator)
    q = Int8Weight.from_float(weight)
    whole = F.linear(x, q, bias)
    torch.testing.assert_close(F.linear(x, q[:32], bias[:32]), whole[:, :32], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(F.linear(x, q[32:], bias[32:]), whole[:, 32:], atol=1e-5, rtol=1e-5)
    assert q[:32] is q[:32]  # packed once per slice
    with pytest.raises(TypeError, match="int8-quantised weight"):
        torch.matmul(x, q)  # anything but F.linear is refused, not silently run on int8 values


@pytest.mark.parametrize("preset", ["lm_tiny", "transformer_tiny"])
def test_quantize_swaps_every_linear_layer_and_keeps_logits_close(preset):
    torch.manual_seed(0)
    model = attnlab.create_model(preset).eval()
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 64, (2, 9), generator=generator)
    inputs = (ids,) if preset == "lm_tiny" else (ids, torch.randint(3, 64, (2, 6), generator=generator))
    with torch.no_grad():
        reference = model(*inputs)
        assert model.quantize("int8") is model
        quantized = model(*inputs)
    assert model.quantized == "int8" and not model.training
    assert not any(type(m) is torch.nn.Linear or isinstance(m, attnlab.linear.Linear) for m in model.modules())
    assert any(isinstance(m, QuantizedLinear) for m in model.modules())
    # Stated tolerance: int8 weights and 7-bit inputs, a few percent of the logits' range.
    assert (quantized - reference).abs().max() <= 0.05 * reference.abs().max()
    assert (quantized - reference).abs().max() > 0  # it did quantise


def _train_lm(text: str, steps: int = 150):
    """lm_tiny trained on windows of a repeated text (characters) until it is confident."""
    from attnlab.data.text import CharTokenizer

    tokenizer = CharTokenizer.from_text(text)
    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny", vocab_size=tokenizer.vocab_size)
    stream = torch.tensor(tokenizer.encode(text * 20))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(stream) - 33, (16,), generator=generator)
        batch = torch.stack([stream[s : s + 33] for s in starts.tolist()])
        loss = F.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), tokenizer, loss.item()


TEXT = "the cat sat on the mat. a dog ran to the cat. the mat was red. "


@pytest.fixture(scope="module")
def trained_lm():
    return _train_lm(TEXT)


def test_greedy_tokens_of_a_trained_model_agree(trained_lm):
    """Token agreement, stated: the int8 model's next-token argmax equals float32's at >= 97 %
    of the positions of float32's greedy continuations (teacher-forced, so one early
    difference is not counted again at every later token; 99.8 % measured), and >= 12 of
    15 greedy continuations of 24 tokens are identical (14 measured)."""
    model, tokenizer, loss = trained_lm
    assert loss < 0.3, f"the model did not learn the text (loss {loss:.3f}); the agreement test would mean little"
    prompts = [tokenizer.encode(TEXT[i : i + 5]) for i in range(0, 60, 4)]
    quantized_model = _copy(model).quantize("int8")
    fp32 = generate(model, prompts, max_new_tokens=24, greedy=True)
    quantized = generate(quantized_model, prompts, max_new_tokens=24, greedy=True)
    sequences = torch.tensor([p + c for p, c in zip(prompts, fp32)])
    with torch.no_grad():
        agreement = (model(sequences).argmax(-1) == quantized_model(sequences).argmax(-1)).float().mean().item()
    assert agreement >= 0.97, agreement
    assert sum(a == b for a, b in zip(fp32, quantized)) >= 12


def test_cached_steps_agree_with_a_full_recomputation(trained_lm):
    """The quantised step path (prepare_step's gathered weights, a static cache) computes the
    same function as the quantised full forward, up to the input rounding: dynamic
    quantisation scales each call's input as a whole, so one row at a time and a whole
    prefix at once round slightly differently (not bit for bit, unlike float32)."""
    model, tokenizer, _ = trained_lm
    model = _copy(model).quantize("int8")
    prompt = torch.tensor([tokenizer.encode("the cat sat on")])
    with torch.no_grad():
        tokens = generate(model, prompt.tolist(), max_new_tokens=12, greedy=True)[0]
        full = model(torch.cat([prompt, torch.tensor([tokens[:-1]])], dim=1))[0, prompt.shape[1] - 1:]
    assert full.argmax(-1).tolist() == tokens  # greedy through the cache == argmax of the full recomputation


def test_search_runs_quantised_and_agrees_on_a_trained_translation_model():
    """The encoder–decoder: greedy and beam search (growing cache, cross-attention slices of
    the fused projection) on a model trained to copy its source."""
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", norm_first=True)  # pre-LN: learns the copy in fewer steps
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(150):
        src = torch.randint(3, 20, (32, 6), generator=generator)
        src[:, -1] = 2  # EOS
        tgt_in = torch.cat([torch.ones(32, 1, dtype=torch.long), src[:, :-1]], dim=1)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), src.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    assert loss.item() < 0.5, loss.item()
    src = torch.randint(3, 20, (12, 6), generator=torch.Generator().manual_seed(1))
    src[:, -1] = 2
    quantized_model = _copy(model).quantize("int8")
    fp32 = [h.tokens for h in greedy_search(model, src, max_len_a=1, max_len_b=2)]
    greedy = [h.tokens for h in greedy_search(quantized_model, src, max_len_a=1, max_len_b=2)]
    beam = [b[0].tokens for b in beam_search(quantized_model, src, beam_size=3, max_len_a=1, max_len_b=2)]
    # >= 10 of 12 outputs equal float32's greedy ones (12 and 12 measured)
    assert sum(a == b for a, b in zip(fp32, greedy)) >= 10 and sum(a == b for a, b in zip(fp32, beam)) >= 10


def _copy(model):
    import copy

    return copy.deepcopy(model)


def test_errors(trained_lm, tmp_path):
    model, _, _ = trained_lm
    with pytest.raises(ValueError, match="quantize='int4' is not a known quantisation; choose one of 'int8', 'bf16'"):
        _copy(model).quantize("int4")
    quantized = _copy(model).quantize("int8")
    with pytest.raises(ValueError, match="already quantised"):
        quantized.quantize("int8")
    with pytest.raises(ValueError, match="cannot be saved"):
        quantized.save_pretrained(tmp_path / "q")
    assert not (tmp_path / "q").exists()
    with pytest.raises(ValueError, match="float32 model on the CPU"):
        _copy(model).double().quantize("int8")
    from attnlab.cli.options import QUANTIZE_CHOICES, apply_quantize

    assert QUANTIZE_CHOICES == QUANTIZE_MODES
    with pytest.raises(ValueError, match="--quantize int8 runs on the CPU"):
        apply_quantize(_copy(model), "int8", "cuda:0")


def test_generate_cli_quantized(trained_lm, tmp_path, capsys, monkeypatch):
    model, tokenizer, _ = trained_lm
    directory = tmp_path / "lm"
    model.save_pretrained(directory)
    tokenizer.save(directory)
    args = ["generate", "--model", str(directory), "--prompt", "the cat", "--prompt", "a dog", "--greedy",
            "--max-new-tokens", "16", "--device", "cpu"]
    assert main(args) == 0
    fp32 = capsys.readouterr().out
    assert main(args + ["--quantize", "int8"]) == 0
    quantized = capsys.readouterr().out
    assert quantized.startswith("the cat") and len(quantized) == len(fp32)
    with pytest.raises(SystemExit) as exit_info:
        main(args + ["--quantize", "int4"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--quantize" in err and "int4" in err
    import attnlab.quantize as quantize

    monkeypatch.setattr(quantize, "fast_bf16_cpu", lambda: (False, "AVX2 without AVX512-BF16/AMX"))
    assert main(args + ["--quantize", "bf16"]) == 2
    assert "native bfloat16" in capsys.readouterr().err


def test_bf16_is_refused_without_native_bf16(trained_lm, monkeypatch):
    import attnlab.quantize as quantize

    monkeypatch.setattr(quantize, "fast_bf16_cpu", lambda: (False, "AVX2 without AVX512-BF16/AMX"))
    model = _copy(trained_lm[0])
    with pytest.raises(ValueError, match="native bfloat16.*AVX2 without AVX512-BF16/AMX.*use int8"):
        model.quantize("bf16")
    assert model.quantized is None and next(model.parameters()).dtype == torch.float32  # nothing changed


def test_fast_bf16_detection_reads_the_cpu_flags(monkeypatch, tmp_path):
    import builtins

    import attnlab.quantize as quantize

    real_open = builtins.open
    for flags, expected in (("fpu avx2 avx512f avx512_bf16", True), ("fpu avx2 amx_bf16 amx_tile", True),
                            ("fpu avx2 fma", False)):
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        monkeypatch.setattr(builtins, "open",
                            lambda path, *a, **k: real_open(cpuinfo if path == "/proc/cpuinfo" else path, *a, **k))
        assert quantize.fast_bf16_cpu()[0] is expected, flags
        monkeypatch.setattr(builtins, "open", real_open)


def test_bf16_decoding_where_the_cpu_has_it(trained_lm, monkeypatch):
    """The bf16 road (here with the detection patched: torch emulates bf16 on this CPU, slowly
    but exactly as bf16): same greedy tokens at >= 97 % of teacher-forced positions."""
    import attnlab.quantize as quantize

    monkeypatch.setattr(quantize, "fast_bf16_cpu", lambda: (True, "patched"))
    model, tokenizer, _ = trained_lm
    bf16 = _copy(model).quantize("bf16")
    assert bf16.quantized == "bf16" and next(bf16.parameters()).dtype == torch.bfloat16
    prompts = [tokenizer.encode(TEXT[i : i + 5]) for i in range(0, 60, 4)]
    fp32 = generate(model, prompts, max_new_tokens=24, greedy=True)
    generate(bf16, prompts, max_new_tokens=24, greedy=True)  # the cached step path runs in bf16
    sequences = torch.tensor([p + c for p, c in zip(prompts, fp32)])
    with torch.no_grad():
        agreement = (model(sequences).argmax(-1) == bf16(sequences).argmax(-1)).float().mean().item()
    assert agreement >= 0.97, agreement


@pytest.mark.parametrize("shape", [(1, 40), (2, 1, 40), (3, 5, 40)])
def test_the_folded_product_is_the_int8_weights_product_within_bfloat16_rounding(shape):
    """What an exported step multiplies by (generation/aot.py, weights folded): the same int8
    weight and scales, inputs and result rounded to bfloat16, sums in float32."""
    from attnlab.linear import products_for_folding

    generator = torch.Generator().manual_seed(2)
    weight, bias = torch.randn(24, 40, generator=generator), torch.randn(24, generator=generator)
    x = torch.randn(*shape, generator=generator)
    q = Int8Weight.from_float(weight)
    reference = x.double() @ q.dequantize().double().T
    # bf16 keeps 8 significant bits: each input and the result within 2**-8 of themselves
    bound = 2 ** -8 * ((x.double().abs() @ q.dequantize().double().abs().T) + reference.abs()) * 1.01 + 1e-6
    for b in (bias, None):
        out = q.folded_product(x, b)
        assert out.shape == (*shape[:-1], 24) and out.dtype == torch.float32
        expected = reference + (0 if b is None else b.double())
        assert ((out.double() - expected).abs() <= bound).all()
        wrong = x.double() @ (q.dequantize().double() * 1.05).T + (0 if b is None else b.double())
        assert not ((out.double() - wrong).abs() <= bound).all()
    # eager: the dynamic int8 kernel (8-bit inputs), not the folded road's bfloat16 one
    assert not torch.equal(Int8Weight.step_product(x, q, bias), q.folded_product(x, bias))
    with products_for_folding():
        assert torch.equal(Int8Weight.step_product(x, q, bias), q.folded_product(x, bias))
        assert torch.equal(Int8Weight.step_product(x, q[:8], None), q[:8].folded_product(x, None))


def _dynamic_codes(x: torch.Tensor, top: int = 255):
    """The 8-bit codes (``top`` 255; 7-bit: 127, ``reduce_range``), scale and zero point torch's
    dynamic quantisation gives ``x`` (one affine scale for the whole call, the range widened to
    include 0; ChooseQuantizationParams), written out in Python floats: the reference for
    Int8Weight.integer_product and Int8Weight.codes_product."""
    from attnlab.quantize import SMALL_SCALE

    rows = x.reshape(-1, x.shape[-1])
    low, high = min(float(rows.min()), 0.0), max(float(rows.max()), 0.0)
    scale = (high - low) / top
    if float(torch.tensor(scale, dtype=torch.float32)) == 0:
        scale = 0.1
    if scale < SMALL_SCALE:
        single = torch.tensor(scale, dtype=torch.float32)
        amplified = float(torch.tensor(low, dtype=torch.float32) * (SMALL_SCALE / single))
        low = -SMALL_SCALE * top if high == 0 else amplified
        scale = SMALL_SCALE
    zero = min(max(round(-low / scale), 0), top)  # Python's round: half to even, as nearbyint
    scale32 = torch.tensor(scale, dtype=torch.float32)
    codes = (torch.round(rows * (1 / scale32)) + zero).clamp(0, top)
    return codes.double(), float(scale32), zero


_INPUTS = {"normal": lambda g: torch.randn(1, 40, generator=g),
           "positive": lambda g: torch.rand(1, 40, generator=g) + 0.5,
           "negative": lambda g: -torch.rand(1, 40, generator=g),
           "zeros": lambda g: torch.zeros(1, 40),
           # ranges below 255 times the smallest scale (0.0156): the scale raised, the range widened
           "small": lambda g: torch.randn(1, 40, generator=g) * 1e-3,
           "small positive": lambda g: torch.rand(1, 40, generator=g) * 1e-2,
           "small negative": lambda g: -torch.rand(1, 40, generator=g) * 1e-2,
           "tiny": lambda g: torch.randn(1, 40, generator=g) * 1e-7,
           "large": lambda g: torch.randn(1, 40, generator=g) * 1e4,
           "rows": lambda g: torch.randn(3, 1, 40, generator=g) * 3}


@pytest.mark.parametrize("kind", sorted(_INPUTS))
def test_the_integer_product_is_the_dynamic_kernels_arithmetic(kind):
    """What a one-row int8 package multiplies by (generation/aot.py, "integer"): the input
    quantised as torch's dynamic kernel quantises it, the int8 codes' sums exact, then scaled.
    Against the same codes multiplied in float64 (machine-independent), and, where the eager
    kernel takes full-range inputs, against the eager kernel itself."""
    from attnlab.quantize import integer_sums_exact

    if not integer_sums_exact():  # no VNNI: oneDNN clips its pair sums, and no package multiplies so here
        pytest.skip("torch._int_mm does not sum this CPU's worst case exactly (integer_sums_exact)")
    generator = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(24, 40, generator=generator), torch.randn(24, generator=generator)
    q = Int8Weight.from_float(weight)
    x = _INPUTS[kind](generator)
    codes, scale, zero = _dynamic_codes(x)
    sums = (codes - zero) @ q.values.double().T  # exact: integers
    reference = (sums * scale * q.scales[None, :]).reshape(*x.shape[:-1], 24)
    for b in (bias, None):
        out = q.integer_product(x, b)
        expected = reference + (0 if b is None else b.double())
        assert out.shape == expected.shape and out.dtype == torch.float32
        torch.testing.assert_close(out.double(), expected, atol=1e-6 * float(expected.abs().max()) + 1e-6, rtol=1e-5)
        if full_range_inputs():  # the eager kernel's own arithmetic: equal up to float32's last bits
            torch.testing.assert_close(out, q.linear(x, b), atol=1e-6 * float(expected.abs().max()) + 1e-6,
                                       rtol=1e-5)
    # a product off by one code in the zero point is far outside these bounds
    shifted = ((codes - zero - 1) @ q.values.double().T * scale * q.scales[None, :]).reshape(*x.shape[:-1], 24)
    assert not torch.allclose(q.integer_product(x, None).double(), shifted, atol=1e-6 * float(shifted.abs().max()),
                              rtol=1e-5)


@pytest.mark.parametrize("kind", sorted(_INPUTS))
def test_the_codes_product_is_the_seven_bit_kernels_arithmetic(kind):
    """What a one-row int8 package on an AVX2 CPU multiplies by (generation/aot.py, "codes"): the input
    quantised to 7 bits as torch's dynamic kernel quantises it with reduce_range (the eager int8 step's
    inputs on a CPU without VNNI), less its zero point, by the int8 codes, then scaled. The codes equal
    the reference's exactly; the eager kernel with reduce_range (on any CPU) gives those codes' products;
    the codes product itself is within the bfloat16 roundings of the weight-only pattern's output."""
    from attnlab.linear import products_for_folding
    from attnlab.quantize import SEVEN_BIT_TOP, code_products, input_codes

    generator = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(24, 40, generator=generator), torch.randn(24, generator=generator)
    q = Int8Weight.from_float(weight)
    x = _INPUTS[kind](generator)
    codes, scale, zero = _dynamic_codes(x, 127)
    got, got_zero, got_scale = input_codes(x.reshape(-1, 40), SEVEN_BIT_TOP)
    assert torch.equal(got.double() + 128 - float(got_zero), codes - zero) and float(got_scale) == scale
    sums = (codes - zero) @ q.values.double().T  # exact: integers
    reference = (sums * scale * q.scales[None, :]).reshape(*x.shape[:-1], 24)
    eager = torch.ops.quantized.linear_dynamic(x.reshape(-1, 40), q.packed, True).reshape(reference.shape)
    torch.testing.assert_close(eager.double(), reference, atol=1e-6 * float(reference.abs().max()) + 1e-6, rtol=1e-5)
    bound = 2.0 ** -7 * sums.abs().reshape(reference.shape) * scale * q.scales.abs()  # bf16 roundings
    for b in (bias, None):
        with products_for_folding(), code_products():
            out = q.linear(x, b)
        expected = reference + (0 if b is None else b.double())
        assert out.shape == expected.shape and out.dtype == torch.float32
        assert bool(((out.double() - expected).abs() <= bound + 1e-5 * (1 + expected.abs())).all()), kind


def test_the_package_takes_the_integer_product_only_when_asked():
    from attnlab.linear import products_for_folding
    from attnlab.quantize import code_products, integer_products

    generator = torch.Generator().manual_seed(4)
    q = Int8Weight.from_float(torch.randn(24, 40, generator=generator))
    x = torch.randn(1, 40, generator=generator)
    with products_for_folding():
        assert torch.equal(q.folded_product(x, None), q.weight_only_product(x, None))
        with integer_products():
            assert torch.equal(Int8Weight.step_product(x, q, None), q.integer_product(x, None))
        with code_products():
            assert torch.equal(Int8Weight.step_product(x, q, None), q.codes_product(x, None))
        assert torch.equal(Int8Weight.step_product(x, q, None), q.weight_only_product(x, None))
    assert torch.equal(q.row_sums, q.values.sum(dim=1, dtype=torch.int32))
    assert q.row_sums is q.step_tensors()[2]


def test_the_last_level_cache_is_read_from_sysfs(tmp_path):
    from attnlab.quantize import last_level_cache_bytes

    for index, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                                 (3, "Unified", "32768K"), (4, "Instruction", "64M")]):
        directory = tmp_path / f"index{index}"
        directory.mkdir()
        (directory / "level").write_text(f"{level}\n")
        (directory / "type").write_text(f"{kind}\n")
        (directory / "size").write_text(f"{size}\n")
    assert last_level_cache_bytes(str(tmp_path)) == 32 << 20
    (tmp_path / "index3" / "size").write_text("garbage\n")
    assert last_level_cache_bytes(str(tmp_path)) == 1 << 20  # an unreadable level is skipped
    assert last_level_cache_bytes(str(tmp_path / "absent")) == 0


def test_integer_products_pay_only_with_int8_dot_product_instructions(monkeypatch):
    """The head screen and an int8 package's integer products go through torch._int_mm, which on an
    AVX2 EPYC (Zen 3) summed exactly at 5x the time of a float32 product: they are taken only where the
    CPU has VNNI or AMX (as torch's cpuinfo names them) and the sums are exact; never on a CPU whose
    capabilities cannot be read."""
    from attnlab import quantize

    capabilities = {"avx2": True}
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: capabilities)
    monkeypatch.setattr(quantize, "integer_sums_exact", lambda: True)

    def answer(**on):
        capabilities.update({name: False for name in quantize.INT8_DOT_PRODUCTS}, **on)
        quantize.int8_dot_products.cache_clear()
        return quantize.int8_dot_products(), quantize.integer_sums_pay()

    try:
        assert answer() == (False, False)  # AVX2 alone: exact, and still not taken
        for name in quantize.INT8_DOT_PRODUCTS:
            assert answer(**{name: True}) == (True, True)
        monkeypatch.setattr(quantize, "integer_sums_exact", lambda: False)  # VNNI but clipped sums: not taken
        assert answer(avx512_vnni=True) == (True, False)

        def unreadable():
            raise RuntimeError("no cpuinfo")

        monkeypatch.setattr(torch.cpu, "get_capabilities", unreadable)
        quantize.int8_dot_products.cache_clear()
        assert not quantize.int8_dot_products()
    finally:
        monkeypatch.undo()
        quantize.int8_dot_products.cache_clear()  # this machine's own answer for the tests after
