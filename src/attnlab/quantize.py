"""Weight-quantised decoding on the CPU: ``model.quantize("int8")``.

Every linear layer (attention projections, feed-forward layers, the output projection)
gets int8 weights, one scale per output row (symmetric), and runs through torch's
dynamically quantised linear kernel (``torch.ops.quantized.linear_dynamic``, FBGEMM /
oneDNN): each call quantises its input rows with one scale per call, multiplies in
integers and returns float32. The inputs take all 8 bits where the kernel sums in 32 bits
(AVX512-VNNI, AMX), 7 bits elsewhere (``reduce_range``: AVX2's 16-bit intermediate sums of
8-bit inputs would saturate); which one is found by one product that saturates a 16-bit
kernel (:func:`full_range_inputs`), not assumed from the CPU's name. 8 bits halve the
inputs' rounding step (on AVX512-VNNI the logits of a 3- and a 6-layer LM moved 1.6-1.7x
less from float32's; docs/results.md). Embeddings, LayerNorms, biases, attention itself and
the softmax stay float32; a tied output projection gets its own int8 copy, the embedding
keeps its float32 table.

Why this kernel: on the development CPU (AMD EPYC, AVX2, no AVX512-VNNI/AMX), one
decode step of a GPT-2-small-shaped decoder (batch 1, one thread) spent 62 ms in its
linear layers in float32, 20 ms with ``linear_dynamic`` and 416 ms with the weight-only
``torch.ops.aten._weight_int8pack_mm`` (which has no fast path there); see
docs/benchmarks.md ("int8 decoding") for how it was measured.

Through a package (``compile="aot"``, :mod:`attnlab.generation.aot`, its weights folded in on
the CPU), a one-row step on a CPU whose int8 kernel sums full-range inputs in 32 bits
multiplies in integers with the eager kernel's own arithmetic (:meth:`Int8Weight.integer_product`:
the input quantised to 8 bits as ``linear_dynamic`` quantises it, oneDNN's int8 product through
``torch._int_mm``), so its logits are the eager step's; on an AVX2 CPU, whose kernel takes 7-bit
inputs, a one-row step multiplies the kernel's 7-bit codes in integers (:meth:`Int8Weight.codes_product`,
in the package build's own integer kernel), its results rounded to bfloat16 as below; other steps
(several rows, int8 weights beyond a quarter of the last-level cache, other CPUs without VNNI) take
inductor's weight-only int8 GEMM instead: the product's
inputs rounded to bfloat16 (8 significant bits, against the dynamic kernel's 8-bit
per-call quantisation of the whole row), the int8 weight read as it is, the sums in float32,
the scaled result stored in bfloat16; no per-call set-up of a oneDNN or FBGEMM kernel, which
dominates a small model's step (the 3-layer, d-256 LM's greedy token 0.92 ms eager, ~0.34 ms
through the package; docs/benchmarks.md). Each row's scale is rounded up to a bfloat16 number
when the weight is quantised, so both roads multiply by exactly the same int8 weight.

The layers are swapped for :class:`QuantizedLinear`, whose ``weight`` is an
:class:`Int8Weight`: a tensor-like object that answers ``F.linear`` (and row slices, which
cross-attention takes of the fused query/key/value weight) through the
``__torch_function__`` protocol. So the one road of decoding (the modules' forward, the
step path's ``F.linear`` on gathered weights, search and sampling) runs quantised without
a second implementation. A quantised model is for decoding only: it cannot be trained or
saved (``save_pretrained`` refuses), and runs on the CPU in float32.

``quantize("bf16")`` instead casts every weight to bfloat16 (the model then computes in
bf16; search and sampling take their softmax in float32), and only where the CPU has native
bf16 products (AVX512-BF16 or AMX, read from ``/proc/cpuinfo``): elsewhere torch emulates
them and bf16 is slower than float32, so it refuses with a message naming the CPU.
"""

from __future__ import annotations

import functools
import os
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.linear import folding, thread_setting, thread_setting_on

QUANTIZE_MODES = ("int8", "bf16")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def fast_bf16_cpu() -> tuple[bool, str]:
    """Whether this CPU multiplies bfloat16 natively (``/proc/cpuinfo`` lists AVX512-BF16 or
    AMX-BF16), and a description for messages. Without them torch emulates bf16 products,
    which is slower than float32, so ``quantize("bf16")`` refuses."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    found = [flag for flag in BF16_CPU_FLAGS if flag in flags]
    capability = torch.backends.cpu.get_cpu_capability()
    return bool(found), f"{capability}" + (f" with {', '.join(found)}" if found else " without AVX512-BF16/AMX")


def check_quantize_mode(mode: str, *, flag: str = "quantize") -> None:
    """Raise ValueError unless ``mode`` is one of :data:`QUANTIZE_MODES`."""
    if mode not in QUANTIZE_MODES:
        raise ValueError(f"{flag}={mode!r} is not a known quantisation; choose one of "
                         f"{', '.join(map(repr, QUANTIZE_MODES))}")


def _probe(check) -> bool:
    """``check()``'s answer; False where it raises (a probe that fails gives the safe answer)."""
    try:
        return bool(check())
    except Exception:  # noqa: BLE001
        return False


@functools.cache
def full_range_inputs() -> bool:
    """Whether this machine's int8 kernel takes inputs quantised to all 8 bits without its
    sums saturating (found once per process). The probe is the worst case for a kernel that
    adds pairs of 8-bit products in 16 bits (AVX2's ``vpmaddubsw``): every input at the top
    code (255) against weights of 127 in every place, at a few shapes, one row and several.
    Such a kernel clips the sums near half their value; one that sums in 32 bits (VNNI's
    ``vpdpbusd``, AMX) gives them within the inputs' rounding (~1/255). Anything else (an
    error, a probe that clips) keeps 7-bit inputs (``reduce_range``), safe everywhere."""
    return _probe(lambda: all(_sums_exact(rows, width) for rows in (1, 8) for width in (64, 1024)))


SMALL_SCALE = float(torch.tensor(6.1e-5, dtype=torch.float32))
"""The smallest input scale torch's dynamic quantisation chooses (``SMALL_SCALE_THRESHOLD``, a
float32 constant): :meth:`Int8Weight.integer_product` follows it."""


SYSFS_CACHES = "/sys/devices/system/cpu/cpu0/cache"


def last_level_cache_bytes(root: str = SYSFS_CACHES) -> int:
    """The size of this CPU's last data cache (the highest level sysfs lists for cpu0), in bytes;
    0 where it cannot be read. This machine's is read once per process."""
    return _this_machines_last_level_cache() if root == SYSFS_CACHES else _read_last_level_cache(root)


@functools.cache
def _this_machines_last_level_cache() -> int:
    return _read_last_level_cache(SYSFS_CACHES)


def _read_last_level_cache(root: str) -> int:
    best = (0, 0)
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return 0
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            with open(os.path.join(root, entry, "level"), encoding="ascii") as f:
                level = int(f.read().strip())
            with open(os.path.join(root, entry, "type"), encoding="ascii") as f:
                kind = f.read().strip()
            with open(os.path.join(root, entry, "size"), encoding="ascii") as f:
                text = f.read().strip().upper()
        except (OSError, ValueError):
            continue
        if kind not in ("Data", "Unified"):
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text[:-1] if text[-1:] in "KMG" else text
        if digits.isdigit():
            best = max(best, (level, int(digits) * unit))
    return best[1]


@functools.cache
def integer_sums_exact() -> bool:
    """Whether ``torch._int_mm`` (oneDNN's int8 product, what :meth:`Int8Weight.integer_product`
    calls) sums this CPU's worst case exactly (found once per process): every code at 127 or
    -128 against weights of 127 or -127. Without VNNI, oneDNN's s8 x s8 product adds pairs of
    8-bit products in 16 bits and clips them (all 127s over 64 columns gave 8,160 for
    1,032,256, oneDNN held to AVX2), so the integer product is taken only where this holds."""
    def exact(code: int, weight: int, width: int) -> bool:
        a = torch.full((1, width), code, dtype=torch.int8)
        b = torch.full((8, width), weight, dtype=torch.int8)
        return bool((torch._int_mm(a, b.t()) == code * weight * width).all())

    return _probe(lambda: all(exact(code, weight, width) for width in (64, 1024)
                              for code, weight in ((127, 127), (-128, -127), (127, -127))))


INT8_DOT_PRODUCTS = ("avx512_vnni", "avx_vnni", "amx_int8")
"""The instructions, as ``torch.cpu.get_capabilities()`` names them, that sum int8 products into 32 bits
(x86's VNNI and AMX), which oneDNN's ``torch._int_mm`` needs to be faster than a float32 product."""


@functools.cache
def int8_dot_products() -> bool:
    """Whether this CPU has any of :data:`INT8_DOT_PRODUCTS` (found once per process). Without them
    ``torch._int_mm`` may sum exactly and still be slow: on an AVX2 EPYC (Zen 3, one thread) one row by
    a 256 x 8,000 int8 matrix took 1,441 us against 272 us for ``F.linear`` on the same shape in float32,
    so a greedy package whose head it screened ran at 0.74x the eager step (docs/benchmarks.md). Elsewhere
    (another architecture, an unknown CPU) the answer is False: the float products, measured everywhere."""
    return _probe(lambda: any(torch.cpu.get_capabilities().get(name, False) for name in INT8_DOT_PRODUCTS))


def integer_sums_pay() -> bool:
    """Whether a product is worth making in integers through ``torch._int_mm`` (the head screen, an
    int8 package's "integer" products): this CPU has int8 dot-product instructions
    (:func:`int8_dot_products`) and ``torch._int_mm`` sums its worst case exactly (:func:`integer_sums_exact`)."""
    return int8_dot_products() and integer_sums_exact()


def integer_products():
    """Within this block (exporting a one-row step for a package with its weights folded in, on a
    CPU where :func:`full_range_inputs`), an int8 product is :meth:`Int8Weight.integer_product`."""
    return thread_setting("int8_integer")


def integer_products_on() -> bool:
    return thread_setting_on("int8_integer")


SEVEN_BIT_TOP = 127
"""The top input code of a CPU whose eager int8 kernel takes 7-bit inputs (``reduce_range``: not
:func:`full_range_inputs`)."""


def code_products():
    """Within this block (exporting a one-row step for a package with its weights folded in, on a
    CPU whose eager kernel takes 7-bit inputs), an int8 product is :meth:`Int8Weight.codes_product`."""
    return thread_setting("int8_codes")


def code_products_on() -> bool:
    return thread_setting_on("int8_codes")


def _sums_exact(rows: int, width: int) -> bool:
    weight = Int8Weight(torch.full((16, width), 127, dtype=torch.int8), torch.ones(16, dtype=torch.float64))
    x = torch.full((rows, width), 255.0)
    x[:, 0] = 0.0  # the input range [0, 255]: scale 1, every other input at code 255
    out = torch.ops.quantized.linear_dynamic(x, weight.packed, False)
    exact = float(x[0].sum()) * 127.0
    return bool(((out - exact).abs() <= 0.01 * exact).all())


def bf16_ceil(values: Tensor) -> Tensor:
    """The smallest bfloat16 numbers >= ``values`` (positive float64), as float64."""
    rounded = values.to(torch.bfloat16).to(torch.float64)
    low = rounded < values
    if low.any():
        bits = values[low].to(torch.bfloat16).view(torch.int16) + 1  # the next bf16 up (positive numbers)
        rounded[low] = bits.view(torch.bfloat16).to(torch.float64)
    return rounded


def _kernels_available() -> bool:
    return hasattr(torch.ops.quantized, "linear_dynamic") and hasattr(torch.ops.quantized, "linear_prepack") \
        and bool(torch.backends.quantized.supported_engines)


def input_codes(rows: Tensor, top: int = 255) -> tuple[Tensor, Tensor, Tensor]:
    """``rows`` (float32) quantised together to 8 bits (``top`` 255, full range) or 7 (``top``
    :data:`SEVEN_BIT_TOP`, ``reduce_range``) as the eager int8 kernel quantises its inputs:
    ``(codes, zero, scale)`` with ``rows ≈ (codes + 128 - zero) · scale``; ``codes`` float32 in
    [-128, top - 128] (shifted to signed by 128), ``zero`` a float64 scalar tensor in [0, top],
    ``scale`` a float32 scalar tensor. One scale and zero point for all rows, chosen as torch's
    ``ChooseQuantizationParams`` chooses them (a scale below :data:`SMALL_SCALE` raised to it, the
    range widened alike). Traceable: an exported step computes it in its own loops."""
    low = rows.amin().clamp(max=0.0)
    high = rows.amax().clamp(min=0.0)
    exact = (high.to(torch.float64) - low.to(torch.float64)) / float(top)
    single = exact.to(torch.float32)
    scale = torch.where((single == 0) | torch.isinf(1.0 / single), 0.1, exact)
    small = scale < SMALL_SCALE
    widened = torch.where(high == 0, -SMALL_SCALE * float(top), low * (SMALL_SCALE / scale.to(torch.float32)))
    low = torch.where(small, widened, low)
    scale = torch.where(small, SMALL_SCALE, scale)
    zero = torch.round(-low.to(torch.float64) / scale).clamp(0, top)
    scale = scale.to(torch.float32)
    codes = (torch.round(rows * (1.0 / scale)) + zero.to(torch.float32)).clamp(0, top) - 128
    return codes, zero, scale


def code_product(codes: Tensor, zero: Tensor, scale: Tensor, values: Tensor, scales: Tensor,
                 row_sums: Tensor) -> Tensor:
    """The float32 products of :func:`input_codes`' ``(codes, zero, scale)`` with int8 ``values``
    ``(out, in)`` whose rows scale by ``scales`` and sum to ``row_sums``: 32-bit integer sums
    (``torch._int_mm``, exact where :func:`integer_sums_exact`), the zero point's shift taken back
    with the rows' sums, then scaled. ``(rows, out)``."""
    sums = torch._int_mm(codes.to(torch.int8), values.t())
    sums = sums - (zero.to(torch.int32) - 128) * row_sums
    return sums.to(torch.float32) * (scale * scales.to(torch.float32))


def quantize_rows(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric per-row int8 codes of a ``(out, in)`` weight: ``(values, scales)``, scale = max |w| / 127
    over the row rounded up to the nearest bfloat16 (float64), ``values`` int8 (the largest code is then
    126.5-127)."""
    weight = weight.detach().to(torch.float32)
    scales = bf16_ceil((weight.abs().amax(dim=1).to(torch.float64) / 127.0).clamp_min(1e-12))
    values = torch.round(weight.to(torch.float64) / scales[:, None]).clamp_(-127, 127).to(torch.int8)
    return values, scales


class Int8Weight:
    """A ``(out, in)`` weight as int8 with one float scale per output row, prepacked for
    ``torch.ops.quantized.linear_dynamic``. Answers ``F.linear(x, weight, bias)`` and row
    slices ``weight[a:b]`` (packed once per slice); has ``shape``, ``dtype`` (the float32 of
    its inputs and outputs) and ``device``. ``dequantize()`` gives the float32 matrix it
    stands for."""

    def __init__(self, values: Tensor, scales: Tensor):
        self.values = values  # (out, in) int8
        self.scales = scales  # (out,) float64, as per-channel quantisation takes them
        # The same scales for a folded package's product (weight-only int8 on bfloat16 inputs):
        # exact where they came from from_float (bf16-representable by construction).
        self.scales_bf16 = scales.to(torch.bfloat16)
        # Each output row's sum of codes, for integer_product's zero-point correction.
        self.row_sums = values.sum(dim=1, dtype=torch.int32)
        self.shape = values.shape
        self.dtype = torch.float32
        self.device = values.device
        with warnings.catch_warnings():  # torch marks quantised tensor creation as deprecated
            warnings.simplefilter("ignore")
            quantized = torch._make_per_channel_quantized_tensor(
                values, scales, torch.zeros(len(scales), dtype=torch.long), 0)
            self.packed = torch.ops.quantized.linear_prepack(quantized, None)
        self._slices: dict[tuple[int, int], Int8Weight] = {}

    @classmethod
    def from_float(cls, weight: Tensor) -> Int8Weight:
        """Symmetric per-row quantisation: scale = max |w| / 127 over the row, rounded up to
        the nearest bfloat16 (so a folded package's bf16 product multiplies by the very same
        scale; the largest code is then 126.5-127)."""
        return cls(*quantize_rows(weight))

    def step_tensors(self) -> tuple[Tensor, Tensor, Tensor]:
        """The tensors :meth:`folded_product` and :meth:`integer_product` read (the int8 values,
        the bf16 scales, the rows' sums): what an exported step must name (generation/aot.py)."""
        return self.values, self.scales_bf16, self.row_sums

    def dequantize(self) -> Tensor:
        return (self.values.to(torch.float64) * self.scales[:, None]).to(torch.float32)

    def dim(self) -> int:
        return 2

    def __getitem__(self, index) -> Int8Weight:
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError(f"an int8 weight can only be sliced by contiguous rows, not {index!r}")
        start, stop, _ = index.indices(self.shape[0])
        key = (start, stop)
        if key not in self._slices:
            self._slices[key] = Int8Weight(self.values[start:stop].contiguous(), self.scales[start:stop].contiguous())
        return self._slices[key]

    def linear(self, x: Tensor, bias: Tensor | None) -> Tensor:
        """``x @ W.T + bias`` with the int8 kernel: ``(..., in)`` -> ``(..., out)``. While a step is
        exported for a package with folded weights (:func:`attnlab.linear.products_for_folding`),
        the package's product instead (:meth:`folded_product`): every road to an int8
        product (the step path, a module's forward, ``F.linear``) comes here."""
        if folding():
            return self.folded_product(x, bias)
        if x.dtype != torch.float32 or x.device.type != "cpu":
            raise ValueError(f"an int8-quantised model runs float32 inputs on the CPU, got {x.dtype} on {x.device}")
        rows = x.reshape(-1, x.shape[-1])
        out = torch.ops.quantized.linear_dynamic(rows if rows.is_contiguous() else rows.contiguous(), self.packed,
                                                 not full_range_inputs())
        if bias is not None:
            out = out.add_(bias)
        return out.view(*x.shape[:-1], self.shape[0])

    @staticmethod
    def step_product(x: Tensor, weight: Int8Weight, bias: Tensor | None) -> Tensor:
        """``F.linear(x, weight, bias)`` without the ``__torch_function__`` detour: the product
        :func:`attnlab.linear.step_linear` gives a decode step for an int8 weight (:meth:`linear`)."""
        return weight.linear(x, bias)

    def folded_product(self, x: Tensor, bias: Tensor | None) -> Tensor:
        """The product an exported step takes: :meth:`integer_product` within
        :func:`integer_products`, :meth:`codes_product` within :func:`code_products`, else
        :meth:`weight_only_product`."""
        if integer_products_on():
            return self.integer_product(x, bias)
        if code_products_on():
            return self.codes_product(x, bias)
        return self.weight_only_product(x, bias)

    def integer_product(self, x: Tensor, bias: Tensor | None) -> Tensor:
        """``x @ W.T + bias`` in integers, with the arithmetic of the eager kernel
        (``linear_dynamic`` with full-range inputs): the inputs quantised together to 8 bits, one
        scale and zero point per call chosen as torch's ``ChooseQuantizationParams`` chooses them
        (a scale below :data:`SMALL_SCALE` raised to it, the range widened alike), multiplied by
        the int8 codes with 32-bit sums (``torch._int_mm``: oneDNN's VNNI kernel for one row, the
        codes shifted to signed by 128 and the shift taken back with the rows' sums), then
        scaled. Exported into a one-row package it was 1.1-2.1x faster per product than the
        weight-only GEMM up to 3,072 x 768, while its weights stay in the cache (docs/benchmarks.md). Only where the eager kernel takes
        full-range inputs (:func:`full_range_inputs`; elsewhere it would differ from it) and
        ``torch._int_mm`` sums exactly and fast (:func:`integer_sums_pay`)."""
        rows = x.reshape(-1, x.shape[-1])
        codes, zero, scale = input_codes(rows)
        out = code_product(codes, zero, scale, self.values, self.scales_bf16, self.row_sums)
        out = out.view(x.shape[:-1] + out.shape[-1:])
        return out if bias is None else out + bias

    def codes_product(self, x: Tensor, bias: Tensor | None) -> Tensor:
        """``x @ W.T + bias`` from the codes the eager kernel takes on a CPU whose kernel takes 7-bit
        inputs (``linear_dynamic`` with ``reduce_range``): the inputs quantised together to 7 bits as
        there (:func:`input_codes` with :data:`SEVEN_BIT_TOP`), less the zero point (integers in
        [-127, 127], exact in bfloat16), multiplied by the int8 codes in the pattern of the weight-only
        product (:meth:`weight_only_product`), whose sums of such integers are exact, then scaled. In a
        one-row package on an AVX2 CPU the product is the build's own integer kernel
        (generation/aot.py, ``_PAIRS``: pairs of codes by pairs of weights in 32-bit sums,
        ``vpmaddwd``). The scaled sums are rounded to bfloat16 as the weight-only product's are (where
        inductor does not keep them in float32), so the result is within that rounding of the eager
        kernel's, not equal to it (docs/benchmarks.md)."""
        codes, zero, scale = input_codes(x.reshape(-1, x.shape[-1]), SEVEN_BIT_TOP)
        signed = (codes + (128.0 - zero.to(torch.float32))).view(x.shape)
        out = self.weight_only_product(signed, None) * scale
        return out if bias is None else out + bias

    def weight_only_product(self, x: Tensor, bias: Tensor | None) -> Tensor:
        """``x @ W.T + bias`` as inductor's weight-only int8 GEMM takes it (its pattern
        ``F.linear(x, W_int8.to(bf16)) * scales``, matched when the weights are folded into a
        package, generation/aot.py): the inputs in bfloat16, the int8 weight read directly, the
        sums in float32, the scaled result stored in bfloat16, then float32 again."""
        rows = x if x.dim() >= 3 else x.unsqueeze(0)  # the pattern is the 3-D one (reshape, mm, reshape)
        out = F.linear(rows.to(torch.bfloat16), self.values.to(torch.bfloat16)) * self.scales_bf16
        out = out.view(x.shape[:-1] + out.shape[-1:]).to(x.dtype)
        return out if bias is None else out + bias

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (F.linear, torch._C._nn.linear):
            x, weight = args[0], args[1]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if isinstance(weight, Int8Weight) and not isinstance(x, Int8Weight):
                return weight.linear(x, bias)
        name = getattr(func, "__name__", repr(func))
        raise TypeError(f"{name} is not supported on an int8-quantised weight (attnlab.quantize: decoding only)")

    def __repr__(self) -> str:
        return f"Int8Weight(shape={tuple(self.shape)})"


class QuantizedLinear(nn.Module):
    """A linear layer with an :class:`Int8Weight` (float32 bias kept)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = Int8Weight.from_float(linear.weight)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        # The int8 weight's tensors, named (not saved: a quantised model is not saved), so that
        # what reads the model's tensors by name (a folded package's checksum and export) sees them.
        self.register_buffer("weight_values", self.weight.values, persistent=False)
        self.register_buffer("weight_scales", self.weight.scales_bf16, persistent=False)
        self.register_buffer("weight_row_sums", self.weight.row_sums, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.weight.linear(x, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


@torch.no_grad()
def quantize_model(model: nn.Module, mode: str = "int8") -> nn.Module:
    """Quantise ``model`` in place and return it in eval mode. "int8": the linear layers (see
    the module doc). "bf16": every weight in bfloat16, only on a CPU that multiplies bf16
    natively (:func:`fast_bf16_cpu`; detected, not assumed).

    Raises ValueError for an unknown ``mode``, a model that is not float32 on the CPU, a
    model already quantised, a torch without the int8 kernels, or bf16 on a CPU without
    native bf16."""
    check_quantize_mode(mode)
    if getattr(model, "quantized", None):
        raise ValueError(f"the model is already quantised ({model.quantized})")
    for name, parameter in model.named_parameters():
        if parameter.device.type != "cpu" or parameter.dtype != torch.float32:
            raise ValueError(f"{mode} quantisation needs a float32 model on the CPU; {name} is {parameter.dtype} on "
                             f"{parameter.device} (load it with --device cpu)")
    if mode == "bf16":
        fast, description = fast_bf16_cpu()
        if not fast:
            raise ValueError(f"quantize='bf16' needs a CPU with native bfloat16 (AVX512-BF16 or AMX); this one is "
                             f"{description}, where bf16 runs slower than float32: use int8")
        model.to(torch.bfloat16)
        model.quantized = mode
        return model.eval()
    if not _kernels_available():
        raise ValueError("this torch build has no quantized int8 linear kernels (torch.ops.quantized.linear_dynamic)")
    targets = [(parent, child_name, child) for parent in model.modules()
               for child_name, child in parent.named_children() if isinstance(child, nn.Linear)]
    if not targets:
        raise ValueError(f"{type(model).__name__} has no linear layers to quantise")
    if any(hasattr(child, "lora_A") for _, _, child in targets):  # its adapters would be dropped silently
        raise ValueError("the model has unmerged LoRA adapters; merge them first (attnlab.training.lora.merge_lora)")
    swapped: dict[int, QuantizedLinear] = {}
    for parent, child_name, child in targets:
        if id(child) not in swapped:  # a module shared by two parents is quantised once
            swapped[id(child)] = QuantizedLinear(child)
        setattr(parent, child_name, swapped[id(child)])
    for module in model.modules():
        # Decode-step plans gathered the float weights; the next step gathers the int8 ones.
        if "_step_plan" in vars(module):
            module._step_plan = None
    model.quantized = mode
    return model.eval()


__all__ = ["Int8Weight", "QUANTIZE_MODES", "QuantizedLinear", "check_quantize_mode", "fast_bf16_cpu",
           "full_range_inputs", "code_products", "int8_dot_products", "integer_products", "integer_sums_exact",
           "integer_sums_pay", "quantize_model"]
