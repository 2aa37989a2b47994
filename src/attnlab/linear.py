"""``Linear``: ``nn.Linear`` that can use MKL's packed GEMM during generation.

Decoding multiplies a few rows (batch × beam) by every weight matrix at every step. For
such skinny products MKL's packed GEMM (weights reordered once into its kernel's layout)
runs about twice as fast as the plain ``addmm`` on our CPUs (see docs/benchmarks.md).
The packed path is opt-in, inside :func:`packed_inference`, which the search functions
use; it needs no gradients, float32 on the CPU, and an MKL build of torch. A module keeps
one packed copy of its weight for one row count, made the second time in a row it sees
that count (so an encoder pass, run once per batch, never pays for packing). On an AMD CPU
with AVX-512 (:func:`onednn_products`), where MKL's sgemm takes its AVX2 kernels, oneDNN's
products take MKL's place (its reordered weight for the packed path, the plain weight otherwise).
Results equal ``F.linear`` up to float32 summation order.
"""

from __future__ import annotations

import contextlib
import functools
import threading

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.weak import WeakIdKeyDictionary


def derived_key(weight: Tensor) -> tuple:
    """The one staleness rule for anything derived from a parameter's values (a packed or
    transposed copy, a package with folded weights): the copy is current while this key is
    unchanged. It changes when the tensor's storage moves (``.to()``, a new ``.data``), its
    dtype or device changes, or its values are written in place: ``load_state_dict``,
    ``copy_`` and in-place ops (the version counter), and any ``torch.optim`` optimizer's
    step (:data:`OPTIMIZER_WRITES`: torch's fused Adam/AdamW, attnlab's default on the CPU
    and GPU, writes parameters without moving their version counters). Writes through
    ``.data`` are not seen (torch counts nothing for them)."""
    return (weight.data_ptr(), weight._version, OPTIMIZER_WRITES.get(weight, 0), weight.dtype, weight.device)


OPTIMIZER_WRITES = WeakIdKeyDictionary()
"""Parameter -> how many ``torch.optim`` optimizer steps have updated it (this process)."""


OPTIMIZER_STEPS = [0]
"""How many ``torch.optim`` optimizer steps this process has taken, of any optimizer (one count): while it
is unchanged, no :data:`OPTIMIZER_WRITES` count has moved."""


def _count_optimizer_writes(optimizer, args, kwargs) -> None:
    OPTIMIZER_STEPS[0] += 1
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            OPTIMIZER_WRITES[parameter] = OPTIMIZER_WRITES.get(parameter, 0) + 1


register_optimizer_step_post_hook(_count_optimizer_writes)


_MKL_PACKED = torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")
_state = threading.local()


@contextlib.contextmanager
def thread_setting(name: str, value: bool = True):
    """This thread's setting ``name`` (read by :func:`thread_setting_on`) is ``value`` within the
    block, then what it was: the one form of the decoding code's per-thread switches."""
    previous = getattr(_state, name, False)
    setattr(_state, name, value)
    try:
        yield
    finally:
        setattr(_state, name, previous)


def thread_setting_on(name: str) -> bool:
    return getattr(_state, name, False)


def packed_inference(enabled: bool = True):
    """Within this block, :class:`Linear` layers may use MKL's packed GEMM (no autograd)."""
    return thread_setting("enabled", enabled and _MKL_PACKED)


def products_for_folding():
    """Within this block (exporting a step for a package whose weights are folded in,
    :mod:`attnlab.generation.aot`), a one-row product is ``F.linear`` like any other: inductor
    prepacks a folded weight of ``F.linear`` into its own GEMM kernels, which ``addmv`` does not
    get (a small LM's step 0.62 ms that way against 2.0 ms; docs/benchmarks.md)."""
    return thread_setting("folding")


def own_product(weight):
    """The product a weight's type brings (``step_product(x, weight, bias)``: an int8 weight,
    :class:`attnlab.quantize.Int8Weight`), or None for a plain tensor."""
    return getattr(type(weight), "step_product", None)


def folding() -> bool:
    """Whether a step is being exported for a package whose weights are folded in
    (:func:`products_for_folding`)."""
    return thread_setting_on("folding")


_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise") \
    and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def cpu_vendor(path: str = "/proc/cpuinfo") -> str:
    """The CPU's vendor string (``vendor_id`` in ``/proc/cpuinfo``: "AuthenticAMD", "GenuineIntel"),
    or "" where it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def onednn_products() -> bool:
    """Whether :class:`Linear` (inside :func:`packed_inference`) and :func:`linear_rows` multiply by
    oneDNN rather than MKL: on an AMD CPU with AVX-512. There MKL's sgemm runs its AVX2 kernels
    (``mkl_blas_def_sgemm_kernel_0_zen`` under ``perf``) and oneDNN its AVX-512 ones: on an AMD EPYC
    (Zen 5), one thread, a product of 14 to 1,056 rows took 1.4-2.3x as long through MKL as through
    oneDNN on the plain weight, and MKL's packed weight gained nothing (docs/benchmarks.md). Elsewhere
    (Intel's CPUs, AVX2 ones) MKL as before: not measured. There, only products of at least
    :data:`ONEDNN_MIN_WORK` multiply-adds (:func:`onednn_worth`)."""
    return _ONEDNN and _amd_avx512()


ONEDNN_MIN_WORK = 1 << 19
"""Where :func:`onednn_products`, the fewest multiply-adds (rows x in x out) a product takes to oneDNN: a call
costs ~10 µs there before any arithmetic, where MKL's smallest take 3-5 µs (one thread, AMD EPYC Zen 5:
8 x 32 -> 96 in 3.0 µs through MKL, 11.8 through oneDNN's reordered weight; 8 x 256 -> 768 in 49.9 against 31.3;
the two met near half a million; docs/benchmarks.md)."""


def onednn_worth(x: Tensor, weight: Tensor) -> bool:
    """Whether ``x @ weight.T`` is work enough for oneDNN where :func:`onednn_products` (else MKL's)."""
    return x.numel() * weight.shape[0] >= ONEDNN_MIN_WORK


@functools.cache
def _amd_avx512() -> bool:
    return torch.backends.cpu.get_cpu_capability() == "AVX512" and cpu_vendor() == "AuthenticAMD"


def _plain_float32(x: Tensor, weight: Tensor) -> bool:
    """What oneDNN's products take here: a plain float32 weight tensor, float32 inputs on the CPU,
    no autograd."""
    return type(weight) in (Tensor, nn.Parameter) and weight.dtype == torch.float32 and x.dtype == torch.float32 \
        and x.device.type == "cpu" and not torch.is_grad_enabled()


def plain_product(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)`` for inference: inside :func:`packed_inference`, for float32 on the
    CPU with two rows or more where :func:`onednn_products`, oneDNN's product on the weight as it is
    (no copy), else ``F.linear``. Equal to ``F.linear`` up to float32 summation order."""
    if not getattr(_state, "enabled", False) or not onednn_products() or x.numel() < 2 * x.shape[-1] \
            or not _plain_float32(x, weight) or not onednn_worth(x, weight) \
            or not weight.is_contiguous() or not x.is_contiguous():
        return F.linear(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


SKINNY_ROWS = (2, 256)  # row counts skinny_linear sends to oneDNN
ONEDNN_COPIES = WeakIdKeyDictionary()
"""weight tensor -> (its key, its reordered copy) for :func:`skinny_linear`. Kept beside the
tensors, not on them: a copy in a tensor's ``__dict__`` travelled with ``copy.deepcopy`` and
``torch.save`` of the model, which cannot copy oneDNN's opaque tensors (both failed after a
beam search). An entry goes with its weight."""


def onednn_rows(rows: int) -> bool:
    """Whether :func:`skinny_linear` sends a product of ``rows`` float32 rows to oneDNN here: 2 to
    256 rows, or any number from 2 where :func:`onednn_products`."""
    return _ONEDNN and getattr(_state, "enabled", False) and SKINNY_ROWS[0] <= rows \
        and (rows <= SKINNY_ROWS[1] or onednn_products())


def skinny_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear`` for a decode step's few rows (the step paths call it on gathered weights).

    Inside :func:`packed_inference`, with 2 to 256 rows of float32 on the CPU and a plain
    weight tensor: oneDNN's matmul on a copy of the weight reordered once into its layout
    (kept per weight tensor in :data:`ONEDNN_COPIES`, renewed when :func:`derived_key` changes). Beam search's
    k or B·k rows are such products: on the development CPU (AMD EPYC, AVX2) one step's
    linear layers at 4 rows took 15.3 ms there against 26.3 ms with ``F.linear``'s MKL
    GEMM (transformer_base's decoder + its 32,000-row head; docs/benchmarks.md); at 128 rows
    (batch 32 x beam 4) oneDNN was 10-35 % faster per product on the AVX512 host of issue 40.
    Where :func:`onednn_products` (MKL's AVX2 kernels on an AMD CPU with AVX-512), any number of
    rows from 2, for a product of :data:`ONEDNN_MIN_WORK` multiply-adds or more. One row (MKL's
    matrix-vector product is faster) and everything else: ``F.linear``. Results equal ``F.linear``'s up
    to float32 summation order."""
    own = own_product(weight)
    if own is not None:  # an int8 weight (attnlab.quantize) brings its own product
        return own(x, weight, bias)
    rows = x.numel() // x.shape[-1]
    if not onednn_rows(rows) or not _plain_float32(x, weight) or (onednn_products() and not onednn_worth(x, weight)):
        return F.linear(x, weight, bias)
    key = (derived_key(weight), weight.shape, weight.stride())
    cached = ONEDNN_COPIES.get(weight)
    if cached is None or cached[0] != key:
        cached = ONEDNN_COPIES[weight] = (key, torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(),
                                                                                       rows))
    return torch.ops.mkldnn._linear_pointwise(x, cached[1], bias, "none", [], "")


class DecodeCaches:
    """Mixin for the modules that keep what decoding derives from their weights in the
    attributes named by ``_decode_caches`` (a step plan, a transposed copy of a weight):
    ``copy.deepcopy`` and pickling (``torch.save`` of a whole model) leave them out, and the
    next decode rebuilds them. So a model copies and saves the same before and after decoding
    (a step plan holds activation functions pickle cannot name, and a copy would travel with
    the weights it was made from)."""

    _decode_caches: tuple[str, ...] = ("_step_plan",)
    _step_plan = None

    def __getstate__(self):
        state = super().__getstate__()
        if any(name in state for name in self._decode_caches):
            state = {key: value for key, value in state.items() if key not in self._decode_caches}
        return state


class Linear(DecodeCaches, nn.Linear):
    """``nn.Linear`` with the opt-in packed inference path described in the module doc."""

    _packed_key = None
    _last_rows = 0
    _decode_caches = ("_packed", "_packed_key")  # a packed weight is opaque: never copied or pickled

    def forward(self, x: Tensor) -> Tensor:
        if not getattr(_state, "enabled", False) or torch.is_grad_enabled() or x.dtype != torch.float32 \
                or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        rows = x.numel() // x.shape[-1]
        previous_rows, self._last_rows = self._last_rows, rows
        weight = self.weight
        # an AMD CPU with AVX-512: oneDNN's products (on a plain float32 weight), its reordered weight
        onednn = onednn_products() and _plain_float32(x, weight) and onednn_worth(x, weight)
        key = (rows, derived_key(weight), onednn)
        if key != self._packed_key:
            if rows != previous_rows or rows < 2:
                return plain_product(x, weight, self.bias)
            self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), rows) if onednn \
                else torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), rows)
            self._packed_key = key
        if onednn:
            return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self._packed, self.bias, "none", [], "")
        out = torch.ops.mkl._mkl_linear(x.reshape(rows, x.shape[-1]), self._packed, weight, self.bias, rows)
        return out.view(*x.shape[:-1], weight.shape[0])


def linear_rows(module: nn.Module, x: Tensor, start: int, stop: int) -> Tensor:
    """``module(x)``'s output features ``start:stop`` only (cross-attention's query rows, or its
    key/value rows, of the joint ``qkv_proj``): :func:`plain_product` on the weight's row slice, or
    the module's own ``forward_rows`` where it has one (a LoRA layer adds its low-rank term,
    :mod:`attnlab.training.lora`)."""
    own = getattr(module, "forward_rows", None)
    if own is not None:
        return own(x, start, stop)
    bias = module.bias
    weight = module.weight[start:stop]
    return (own_product(weight) or plain_product)(x, weight, None if bias is None else bias[start:stop])


def step_weights(module: nn.Module) -> tuple[Tensor, Tensor | None]:
    """The ``(weight, bias)`` a decode step gathers from a linear ``module``: its own, or, where
    it has ``merged_weights()`` (a LoRA layer not yet merged), the weight it effectively
    multiplies by, gathered when the step plan is made (every new decode cache)."""
    own = getattr(module, "merged_weights", None)
    return own() if own is not None else (module.weight, module.bias)


def one_row_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)`` for the decode step, ``x`` ``(B, L, in)``: a single row
    (B = L = 1) as a matrix-vector product (``addmv``; MKL's gemv runs a one-row product
    1.1-1.4x faster than ``addmm``'s gemm on our CPUs, docs/benchmarks.md), more rows by
    :func:`skinny_linear` (oneDNN for beam search's few rows inside :func:`packed_inference`,
    else ``F.linear``). Equal to ``F.linear`` up to float32 summation order. Only for plain
    tensors (:func:`step_linear` chooses)."""
    if x.shape[0] == 1 and x.shape[1] == 1 and not folding():
        row = x.view(-1)
        out = torch.mv(weight, row) if bias is None else torch.addmv(bias, weight, row)
        return out.view(1, 1, -1)
    return skinny_linear(x, weight, bias)


def step_linear(weight: Tensor):
    """The product a decode step uses for ``weight``: :func:`one_row_linear` for a plain
    float32 CPU tensor; for a weight object that brings its own product (a ``step_product(x,
    weight, bias)`` on its type: :class:`attnlab.quantize.Int8Weight`), that product, called
    directly (through ``F.linear``'s ``__torch_function__`` a call costs ~10 µs more; int8
    decoding 1.03-1.12x faster from the small LM to GPT-2 size, docs/benchmarks.md);
    ``F.linear`` otherwise (other devices and dtypes keep their own kernels)."""
    if type(weight) in (Tensor, nn.Parameter) and weight.device.type == "cpu" and weight.dtype == torch.float32:
        return one_row_linear
    return own_product(weight) or F.linear


def merge_low_rank(tensors: dict[str, Tensor], scale: float, *, source: str = "weights") -> dict[str, Tensor]:
    """A state dict with its LoRA adapters folded in: each ``P.lora_A`` ``(r, in)`` /
    ``P.lora_B`` ``(out, r)`` pair becomes ``P.weight + scale · B A`` (in float64, cast back to
    the weight's dtype) and the adapters are dropped; other tensors are kept as they are. How a
    checkpoint of a LoRA run (base weights and adapters, unmerged) opens as a plain model
    (:func:`attnlab.models.registry.load_model`, checkpoint averaging); the module form is
    :func:`attnlab.training.lora.merge_lora`. ValueError naming ``source`` when a pair is incomplete
    or its shapes do not fit."""
    merged = {name: tensor for name, tensor in tensors.items() if not name.endswith((".lora_A", ".lora_B"))}
    for name in tensors:
        if not name.endswith(".lora_A"):
            continue
        prefix = name[: -len(".lora_A")]
        lora_A, lora_B, weight = tensors[name], tensors.get(prefix + ".lora_B"), tensors.get(prefix + ".weight")
        if lora_B is None or weight is None or lora_B.shape != (weight.shape[0], lora_A.shape[0]) \
                or lora_A.shape[1:] != weight.shape[1:] or lora_A.dim() != 2:
            raise ValueError(f"{source}: the LoRA adapter {prefix} has no matching lora_B and weight")
        merged[prefix + ".weight"] = (weight.double() + scale * (lora_B.double() @ lora_A.double())).to(weight.dtype)
    stray = [name for name in tensors if name.endswith(".lora_B") and name[:-1] + "A" not in tensors]
    if stray:
        raise ValueError(f"{source}: {stray[0]!r} has no lora_A")
    return merged
