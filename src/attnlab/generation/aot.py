"""A decode step compiled ahead of time (``torch.export`` + AOTInductor): no Python in the step.

The opt-in ``torch.compile``'d step (:mod:`attnlab.generation.compiled`) still runs dynamo's
guard check before every call (0.1-0.17 ms of a 0.6-0.8 ms step of a small model). Here the
model's own step (the one decoding road, nothing rewritten) over a ``fixed_shape``
:class:`~attnlab.attention.cache.StaticKVCache` is exported once — the cache's tensors
(:meth:`StaticKVCache.step_tensors`: write index, positions, key mask, conditioning, every
layer's keys/values, the cross-attention memory) as plain inputs written in place — and
compiled by AOTInductor into a shared library. A step is then one call of the library's
runner on a list of tensors (``AOTIModelPackageLoader.run``: not ``AOTICompiledModel.__call__``,
whose pytree flattening costs ~0.35 ms a call).

Weights, two ways. **On the CPU they are folded into the package** (inductor's ``freezing``
with ``max_autotune`` and its C++ GEMM templates: each product's weight prepacked into the
layout of GEMM kernels inductor generates and times against oneDNN's, keeping the faster).
That step is 1.3-2.5x the speed of one reading the weights from outside (a small LM's greedy
step 0.62 against 0.86 ms, beam search's at 4 rows 1.47 against 3.63 ms; docs/benchmarks.md),
and its package is a copy of the weights (loaded, each on a 64-byte boundary: :func:`_aligned_runner`): it
is built for the weights' content (SHA-256 of
every parameter and buffer, kept in the manifest) and rebuilt when that changes — in this
process whenever any parameter's or buffer's :func:`~attnlab.linear.derived_key` (storage,
version counter, optimizer steps, dtype) moved since it was loaded, across processes by the
checksum — so a step never runs other weights than the model's (writes through ``.data`` are
the one thing torch does not count, here as for every derived copy). Loaded, the package's
copy of the weights sits in memory beside the model's. A model whose weights change between decodes
(sampling during training) pays a build each time: ``ATTNLAB_AOT_WEIGHTS=outside`` keeps them
outside. **Elsewhere (and with that setting) the weights stay outside**: the runner reads the
model's own tensors (``load_constants(..., user_managed=True)``: their storage, no copy), so an
in-place update (an optimizer step, ``load_state_dict``, ``copy_``) is seen by the next step.
What the step derives from weights (the tied head's transposed copy, cross-attention's query
rows) is named by the wrapper module too; :meth:`AotStep.bind` — called at the start of every
decode — lets the model renew those copies by its own staleness rule
(:func:`attnlab.linear.derived_key`) and hands the runner new storage whenever any tensor's
storage moved, so a step never reads a stale copy.

One package per (model structure, dtype, device, layout, batch bucket, torch version, CPU
capability, weights folded or not), keyed by a hash of all of them (weights' names, shapes and
dtypes, not their values), in the user cache (``$ATTNLAB_CACHE/aot``, default ``~/.cache/attnlab/aot``):
``<key>.pt2`` and its manifest ``<key>.json`` (what was built, the package's SHA-256); a folded
package is one per set of weights too, ``<key>-<weights>.pt2`` (the first hex digits of their SHA-256:
a model and the models fine-tuned from it each decode through their own), at most :data:`FOLDED_KEPT`
per structure (a build past them removes the least recently used). The
cache capacity is a dynamic dimension (one package for every length) unless the pattern has
a window (then the capacity is part of the key); beam search's rows and source length are
dynamic too (sources × beam), in two packages: one for at most :data:`FEW_ROWS` rows (one
source's beams, a small batch), whose products are all in inductor's C++ templates
(:data:`FEW_ROWS_CONFIGS`), and one for any number (:data:`FOLDED_CONFIGS`; on an AVX2 CPU
:data:`MANY_ROWS_AVX2_CONFIGS`, oneDNN's products alone). A search package returns the step's
log-probabilities (:func:`log_softmax_fused`), a beam search's (beam > 1) each source's 2·beam best
continuations (:func:`candidates_fused`: it takes the beams' scores too), any other the logits.
Building takes 25-140 s on a small CPU (one progress line); ``attnlab compile --model DIR`` builds ahead of time.

Safety: a manifest that does not match what is asked (another structure, dtype, torch version),
a package whose checksum does not match its manifest (corrupt, truncated) or a missing package
is rebuilt, never run; a file at either name that attnlab did not write (no attnlab manifest) is
never replaced: decoding then runs eagerly and says why. Builds of one package are serialised by
an ``flock`` on ``.<key>.lock``; the package is written under a temporary directory
(``.<key>.tmp-PID/``, removed by the next build once that process is gone), its manifest (with
the checksum) written atomically, and only then renamed into place. The step is exported here
and compiled in a child process (:func:`_compile_package`, the exported program saved into that
temporary directory, the caller's thread count passed on): a crash in torch's kernels while
inductor tunes ends the child (one warning, the eager step), not the caller. A file system
without room for the saved step and the package (:func:`_check_room`) is said before either is
written. Loading a package loads native code, so the cache directory must be as trusted as the
Python environment (it is the user's own, like torch's inductor cache). Where CUDA is available
a package is first loaded in a child process: a loader that crashes there costs one warning and
the eager step, not the process; the verdict is kept in the manifest per machine, Python, torch
and CUDA. A C++ compiler with no shared libstdc++ (the GPU image's ``$CXX``) links a copy of
libstdc++ into the package, whose runtime then crashes beside torch's (a segmentation fault
there for every package, ``std::bad_cast`` here): :func:`package_compiler` builds with another
compiler on PATH, with one line saying so, or says what to set.

int8 weights (``model.quantize("int8")``): the eager step's ``torch.ops.quantized`` prepacked
weights are opaque objects export cannot name, so an exported step multiplies by the int8
tensors themselves, and an int8 model gets a package with its weights folded in, never one
reading them from outside. Which product (:func:`_int8_products`, part of the package's
structure): a one-row step on a CPU whose int8 kernel takes full-range inputs multiplies in
integers as the eager kernel does (:meth:`attnlab.quantize.Int8Weight.integer_product`,
``torch._int_mm``, an ATen call: built with :data:`FOLDED_CONFIGS`), so its logits are the eager
step's; a one-row step on an AVX2 CPU whose kernel takes 7-bit inputs multiplies the eager kernel's
7-bit codes (:meth:`~attnlab.quantize.Int8Weight.codes_product`) in the build's own integer kernel
(:data:`_PAIRS`), exact sums whose scaled results are rounded to bfloat16 as the weight-only product's
(so its logits are within that rounding of the eager step's, not equal); any other step takes the pattern
of inductor's weight-only int8 GEMM
(:meth:`~attnlab.quantize.Int8Weight.weight_only_product`: bfloat16 inputs, float32 sums), which
inductor lowers only for weights it holds, tuned among its C++ templates alone
(:data:`FEW_ROWS_CONFIGS`; timing ATen's ``_weight_int8pack_mm`` while tuning killed the process
with a segmentation fault for an Image Transformer's two-row step), and decoded eagerly where no
template takes a product.

Without a C++ compiler (:func:`attnlab.generation.compiled.unavailable_reason`), when export
or compilation fails, or when the model's step reads something that cannot be exported
(int8 weights kept outside), decoding falls back to the eager step with one warning saying why.

``compile="auto"`` (the decoding verbs' default, :func:`auto_step`): on the CPU, the package where one is
already built for the model and layout, loaded before the caller makes its cache; else the eager step on the
default cache. It never builds, and where none is built it writes and says nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from attnlab.attention.cache import StaticKVCache
from attnlab.attention.masks import key_padding_mask
from attnlab.files import atomic_write_json, fsync_path, read_json_object, remove_stale_temporaries, sha256_file
from attnlab.generation import compiled as _compiled
from attnlab.generation import sgemm
from attnlab.generation.candidates import CHUNK, beam_and_token, search_candidates
from attnlab.linear import OPTIMIZER_STEPS, derived_key, own_product, packed_inference, products_for_folding
from attnlab.quantize import (code_products, full_range_inputs, integer_products, integer_sums_pay,
                              last_level_cache_bytes)

__all__ = ["AotNotBuilt", "AotStep", "AotUnavailable", "Layout", "aot_capacity", "aot_encode", "aot_step",
           "auto_step", "cache_directory", "dynamic_capacity", "candidates_fused", "encoder_package", "exp_polynomial",
           "log_softmax_fused", "package_key", "use_aot"]

FORMAT = 5
"""Bumped whenever what a package takes or returns changes, or packages built before could be
wrong or much slower (part of every key). 2: built past a compiler with no shared libstdc++
(:func:`package_compiler`); a package of format 1 may carry its own libstdc++ and crash its
loader, so none is reused. 3: built with grad off, so inductor freezes the folded weights
(format 2's child-process builds did not: plain products, see ``_BUILD``), and a folded step's
one-query self-attention exported as sums inductor fuses (``attention.core._one_query``). 4: a
search package returns log-probabilities (:func:`log_softmax_fused`), not logits. (A beam search's
package returns candidates since 2026-12-06: its structure's layout has ``candidates``, a new key, so
no other package is rebuilt; so has a greedy package with its head screened, ``greedy``, since.) 5: every
constant under a name of its own (``_UNIQUE_NAMES``), so a folded package's weights can be re-homed on
cache lines when it is loaded (:func:`_aligned_runner`; a package of format 4 could not be, and ran its
products up to 1.5x slower)."""
OUTSIDE_CONFIGS = {"aot_inductor.package_constants_in_so": False}
FOLDED_CONFIGS = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}
FEW_ROWS_CONFIGS = {**FOLDED_CONFIGS, "max_autotune_gemm_backends": "CPP"}
"""A folded search package for at most FEW_ROWS rows: every product in inductor's C++ GEMM
templates, none through oneDNN's per-call primitive set-up (multi30k shape, 4 rows: 1.109 ->
0.972 ms a step; at 128 rows the templates, tuned for a few rows, were 1.7x slower: 20.3 ->
35.1 ms, so a search of more rows keeps FOLDED_CONFIGS). Where no template fits, FOLDED_CONFIGS."""
MANY_ROWS_AVX2_CONFIGS = {**FOLDED_CONFIGS, "max_autotune_gemm_backends": "ATEN"}
"""A folded search package for any number of rows on an AVX2 CPU: every product oneDNN's (prepacked),
none in a C++ template. Tuning among both, inductor took its template for the feed-forward's first
product (with its activation fused) at 128 rows, which ran slower in the step than oneDNN's: on an AVX2
EPYC (Zen 3), one thread, multi30k shape, 32 sources, the step 34.5 -> 32.5 ms, a whole beam search 6.6 %
faster (docs/benchmarks.md). Not measured on an AVX-512 CPU, where FOLDED_CONFIGS stays. Its step is exported
with its activations apart (:data:`ACTIVATIONS_APART`)."""


def _gelu_apart(x: Tensor, approximate: str = "none") -> Tensor:
    if approximate == "tanh":
        return x * (0.5 * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * (x * x * x)))))
    return x * (0.5 * (1.0 + torch.erf(x * 0.7071067811865476)))


ACTIVATIONS_APART = {torch.ops.aten.silu.default: lambda x: x * torch.sigmoid(x),
                     torch.ops.aten.gelu.default: _gelu_apart}
"""The decompositions a package of oneDNN's products (:data:`MANY_ROWS_AVX2_CONFIGS`) is exported with: SiLU
and GELU written so that inductor does not fuse them into the product before them (its patterns match
``x / (exp(-x) + 1)`` and ``x * 0.5 * (1 + erf(...))`` right after a product) and computes them in a loop of
its own. Fused, oneDNN applies them in its AVX2 product's epilogue, slower than the product itself: on a Zen 3
EPYC, one thread, 128 rows, 256 -> 1,024 with SiLU fused 1,481 us against 911 + 182 apart; 512 -> 2,048 with
GELU 6,011 against 4,023 (docs/benchmarks.md). Within float rounding of the eager step's ATen kernels."""
FEW_ROWS = 16
WEIGHTS_SETTING = "ATTNLAB_AOT_WEIGHTS"  # "outside": never fold the weights into a package
MANIFEST_BYTES = 1 << 16
MIN_CAPACITY = 2  # export specialises sizes 0 and 1


class AotUnavailable(RuntimeError):
    """Why a step cannot be compiled ahead of time here (the caller decodes eagerly)."""


class AotNotBuilt(AotUnavailable):
    """``compile="auto"`` (:func:`auto_step`): no package of this step is built (no manifest for its key, or
    one for another structure); nothing is built then, and nothing said: the caller decodes eagerly."""


def cache_directory() -> Path:
    """Where packages live: ``$ATTNLAB_CACHE/aot``, else ``$XDG_CACHE_HOME/attnlab/aot``,
    else ``~/.cache/attnlab/aot``."""
    root = os.environ.get("ATTNLAB_CACHE")
    if root:
        return Path(root).expanduser() / "aot"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "attnlab" / "aot"


# --------------------------------------------------------------------------------------- #
# What is exported: the model's step over a cache given as plain tensors
# --------------------------------------------------------------------------------------- #
@dataclass(frozen=True)
class Layout:
    """How a model family's step is called and which of its sizes vary.

    ``kind``: "causal" (``model.step(tokens, cache)``: language models, music, text-to-image),
    "image" (the Image Transformer: the same call, a conditioning slot in the cache, a fixed
    capacity) or "search" (``model.decode_step(tokens, cache, memory_mask)``: an
    encoder–decoder's step over one memory row per source, ``beam`` rows per source).
    ``batch``: the rows of a causal/image step (fixed); ``beam``: rows per source of a search
    step (its sources, source length and capacity vary); ``capacity``: a fixed capacity (a
    pattern with a window, the image sequence), None when it varies; ``max_rows``: a search
    package for at most this many rows (:data:`FEW_ROWS`, built with :data:`FEW_ROWS_CONFIGS`),
    None for any number; ``candidates``: a beam search's package (``beam`` > 1) takes the beams'
    scores too and returns each source's ``candidates`` (2·beam) best continuations
    (:func:`~attnlab.generation.candidates.search_candidates`) instead of the log-probabilities.
    ``greedy``: a causal step for greedy decoding, its head screened in int8 (the model's
    ``greedy_step``, :mod:`attnlab.head_screen`): it returns ``(next_tokens, sure, hidden)``.
    "encode" (``batch`` 1): not a step but a search's encoding of one source (:func:`aot_encode`)."""

    kind: str
    batch: int | None = None
    beam: int | None = None
    capacity: int | None = None
    max_rows: int | None = None
    candidates: int | None = None
    greedy: bool = False


class _StepModule(nn.Module):
    """The exported module: the model's own step on a cache rebuilt over its inputs.

    ``model`` is a submodule (its parameters and buffers are named ``model.<name>``); the
    tensors the step derives from weights are registered as buffers ``derived_<i>`` (the same
    tensor objects the step reads), so the package names every tensor it reads."""

    def __init__(self, model, layout: Layout, derived: list[Tensor], num_layers: int, conditioning: bool,
                 cross_attention: bool, screen: tuple[Tensor, ...] = ()):
        super().__init__()
        self.model = model
        for i, tensor in enumerate(derived):
            self.register_buffer(f"derived_{i}", tensor, persistent=False)
        for i, tensor in enumerate(screen):  # a greedy step's head screen (attnlab.head_screen)
            self.register_buffer(f"screen_{i}", tensor, persistent=False)
        self.layout = layout
        self.shape = dict(num_layers=num_layers, conditioning=conditioning, cross_attention=cross_attention)
        # The step's own code without its @torch.inference_mode() wrapper (export traces it).
        step = "decode_step" if layout.kind == "search" else "greedy_step" if layout.greedy else "step"
        self._step = inspect.unwrap(getattr(type(model), step))

    def forward(self, tokens: Tensor, state: list[Tensor], memory_mask: Tensor | None = None,
                beam_scores: Tensor | None = None):
        cache = StaticKVCache.over_step_tensors(state, **self.shape)
        if self.layout.kind == "search":  # the searches' log-probabilities, in the package's own loops
            logits = self._step(self.model, tokens, cache, memory_mask).float()
            if self.layout.candidates:
                return candidates_fused(logits, beam_scores, self.layout.beam, self.layout.candidates)
            return log_softmax_fused(logits)
        return self._step(self.model, tokens, cache)


class _EncodeModule(nn.Module):
    """The exported module of an "encode" package: the Transformer's encoder over one source without
    padding (its stack unmasked, as a mask of real tokens alone leaves it) and, for each of its decoder's
    cross-attention layers, the keys and values of that memory (``decoder.memory_keys_values``: what a
    search's cache holds). ``model`` is a submodule (its tensors named ``model.<name>``, as a step's)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor) -> list[Tensor]:
        encoder = self.model.encoder
        x = encoder.embed_tokens(ids, torch.arange(ids.shape[1], device=ids.device), checked=False)
        memory = encoder.stack(x)[0]
        return [memory, *self.model.decoder.memory_keys_values(memory)]


_EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                   5.0000001201e-1)
_LN2_HIGH, _LN2_LOW, _LOG2_E = 0.693359375, -2.12194440e-4, 1.44269504088896341


def exp_polynomial(x: Tensor) -> Tensor:
    """``exp(x)`` of float32 ``x <= 0`` (below -87: ~1e-38, not 0) as torch's elementary operations:
    Cephes' ``expf`` (Moshier), ``x = n·ln 2 + r``, a degree-7 polynomial in ``r`` times ``2ⁿ`` made
    from its exponent bits. Within 7.8e-8 of float64's ``exp`` relatively on [-87, 0] (torch's own:
    6.2e-8; tests/generation/test_aot.py asks for 4e-7); exported, inductor compiles it into
    its loops as a few vector instructions, where ``torch.exp`` is a call of Sleef's ``expf`` for
    every eight elements."""
    x = x.clamp(min=-87.0)
    n = torch.floor(x * _LOG2_E + 0.5)
    r = x - n * _LN2_HIGH - n * _LN2_LOW
    p = _EXP_POLYNOMIAL[0]
    for c in _EXP_POLYNOMIAL[1:]:
        p = p * r + c
    p = p * (r * r) + r + 1.0
    return p * ((n.to(torch.int32) + 127) * (1 << 23)).view(torch.float32)


def log_softmax_fused(logits: Tensor) -> Tensor:
    """``torch.log_softmax(logits, -1)`` of float32 ``logits`` (its values within float rounding; -inf
    stays -inf) as a search package computes it, fused after its output product: the sum of
    exponentials through :func:`exp_polynomial`. On an AVX2 EPYC, one thread, 128 rows of 8,001
    (multi30k shape, beam 4 over 32 sources; medians of 9 interleaved) the step with its
    log-probabilities took 33.9 ms where the package's logits and ``torch.log_softmax`` after it took
    36.3, and ``torch.log_softmax`` exported into the package 36.0 (docs/benchmarks.md)."""
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    return shifted - torch.log(exp_polynomial(shifted).sum(dim=-1, keepdim=True))


def derived_tensors(model, own: set[int] | None = None) -> list[Tensor]:
    """The tensors a decode step reads that are neither parameters nor buffers: what the step
    plans gathered (cross-attention's query rows, detached slices) and the head's transposed
    copy, in module order (the same order for the same structure). The model makes them
    current first: ``new_cache`` / ``new_static_cache`` renew them by their staleness rule.
    ``own``: the ids of the model's parameters and buffers, where the caller has them."""
    if own is None:
        own = {id(t) for t in model.parameters()} | {id(t) for t in model.buffers()}
    found: list[Tensor] = []
    seen: set[int] = set()
    for module in model.modules():
        # (the names are the class's; the values an instance's own attributes, unset: None)
        for name in _derived_names(type(module)):
            for t in _plan_tensors(vars(module).get(name)):
                if id(t) not in own and id(t) not in seen:
                    seen.add(id(t))
                    found.append(t)
    return found


_DERIVED_NAMES: dict[type, tuple[str, ...]] = {}


def _derived_names(kind: type) -> tuple[str, ...]:
    """The attributes of a module class that hold what a decode step derives (its ``_decode_caches``),
    less Linear's packed weight (the step path does not read it) and the head's screen (only a greedy
    step does, which names it apart: screen_<i>, aot_step); kept per class."""
    names = _DERIVED_NAMES.get(kind)
    if names is None:
        names = _DERIVED_NAMES[kind] = tuple(name for name in getattr(kind, "_decode_caches", ())
                                             if name not in ("_packed", "_greedy_screen"))
    return names


def _plan_tensors(value, found: list[Tensor] | None = None) -> list[Tensor]:
    """The tensors in ``value`` (a step plan, a derived copy, an int8 weight's ``step_tensors``), in order,
    appended to ``found`` (returned). A list, not a generator: a look-up (:func:`_lookup_state`) walks every
    plan of the model, ~400 values a multi30k-shaped model, and a generator's frame per value cost ~60 µs."""
    if found is None:
        found = []
    if isinstance(value, Tensor):
        found.append(value)
    elif type(value) is tuple or type(value) is list:
        for item in value:  # (the plain values and tensors most items are, told by their exact type)
            kind = type(item)
            if kind is Tensor or kind is nn.Parameter:
                found.append(item)
            elif kind not in _NO_TENSOR_TYPES:
                _plan_tensors(item, found)
    elif not isinstance(value, _NO_TENSORS) and callable(getattr(value, "step_tensors", None)):
        _plan_tensors(value.step_tensors(), found)
    return found


_NO_TENSORS = (type(None), bool, int, float, str, torch.Size, nn.Module)
"""What a step plan holds that :func:`_plan_tensors` passes over: no tensors of its own (a module's are
its parameters and buffers, and its own plan, each read where a walk of the modules meets it)."""
_NO_TENSOR_TYPES = frozenset(kind for kind in _NO_TENSORS if kind is not nn.Module)  # exact types, no subclasses


def folds_weights(device: torch.device) -> bool:
    """Whether a package for a model on ``device`` holds its weights (folded, prepacked): on the
    CPU unless ``$ATTNLAB_AOT_WEIGHTS`` is "outside" ("folded" or unset: the default)."""
    setting = os.environ.get(WEIGHTS_SETTING, "").strip().lower()
    if setting not in ("", "folded", "outside"):
        raise AotUnavailable(f"${WEIGHTS_SETTING}={os.environ[WEIGHTS_SETTING]!r} is neither 'folded' nor 'outside'")
    return device.type == "cpu" and setting != "outside"


def _step_tensors(model, derived: list[Tensor] | None = None) -> list[tuple[str, Tensor]]:
    """Every tensor a package reads, under the name the exported module gives it: the model's
    parameters and buffers (``model.<name>``, the tensor objects themselves) and the step's
    derived tensors (``derived_<i>``: the head's transposed copy, a LoRA layer's merged weight).
    A folded package holds exactly these (named as ``named_parameters`` / ``named_buffers`` with
    ``remove_duplicate=False`` name them, from one walk of the modules: an ``aot_step`` of a small
    translation model took 0.82 ms, most of it walking its 99 modules six times)."""
    parameters, buffers = [], []
    for prefix, module in model.named_modules(remove_duplicate=False):
        dot = f"model.{prefix}." if prefix else "model."
        parameters += [(dot + name, t) for name, t in module._parameters.items() if t is not None]
        buffers += [(dot + name, t) for name, t in module._buffers.items() if t is not None]
    if derived is None:
        derived = derived_tensors(model, own={id(t) for _, t in parameters} | {id(t) for _, t in buffers})
    return parameters + buffers + [(f"derived_{i}", t) for i, t in enumerate(derived)]


def weights_snapshot(model, tensors: list[tuple[str, Tensor]] | None = None) -> tuple:
    """The :func:`~attnlab.linear.derived_key` (storage, version counter, optimizer steps,
    dtype, device) of every tensor a folded package holds: unchanged while none was replaced or
    written in place (a derived copy the model renews is a new tensor)."""
    # A derived copy made under inference_mode has no version counter: its storage names it
    # (the model makes a new tensor when it renews one).
    return tuple((name, (t.data_ptr(), tuple(t.shape), t.dtype, t.device) if t.is_inference() else derived_key(t))
                 for name, t in (_step_tensors(model) if tensors is None else tensors))


def weights_digest(model, tensors: list[tuple[str, Tensor]] | None = None) -> str:
    """SHA-256 of the name, dtype, shape and values of every tensor a folded package holds: what
    it was built from."""
    digest = hashlib.sha256()
    for name, t in (_step_tensors(model) if tensors is None else tensors):
        digest.update(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
        digest.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def _structure(model, layout: Layout, device: torch.device, dtype: torch.dtype,
               step_tensors: list[tuple[str, Tensor]], folded: bool = False, int8: str | None = None) -> dict:
    """Everything a package depends on, as JSON: its key is this dict's hash. ``int8``: an int8
    model's products (:func:`_int8_products`)."""
    tensors = [[name, list(t.shape), str(t.dtype)] for name, t in step_tensors]
    config = model.config.to_dict() if hasattr(model.config, "to_dict") else repr(model.config)
    capability = torch.backends.cpu.get_cpu_capability()
    # AVX2: one-row products may take ONE_ROW_BLOCKING / ONE_ROW_INT8_BLOCKING (packages built before are rebuilt)
    blockings = {"one_row_blocking": [list(ONE_ROW_BLOCKING), list(ONE_ROW_INT8_BLOCKING)]} \
        if capability == "AVX2" else {}
    products = _many_row_products(layout, folded, int8, capability)
    pairs = {"pairs_kernel": _PAIRS_KEY} if int8 == "codes" else {}
    return {**({"int8_products": int8} if int8 else {}), **pairs, **blockings,
            **({"products": products, "activations": "apart"} if products else {}), "format": FORMAT,
            "model": f"{type(model).__module__}.{type(model).__qualname__}",
            "config": config, "layout": _layout_key(layout), "device": device.type, "dtype": str(dtype),
            "weights": "folded" if folded else "outside",
            "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
            "cpu_capability": capability,
            "gpu": (torch.cuda.get_device_name(device), list(torch.cuda.get_device_capability(device)))
            if device.type == "cuda" else None, "tensors": tensors}


def _layout_key(layout: Layout) -> dict:
    """The layout as the structure has it: without ``candidates`` where it is None and ``greedy``
    where it is False, so that packages built before those fields (which return what they
    returned) keep their keys; a beam search's package, which returns candidates since, and a
    greedy one have new ones."""
    return {name: value for name, value in layout.__dict__.items()
            if not (name == "candidates" and value is None) and not (name == "greedy" and not value)}


def _many_row_products(layout: Layout, folded: bool, int8: str | None, capability: str) -> str | None:
    """For a folded float search package of any number of rows on an AVX2 CPU (built with
    :data:`MANY_ROWS_AVX2_CONFIGS`): "sgemm" where :func:`attnlab.generation.sgemm.wanted` (its products
    oneDNN's ``dnnl_sgemm``), else "oneDNN"; None for any other package (the build's configs as before)."""
    many_rows = layout.kind == "search" and layout.batch is None and layout.max_rows is None
    if not (many_rows and folded and not int8 and capability == "AVX2"):
        return None
    return "sgemm" if sgemm.wanted() else "oneDNN"


def package_key(structure: dict) -> str:
    """The hash naming a package: SHA-256 of its structure (the first 32 hex digits)."""
    text = json.dumps(structure, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def candidates_fused(logits: Tensor, beam_scores: Tensor, beam: int, m: int) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`~attnlab.generation.candidates.search_candidates` of ``log_softmax(logits)`` (a row per
    hypothesis) as a beam search package computes it, without the log-probabilities: the shift a
    row's scores have over its logits (its beam's score minus its log-sum-exp,
    :func:`log_softmax_fused`'s sums) is one number, so the chunks (of ``CHUNK`` positions of a row)
    with the largest shifted maxima are found from each chunk's largest logit, and only their
    elements and each row's last ``V mod CHUNK`` are scored.
    Every loop runs along a row, which inductor vectorises (chunks over a source's flattened k·V
    scores cross rows, and finding each element's row was an integer division per element)."""
    rows, vocab = logits.shape
    sources, m = rows // beam, min(m, beam * vocab)
    chunks, tail = vocab // CHUNK, vocab % CHUNK
    row_max = logits.amax(dim=-1, keepdim=True)
    shift = beam_scores.view(rows, 1) - (row_max + torch.log(exp_polynomial(logits - row_max).sum(-1, keepdim=True)))
    if beam * chunks < 16 * m:  # short rows: every score, as the eager search scores them
        return search_candidates(logits, shift.view(-1), beam, m)
    body = logits.narrow(1, 0, chunks * CHUNK).view(rows, chunks, CHUNK)
    best = (body.amax(dim=2) + shift).view(sources, beam * chunks).topk(m, dim=1).indices  # (B, m): beam·chunks + c
    chunk_row = torch.div(best, chunks, rounding_mode="floor")  # the hypothesis within its source
    row = chunk_row + beam * torch.arange(sources, device=logits.device).view(sources, 1)  # (B, m) rows of logits
    start = (best - chunk_row * chunks) * CHUNK  # (B, m) first position of the chunk
    position = start.unsqueeze(2) + torch.arange(CHUNK, device=logits.device)  # (B, m, CHUNK)
    flat = (row.unsqueeze(2) * vocab + position).view(sources, m * CHUNK)
    scores = logits.view(-1).index_select(0, flat.view(-1)).view(sources, m * CHUNK) \
        + shift.view(-1).index_select(0, row.view(-1)).view(sources, m, 1).expand(sources, m, CHUNK).reshape(
            sources, m * CHUNK)
    if tail:  # each row's last positions, always candidates
        tail_flat = (torch.arange(rows, device=logits.device).view(rows, 1) * vocab + chunks * CHUNK
                     + torch.arange(tail, device=logits.device)).view(sources, beam * tail)
        scores = torch.cat([scores, (logits.narrow(1, chunks * CHUNK, tail) + shift).view(sources, beam * tail)], 1)
        flat = torch.cat([flat, tail_flat], 1)
    values, picked = scores.topk(m, dim=1)
    index = flat.gather(1, picked) - beam * vocab * torch.arange(sources, device=logits.device).view(sources, 1)
    return (values, *beam_and_token(index, vocab))


def _example_inputs(model, layout: Layout, cache: StaticKVCache, memory_mask: Tensor | None):
    """Example inputs for export (zeros shaped like ``cache``'s step tensors, every dynamic
    size at least 2: export would specialise a size of 1) and their dynamic shapes."""
    state = cache.step_tensors()
    num_layers = len(cache.layers)
    Dim = torch.export.Dim
    limit = getattr(getattr(model, "config", None), "max_positions", None) or (1 << 20)
    capacity = None if layout.capacity is not None else Dim("capacity", min=MIN_CAPACITY, max=max(limit, 8))
    sizes = {3: max(state[2].shape[3], MIN_CAPACITY)} if capacity is not None else {}

    def like(t: Tensor, changes: dict[int, int]) -> Tensor:
        shape = [changes.get(dim, size) for dim, size in enumerate(t.shape)]
        return torch.ones(shape, dtype=t.dtype, device=t.device) if t.dtype == torch.bool else t.new_zeros(shape)

    if layout.kind == "search":
        memory = cache.layers[0].cross_attn.k
        if memory_mask is None:
            memory_mask = torch.ones(memory.shape[0], 1, 1, memory.shape[2], dtype=torch.bool, device=memory.device)
        source_length = Dim("source_length", min=MIN_CAPACITY, max=1 << 20)
        length = max(memory.shape[2], MIN_CAPACITY)
        if layout.batch == 1:  # one row: a fixed batch (the step's one-row products)
            rows_dim = sources = None
            n_rows, n_sources = 1, 1
        else:
            most = (layout.max_rows // layout.beam) if layout.max_rows else 1 << 16
            sources = Dim("sources", min=1 if layout.beam > 1 else MIN_CAPACITY, max=max(most, 2))
            rows_dim = layout.beam * sources if layout.beam > 1 else sources
            n_sources = max(memory.shape[0], MIN_CAPACITY)
            n_rows = layout.beam * n_sources
        rows_change = {0: n_rows} if rows_dim is not None else {}
        example = [like(state[0], {}), like(state[1], rows_change), like(state[2], {**rows_change, **sizes})]
        example += [like(kv, {**({1: n_rows} if rows_dim is not None else {}), **sizes}) for kv in state[3:3 + num_layers]]
        example += [like(m, {0: n_sources, 2: length}) for m in state[3 + num_layers:]]
        tokens = torch.zeros(n_rows, dtype=torch.long, device=memory.device)
        mask = like(memory_mask, {0: n_sources, 3: length})
        row = None if rows_dim is None else {0: rows_dim}
        shapes = [None, row, {**(row or {}), **({3: capacity} if capacity is not None else {})}]
        shapes += [{**({1: rows_dim} if rows_dim is not None else {}), **({3: capacity} if capacity is not None
                                                                            else {})}] * num_layers
        shapes += [{**({0: sources} if sources is not None else {}), 2: source_length}] * (2 * num_layers)
        mask_shape = {**({0: sources} if sources is not None else {}), 3: source_length}
        if layout.candidates:  # the beams' scores, a row each
            scores = torch.zeros(n_rows, dtype=torch.float32, device=memory.device)
            return (tokens, example, mask, scores), (row, shapes, mask_shape, row)
        return (tokens, example, mask), (row, shapes, mask_shape)
    first = 4 if cache.conditioning is not None else 3
    dynamic = None if capacity is None else {3: capacity}
    example = [like(t, sizes if i == 2 or i >= first else {}) for i, t in enumerate(state)]
    shapes = [None, None, dynamic] + [None] * (first - 3) + [dynamic] * num_layers
    tokens = torch.zeros(state[1].shape[0], dtype=torch.long, device=state[0].device)
    return (tokens, example), (None, shapes)


# --------------------------------------------------------------------------------------- #
# The package on disk
# --------------------------------------------------------------------------------------- #
class _Paths:
    def __init__(self, directory: Path, key: str):
        self.directory = directory
        self.package = directory / f"{key}.pt2"
        self.manifest = directory / f"{key}.json"
        self.lock = directory / f".{key}.lock"


def _check_directory(directory: Path) -> None:
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise AotUnavailable(f"the package cache {directory} is not a directory attnlab can write "
                             "(set $ATTNLAB_CACHE to another place)")
    directory.mkdir(parents=True, exist_ok=True)


def _read_manifest(paths: _Paths) -> dict | None:
    """The manifest attnlab wrote for this key, or None when there is none. A file there
    that is not an attnlab manifest is refused (it is not ours to replace)."""
    if not paths.manifest.exists() and not paths.manifest.is_symlink():
        if paths.package.exists() or paths.package.is_symlink():
            raise AotUnavailable(f"{paths.package} exists but attnlab did not write it (it has no manifest "
                                 f"{paths.manifest.name}); it is left alone: remove it, or set $ATTNLAB_CACHE "
                                 "to another directory")
        return None
    try:
        if paths.manifest.is_symlink():
            raise ValueError("a symlink")
        manifest = read_json_object(paths.manifest, max_bytes=MANIFEST_BYTES, what="an attnlab package manifest")
    except (OSError, ValueError) as error:
        raise AotUnavailable(f"{paths.manifest} is not an attnlab package manifest ({error}); it is left "
                             "alone: remove it, or set $ATTNLAB_CACHE to another directory") from None
    if manifest.get("written_by") != "attnlab":
        raise AotUnavailable(f"{paths.manifest} was not written by attnlab; it is left alone: remove it, or set "
                             "$ATTNLAB_CACHE to another directory")
    return manifest


def _valid(paths: _Paths, manifest: dict | None, structure: dict, weights: str | None = None,
           files: bool = True) -> str | None:
    """None when the package may be loaded; otherwise why it must be rebuilt. ``weights``: the
    digest of the weights a folded package must hold (None: weights outside). ``files=False``:
    the manifest alone (no package file read)."""
    if manifest is None:
        return "no package yet"
    if manifest.get("structure") != json.loads(json.dumps(structure, default=str)):
        return "its manifest describes another model structure, dtype or torch version"
    if weights is not None and manifest.get("weights_sha256") != weights:
        return "it holds other weights than the model's"
    if not files:
        return None
    if paths.package.is_symlink() or not paths.package.is_file():
        return "the package file is missing"
    if paths.package.stat().st_size != manifest.get("bytes"):
        return "the package file has the wrong size (truncated?)"
    if sha256_file(paths.package) != manifest.get("sha256"):
        return "the package file does not match its checksum (corrupt)"
    return None


@contextlib.contextmanager
def _build_lock(paths: _Paths):
    """An exclusive ``flock`` on the key's lock file for the whole check-and-build, so
    concurrent builds of one package wait for each other instead of writing it twice."""
    import fcntl

    if paths.lock.is_symlink():
        raise AotUnavailable(f"{paths.lock} is a symlink; attnlab writes its lock file itself")
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock; the empty lock file stays (deleting it would race a waiter)


def _build(module: nn.Module, example, dynamic_shapes, structure: dict, paths: _Paths, *, quiet: bool,
           weights: str | None = None, few_rows: bool = False, int8: str | None = None,
           what: str = "the decode step") -> None:
    reason = _compiled.unavailable_reason()
    if reason is not None:
        raise AotUnavailable(reason)
    compiler = package_compiler(quiet=quiet)
    shim = _sgemm_library(structure, compiler)  # (a package of dnnl_sgemm products: its library, before the work)
    start = time.perf_counter()
    if not quiet:
        once = "model structure and set of weights" if weights is not None else "model structure"
        print(f"attnlab: compiling {what} ahead of time (AOTInductor; about 25-140 s, once per {once}) "
              f"into {paths.package}", file=sys.stderr, flush=True)
    workspace = paths.directory / f".{paths.package.stem}.tmp-{os.getpid()}"
    workspace.mkdir()
    temporary = workspace / paths.package.name  # the package's own name: its archive is named after it
    try:
        # Plain products in the graph: oneDNN's reordered weights (packed_inference, beam
        # search) are opaque objects export cannot name. Folded, every product is F.linear
        # (one row too), which inductor prepacks into its own GEMM kernels.
        with torch.no_grad(), packed_inference(False), warnings.catch_warnings(), \
                (products_for_folding() if weights is not None else contextlib.nullcontext()), \
                {"integer": integer_products, "codes": code_products}.get(int8, contextlib.nullcontext)():
            warnings.simplefilter("ignore")
            try:
                exported = torch.export.export(module, example, dynamic_shapes=dynamic_shapes, strict=True)
            except Exception as error:
                raise AotUnavailable(f"torch.export failed ({type(error).__name__}: {_first_line(error)})") from error
            constants = exported.graph_signature.inputs_to_lifted_tensor_constants
            if constants:  # a tensor the package would not read from the model: could go stale
                raise AotUnavailable(f"the step reads tensors that are not the model's parameters or buffers "
                                     f"({', '.join(sorted(constants.values())[:3])})")
            if structure.get("activations") == "apart":
                try:
                    exported = exported.run_decompositions({**ACTIVATIONS_APART,
                                                            **(sgemm.decompositions() if shim else {})})
                except Exception as error:
                    raise AotUnavailable(f"torch.export failed to write the activations apart ({type(error).__name__}: "
                                         f"{_first_line(error)})") from error
            _check_room(paths.directory, exported, folded=weights is not None)
            try:
                saved = workspace / "exported-step.pt2"
                torch.export.save(exported, saved)
                # int8 in integers: its torch._int_mm is ATen's alone (FOLDED_CONFIGS); int8 as
                # weight-only products: never ATen's _weight_int8pack_mm among the choices
                # (timing it while tuning killed the process: a segmentation fault in its bf16
                # kernel, an Image Transformer's 2-row step, torch 2.13)
                configs = OUTSIDE_CONFIGS if weights is None else FOLDED_CONFIGS if int8 == "integer" \
                    else FEW_ROWS_CONFIGS if few_rows or int8 \
                    else MANY_ROWS_AVX2_CONFIGS if structure.get("products") in ("oneDNN", "sgemm") else FOLDED_CONFIGS
                chosen = {"cpp.cxx": (None, compiler)} if compiler else {}
                if shim:  # (the build process loads the library and names its C function: _BUILD_TAIL)
                    chosen[SGEMM_CONFIG] = str(shim)
                try:
                    _compile_package(saved, temporary, {**configs, **chosen}, pairs=int8 == "codes")
                except Exception:
                    if configs is not FEW_ROWS_CONFIGS or int8:
                        raise
                    # A product no C++ template takes: oneDNN's among the choices again.
                    _compile_package(saved, temporary, {**FOLDED_CONFIGS, **chosen})
            except Exception as error:
                raise AotUnavailable(f"AOTInductor failed ({type(error).__name__}: {_first_line(error)})") from error
        size = temporary.stat().st_size
        with open(temporary, "rb") as f:
            os.fsync(f.fileno())
        # The manifest first (it claims the name for attnlab), then the package: a reader
        # sees a complete package with its manifest, or a manifest without a package
        # (rebuilt), never a package it cannot check.
        atomic_write_json(paths.manifest, {"written_by": "attnlab", "sha256": sha256_file(temporary), "bytes": size,
                                           "built_seconds": round(time.perf_counter() - start, 1),
                                           "structure": structure, "weights_sha256": weights})
        os.replace(temporary, paths.package)
        fsync_path(paths.directory)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    if not quiet:
        print(f"attnlab: compiled in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


BUILD_SPARE = 64 << 20  # bytes a build leaves free beyond its files' estimate


def _check_room(directory: Path, exported, *, folded: bool) -> None:
    """Raise :class:`AotUnavailable` unless ``directory``'s file system has room for a build: the
    saved exported step holds every weight, and a folded package another copy (prepacked; a tied
    table twice), so about three times the weights' bytes, plus :data:`BUILD_SPARE`."""
    weights = sum(t.numel() * t.element_size() for t in [*exported.state_dict.values(), *exported.constants.values()]
                  if isinstance(t, Tensor))
    needed = weights * (3 if folded else 1) + BUILD_SPARE
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise AotUnavailable(f"the package cache {directory} has {free / 2**20:.0f} MiB free and a build needs about "
                             f"{needed / 2**20:.0f} MiB (the exported step and the package each hold the weights): "
                             "free some space, or set $ATTNLAB_CACHE to another place")


BUILD_SECONDS = 3600  # a build process that runs longer is stopped
ONE_ROW_BLOCKING = (1, 64, 1)
ONE_ROW_INT8_BLOCKING = (1, 64, 128)
"""Register blockings (rows, columns, depth) every build offers inductor's C++ GEMM template for a
product of one fixed row on an AVX2 CPU, beside inductor's own: ONE_ROW_BLOCKING for float32 (its own:
4 x 24, 4 x 16, 8 x 8), ONE_ROW_INT8_BLOCKING for the weight-only int8 product (its own for few rows:
2 x 16 x 64, 4 x 16 x 64; taken where the columns and depth divide by it, as inductor's are). At one row,
inductor's blockings sum each column into one chain of FMAs, 2-3 chains that each wait for the last
FMA's result, where 8 chains (8 vectors of 8 columns) keep both FMA units busy. On an AVX2 EPYC (Zen 3),
one thread: the 8,000 x 256 float32 head in a package of its own 180 -> 136 us a call; greedy packages
(``benchmarks/aot_configs.py --blocking [--int8]``): the small LM's float32 step 1.19x as fast, the
medium's 1.03x, GPT-2 small's unchanged; int8: small 1.36x, medium 1.26x (docs/benchmarks.md). Offered through
inductor's own registry of blockings; a torch whose internals differ builds as before."""
_ONE_ROW = (
    "try:\n"
    "    import torch._inductor.select_algorithm, torch._inductor.codegen.cpp_gemm_template\n"
    "    from torch._inductor.codegen import cpp_micro_gemm as micro\n"
    "    from torch._inductor.cpu_vec_isa import VecAVX2\n"
    "    def one_row(config, m, n, k, alpha, num_threads, **more):\n"
    "        return m == 1 and more.get('dynamic_M') is False\n"
    "    def one_row_dividing(config, m, n, k, alpha, num_threads, **more):\n"
    "        block = config.register_blocking\n"
    "        return one_row(config, m, n, k, alpha, num_threads, **more) and n % block.block_n == 0 \\\n"
    "            and k % block.block_k == 0\n"
    "    micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec] += micro.generate_gemm_config(\n"
    f"        VecAVX2, [{ONE_ROW_BLOCKING}], input_dtype=torch.float, extra_check=one_row)\n"
    "    micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec] += micro.generate_gemm_config(\n"
    f"        VecAVX2, [{ONE_ROW_INT8_BLOCKING}], input_dtype=torch.bfloat16, input2_dtype=torch.int8,\n"
    "        output_dtype=torch.float, compute_dtype=torch.float, extra_check=one_row_dividing)\n"
    "except Exception as error:\n"
    "    print(f'attnlab: no one-row blockings here ({type(error).__name__}: {error})', file=sys.stderr)\n")
# Under no_grad: inductor freezes (folds and prepacks the weights: its "freezing") only with
# grad off, and without it every product of a many-row package was a plain addmm (MKL packing
# its weight at every call; multi30k shape, 128 rows: 26.2 against 23.0 ms a step).
_UNIQUE_NAMES = (
    "try:\n"
    "    from torch._inductor.graph import GraphLowering\n"
    "    _allocate = GraphLowering.allocate_non_dup_const_name\n"
    "    def _unique_name(self, name, data):\n"
    "        new = _allocate(self, name, data)\n"
    "        named = self.allocated_constant_name\n"
    "        if new in named and sum(value == named[new] for value in named.values()) > 1:\n"
    "            named[new] = new\n"
    "        return new\n"
    "    GraphLowering.allocate_non_dup_const_name = _unique_name\n"
    "except Exception as error:\n"
    "    print(f'attnlab: constants keep their names ({type(error).__name__}: {error})', file=sys.stderr)\n")
"""Every constant of a package under a name of its own: inductor names two prepacked weights made by
one freezing pass "constant45" and "constant45_0" and gives both the original name "constant45", under
which :func:`_aligned_runner` could read only one of them back."""
_PAIRS = r'''try:
    import torch._inductor.select_algorithm, torch._inductor.codegen.cpp_gemm_template
    from torch._inductor.codegen import cpp_micro_gemm as micro
    from torch._inductor.codegen.common import KernelTemplate
    from torch._inductor.cpu_vec_isa import VecAVX2

    class _SevenBitPairs(micro.CppMicroGemm):
        """One row of integer inputs (bf16, |value| <= 32767; a 7-bit code less its zero point)
        by int8 weights packed in pairs of rows (VNNI2): each pair of inputs against each pair of
        weights sign-extended to 16 bits, summed into 32 bits by vpmaddwd, exactly."""

        TEMPLATE_KERNEL = r"""
template <bool accum>
inline void {{kernel_name}}_pairs(
    const {{input_t}}* {{restrict_keyword}} A,
    const int8_t* {{restrict_keyword}} B,
    float* {{restrict_keyword}} C,
    int64_t K,
    int64_t ldb
) {
    // The inputs as pairs of 16-bit integers, once (each: bf16 -> float -> int32, two packed in 32 bits).
    alignas(32) int32_t pairs[{{block_k}} / 2 + 8];
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(A + k)));
        const __m256i values = _mm256_cvttps_epi32(_mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(values, values), 0x08);
        _mm_store_si128(reinterpret_cast<__m128i*>(pairs + k / 2), _mm256_castsi256_si128(packed));
    }
    for (; k < K; k += 2) {
        pairs[k / 2] = (static_cast<int32_t>(static_cast<float>(A[k])) & 0xffff)
            | (static_cast<int32_t>(static_cast<float>(A[k + 1])) * 65536);
    }
    // Two passes of 32 columns: 4 sums, 4 weights and the pair stay in registers (8 sums spilled one).
    for (int half = 0; half < 2; ++half) {
        __m256i acc[4];
        for (int c = 0; c < 4; ++c) acc[c] = _mm256_setzero_si256();
        const int8_t* row = B + half * 64;
        for (int64_t p = 0; p < K / 2; ++p, row += 2 * ldb) {
            const __m256i pair = _mm256_set1_epi32(pairs[p]);
            for (int c = 0; c < 4; ++c) {
                const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c * 16)));
                acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(pair, w));
            }
        }
        float* out = C + half * 32;
        for (int c = 0; c < 4; ++c) {
            __m256 sums = _mm256_cvtepi32_ps(acc[c]);
            if constexpr (accum) {
                sums = _mm256_add_ps(sums, _mm256_loadu_ps(out + c * 8));
            }
            _mm256_storeu_ps(out + c * 8, sums);
        }
    }
}
"""

        TEMPLATE_ENTRY = r"""
{{declare_kernel}} {
{%- if pack_vnni_B_locally %}
    // Weights the template does not block ahead (never a folded package's): B in its own layout.
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
            int64_t sum = 0;
            for (int64_t k = 0; k < K; ++k) {
                sum += static_cast<int64_t>(static_cast<float>(A[m * lda + k])) * B[k * ldb + n];
            }
            C[m * ldc + n] = accum ? C[m * ldc + n] + static_cast<float>(sum) : static_cast<float>(sum);
        }
    }
{%- else %}
    // Blocked weights: whole blocks of {{block_n}} columns (the template pads the last), at most {{block_k}} deep.
    {{kernel.assert_function}}(N % {{block_n}} == 0 && K % 2 == 0 && K <= {{block_k}}, "integer pairs: block");
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; n += {{block_n}}) {
            {{kernel_name}}_pairs<accum>(A + m * lda, B + n * 2, C + m * ldc + n, K, ldb);
        }
    }
{%- endif %}
}
"""

        def codegen_define(self, kernel):
            options = {"declare_kernel": self.get_kernel_declaration(), "kernel": kernel,
                       "block_n": self.register_blocking.block_n, "block_k": self.register_blocking.block_k,
                       **self.get_common_options()}
            return "".join(KernelTemplate._template_from_string(text).render(options)
                           for text in (self.TEMPLATE_KERNEL, self.TEMPLATE_ENTRY))

        def get_b_layout(self):
            return micro.LayoutType.NORMAL if self.pack_vnni_B_locally else micro.LayoutType.VNNI2

    def _one_row_pairs(config, m, n, k, alpha, num_threads, **more):
        return m == 1 and more.get("dynamic_M") is False and k % 2 == 0 and alpha == 1

    _configs = micro.generate_gemm_config(VecAVX2, [(1, 64, 128)], input_dtype=torch.bfloat16,
                                          input2_dtype=torch.int8, output_dtype=torch.float,
                                          compute_dtype=torch.float, extra_check=_one_row_pairs)
    for _kind, _listed in list(micro.micro_gemm_configs.items()):
        micro.micro_gemm_configs[_kind] = [c for c in _listed if not (
            c.vec_isa_cls is VecAVX2 and c.input_dtype == torch.bfloat16 and c.input2_dtype == torch.int8)]
    micro.micro_gemm_configs[_SevenBitPairs] = _configs
except Exception as error:
    print(f"attnlab: no integer pairs kernel here ({type(error).__name__}: {error})", file=sys.stderr)
'''
"""An int8 package's products in integers on an AVX2 CPU (int8 products "codes", :func:`_int8_products`):
the build child registers this micro-kernel for inductor's C++ GEMM template, in place of its own for
bfloat16 inputs by int8 weights, for a product of one fixed row whose depth is even. The step's inputs
are then integers (:meth:`attnlab.quantize.Int8Weight.codes_product`: 7-bit codes less their zero point),
so pairs of them by pairs of weights (the weights packed in pairs of rows, VNNI2) sum exactly into 32 bits
with ``vpmaddwd``: 16 products an instruction, where the float kernel converts every weight to float
and makes 8 (docs/benchmarks.md, "int8 in integers on an AVX2 CPU")."""
_PAIRS_KEY = hashlib.sha256(_PAIRS.encode()).hexdigest()[:16]  # in a "codes" package's structure
_BUILD_HEAD = "import json, sys, torch\n" + _ONE_ROW + _UNIQUE_NAMES
SGEMM_CONFIG = "attnlab.sgemm"  # in the build's configs: the shim library (attnlab.generation.sgemm) to load
_BUILD_TAIL = ("torch.set_num_threads(int(sys.argv[3]))\n"
          "configs = {k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(sys.argv[4]).items()}\n"
          f"shim = configs.pop({SGEMM_CONFIG!r}, None)\n"
          "if shim:\n"
          "    import ctypes, os\n"
          "    ctypes.CDLL(shim, mode=os.RTLD_NOW | os.RTLD_GLOBAL)\n"
          "    from attnlab.generation.sgemm import c_shims\n"
          "    configs['aot_inductor.custom_ops_to_c_shims'] = c_shims()\n"
          "with torch.no_grad():\n"
          "    torch._inductor.aoti_compile_and_package(torch.export.load(sys.argv[1]), package_path=sys.argv[2], "
          "inductor_configs=configs)\n")
_BUILD = _BUILD_HEAD + _BUILD_TAIL


def _compile_package(exported: Path, package: Path, configs: dict, pairs: bool = False) -> None:
    """AOTInductor's build of the saved exported step (``torch.export.save``) into ``package``,
    in a child process: a crash in torch's own kernels while inductor tunes (a segmentation fault
    in ATen's int8 kernel killed the decoding process before, docs/benchmarks.md) ends that
    process, not the caller's, and ``max_autotune``'s timings go to its captured stderr. It runs
    with this process's thread count, which inductor compiles into the kernels. Raises
    RuntimeError with the child's last line, or the signal that killed it. ``pairs``: with the
    integer micro-kernel :data:`_PAIRS` in place of inductor's for bfloat16 by int8."""
    code = _BUILD_HEAD + _PAIRS + _BUILD_TAIL if pairs else _BUILD
    command = [sys.executable, "-c", code, str(exported), str(package), str(torch.get_num_threads()),
               json.dumps(configs)]
    try:
        result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=BUILD_SECONDS)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the build process took more than {BUILD_SECONDS} s") from None
    except OSError as error:
        raise RuntimeError(f"the build process could not start ({error})") from None
    if result.returncode != 0:
        raise RuntimeError(_exit_reason(result.returncode, result.stderr, "the build process"))


# --------------------------------------------------------------------------------------- #
# The C++ compiler a package is linked with
# --------------------------------------------------------------------------------------- #
_SHARED_LIBSTDCXX: dict[str, bool | None] = {}
_SAID: set[tuple[str, str]] = set()  # compiler replacements said (once a process)


def _print_file_name(compiler: str, name: str) -> str:
    try:
        result = subprocess.run([compiler, f"-print-file-name={name}"], stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def shared_libstdcxx(compiler: str) -> bool | None:
    """Whether ``compiler`` links its C++ runtime as a shared library: gcc and clang answer
    ``-print-file-name=libstdc++.so`` with the library's path, or with the bare name when they
    have none (then ``-lstdc++`` takes the static archive). A clang whose runtime is libc++ may
    have no libstdc++ at all: a shared ``libc++.so`` counts too. None when it does not say."""
    if compiler not in _SHARED_LIBSTDCXX:
        answer = _print_file_name(compiler, "libstdc++.so")
        if os.path.isabs(answer):
            verdict = True
        elif answer == "libstdc++.so":  # none, unless its runtime is a shared libc++
            verdict = os.path.isabs(_print_file_name(compiler, "libc++.so"))
        else:
            verdict = None
        _SHARED_LIBSTDCXX[compiler] = verdict
    return _SHARED_LIBSTDCXX[compiler]


def _inductor_compiler() -> str | None:
    """The compiler inductor would run ($CXX, else g++), as a path; None when none is found."""
    from torch._inductor import config

    named = [name for name in config.cpp.cxx if name] if isinstance(config.cpp.cxx, (list, tuple)) \
        else [config.cpp.cxx]
    return next((found for found in map(shutil.which, named) if found), None)


def package_compiler(quiet: bool = False) -> str | None:
    """The C++ compiler to build a package with, where inductor's own choice would not do
    (None: inductor's choice). A compiler with no shared libstdc++ (the GPU image of
    2026-11-27/28: ``CXX=/opt/gcc/bin/g++``, whose lib directory holds only ``libstdc++.a``)
    links a copy of libstdc++ into the package; its ``std::locale`` is not the one torch's
    libstdc++ made, so the package's runtime dies building its first ``std::regex`` (a
    segmentation fault there, ``std::bad_cast`` on this CPU machine; see docs/benchmarks.md).
    Then another compiler on PATH that has one is used, with one line saying so, or
    :class:`AotUnavailable` says what to set."""
    if not sys.platform.startswith("linux"):
        return None
    compiler = _inductor_compiler()
    if compiler is None or shared_libstdcxx(compiler) is not False:
        return None
    for name in ("g++", "c++", "clang++"):
        other = shutil.which(name)
        if other and os.path.realpath(other) != os.path.realpath(compiler) and shared_libstdcxx(other):
            if not quiet and (compiler, other) not in _SAID:
                _SAID.add((compiler, other))
                print(f"attnlab: the C++ compiler {compiler} has no shared libstdc++ (a package it links would "
                      f"carry its own copy, which crashes beside torch's); building with {other}",
                      file=sys.stderr, flush=True)
            return other
    raise AotUnavailable(f"the C++ compiler {compiler} has no shared libstdc++ (libstdc++.so), so a package it links "
                         "would carry its own copy, which crashes beside torch's, and no other compiler on PATH has "
                         "one: set $CXX to one that does")


# --------------------------------------------------------------------------------------- #
# Loading a package first in a child process, where the loader has been seen to crash
# --------------------------------------------------------------------------------------- #
LOAD_CHECK_SECONDS = 180
LOAD_CHECKS_KEPT = 16  # verdicts per manifest (one per machine and environment)
_LOAD_CHECK = ("import sys, torch; torch._C._aoti.AOTIModelPackageLoader(sys.argv[1], 'model', False, 1, -1)"
               ".get_constant_fqns()")


def _load_check_needed() -> bool:
    """Whether a package is loaded in a child process before this one loads it: where CUDA is
    available. On the GPU image lent in 2026-11 AOTInductor's runtime died with a segmentation
    fault for every package it built, CPU ones included: its $CXX linked libstdc++ statically
    (:func:`package_compiler` now builds with another compiler there). GPU machines are the
    environments least tried here, and a crash cannot be caught in the process that crashes."""
    return torch.cuda.is_available()


def _environment() -> str:
    return (f"{platform.node()} | Python {platform.python_version()} | torch {torch.__version__} | "
            f"CUDA {'available' if torch.cuda.is_available() else 'unavailable'}")


def _check_command(package: Path, shim: Path | None = None) -> list[str]:
    """The load check's command; ``shim``: the library a package of ``dnnl_sgemm`` products calls, loaded first."""
    if shim is None:
        return [sys.executable, "-c", _LOAD_CHECK, str(package)]
    return [sys.executable, "-c", f"import ctypes, os; ctypes.CDLL({str(shim)!r}, mode=os.RTLD_NOW | os.RTLD_GLOBAL)"
            f"; {_LOAD_CHECK}", str(package)]


def _exit_reason(returncode: int, stderr: bytes, what: str = "the test process") -> str:
    if returncode < 0:
        try:
            return f"{what} was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"{what} was killed by signal {-returncode}"
    lines = stderr.decode(errors="replace").strip().splitlines()
    return f"{what} exited with status {returncode}" + (f": {lines[-1][:200]}" if lines else "")


def _check_loads(paths: _Paths, shim: Path | None = None) -> None:
    """Raise :class:`AotUnavailable` unless the package loads in a child process on this
    machine. The verdict is kept in the manifest per environment (machine, Python, torch,
    CUDA), so it is paid once; called under the key's build lock."""
    manifest = _read_manifest(paths)
    if manifest is None:
        raise AotUnavailable(f"the package {paths.package.name} lost its manifest while it was being checked")
    checked = manifest.get("loads") if isinstance(manifest.get("loads"), dict) else {}
    environment = _environment()
    verdict = checked.get(environment)
    if verdict is None:
        try:
            result = subprocess.run(_check_command(paths.package, shim), stdin=subprocess.DEVNULL, capture_output=True,
                                    timeout=LOAD_CHECK_SECONDS)
            verdict = "ok" if result.returncode == 0 else _exit_reason(result.returncode, result.stderr)
        except subprocess.TimeoutExpired:
            verdict = f"the test process took more than {LOAD_CHECK_SECONDS} s"
        except OSError as error:
            verdict = f"the test process could not start ({error})"
        kept = dict(list(checked.items())[-(LOAD_CHECKS_KEPT - 1):])
        atomic_write_json(paths.manifest, {**manifest, "loads": {**kept, environment: verdict}})
    if verdict != "ok":
        raise AotUnavailable(f"loading the package {paths.package.name} failed in a test process on this machine "
                             f"({verdict}; {environment}), so it is not loaded here")


def _sgemm_library(structure: dict, compiler: str | None = None) -> Path | None:
    """For a package of ``dnnl_sgemm`` products (``structure["products"] == "sgemm"``): the shim library it
    calls, loaded into this process (:func:`attnlab.generation.sgemm.load`, built once into the cache
    directory with ``compiler``, else the packages' own, looked for only then); else None. Raises
    :class:`AotUnavailable` where it cannot be built or loaded."""
    if structure.get("products") != "sgemm":
        return None
    try:
        return sgemm.load(cache_directory(), compiler or (lambda: package_compiler(quiet=True) or _inductor_compiler()))
    except sgemm.Unavailable as error:
        raise AotUnavailable(f"oneDNN's sgemm for the package's products: {error} (${sgemm.SETTING}=off "
                             "builds it with torch's own products)") from None


def _remove_leftovers(paths: _Paths) -> None:
    """Delete what killed builds of this key left (``.<key>.tmp-PID/`` of a process that no
    longer exists; called under the key's lock)."""
    remove_stale_temporaries(paths.directory, f".{paths.package.stem}.tmp-*")


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:200]


# --------------------------------------------------------------------------------------- #
# The runner
# --------------------------------------------------------------------------------------- #
class AotStep:
    """A loaded package: ``logits = step(tokens, cache)`` (or ``log_probs = step(tokens, cache,
    memory_mask)`` for a search layout: :func:`log_softmax_fused` of the logits; ``scores, beams,
    tokens = step(tokens, cache, memory_mask, beam_scores)`` for a beam search's,
    :func:`~attnlab.generation.candidates.search_candidates`) on a
    ``fixed_shape`` cache of the model it was bound to by :meth:`bind`. Moves the host's count of
    positions after each call (the package moves the device cursor)."""

    def __init__(self, path: Path, layout: Layout, names: list[str], key: str, *, weights: tuple | None = None):
        self.path, self.layout, self.key = path, layout, key
        self.weights = weights  # folded: the weights_snapshot of the model it was loaded for
        # A folded package's weights re-homed on 64-byte boundaries (_aligned_runner), else the loader's
        aligned = _aligned_runner(path) if weights is not None else None
        if aligned is not None:
            self._loader, self._aligned = aligned
        else:
            self._loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)
            self._aligned: dict[str, Tensor] = {}
        self._names = names
        if weights is None:
            expected = set(self._loader.get_constant_fqns())
            missing = sorted(expected - set(names))
            if missing:
                raise AotUnavailable(f"the package {path.name} reads tensors the model does not have ({missing[0]})")
        self._bound: tuple = ()
        self._constants: dict[str, Tensor] = {}
        self._run = self._loader.run
        self._all_real: Tensor | None = None  # the search's memory mask when no position is padding

    def bind(self, model) -> None:
        """Point the package at ``model``'s current tensors (call before each decode: cheap
        when nothing moved). The derived copies are renewed by the model first. A package with
        folded weights reads none (:func:`aot_step` loads or builds another when the weights moved)."""
        if self.weights is not None:
            return
        tensors = _named_tensors(model)
        wanted = set(self._loader.get_constant_fqns()) if not self._constants else set(self._constants)
        constants = {name: tensors[name] for name in wanted}
        bound = tuple((name, t.data_ptr(), tuple(t.shape), t.dtype) for name, t in sorted(constants.items()))
        if bound != self._bound:
            self._loader.load_constants(constants, False, True, True)  # user_managed: the model's storage
            self._constants, self._bound = constants, bound

    def accepts(self, cache: StaticKVCache) -> bool:
        """Whether a cache of this many rows and memory positions fits the package (a search
        package for several rows takes at least 2 per step and 2 memory positions)."""
        if self.layout.kind != "search":
            return True
        rows = cache.positions.shape[0]
        memory = cache.layers[0].cross_attn.k
        if memory.shape[2] < MIN_CAPACITY:
            return False
        if self.layout.batch == 1:
            return rows == 1
        return MIN_CAPACITY <= rows <= (self.layout.max_rows or rows)

    def run(self, inputs: list[Tensor]) -> list[Tensor]:
        """The package's outputs for ``inputs`` as it takes them (an "encode" package: ``[ids]``)."""
        return self._run(inputs)

    def __call__(self, tokens: Tensor, cache: StaticKVCache, memory_mask: Tensor | None = None,
                 beam_scores: Tensor | None = None):
        # The runner reads the tokens (and the mask) as laid out contiguously: a column of a
        # (rows, T) tensor (tokens[:, t]) was read as its first row's tokens (no-op when contiguous).
        inputs = [tokens.contiguous(), *cache.step_tensors()]
        if self.layout.kind == "search":
            if memory_mask is None:  # every memory position real: one all-True mask per shape, kept
                memory = cache.layers[0].cross_attn.k
                shape = (memory.shape[0], 1, 1, memory.shape[2])
                memory_mask = self._all_real
                if memory_mask is None or memory_mask.shape != shape or memory_mask.device != memory.device:
                    memory_mask = self._all_real = torch.ones(shape, dtype=torch.bool, device=memory.device)
            inputs.append(memory_mask.contiguous())
            if self.layout.candidates:  # a beam search's package also takes the hypotheses' scores
                inputs.append(beam_scores.contiguous())
        outputs = self._run(inputs)
        cache.count_replayed(1)
        # a beam search's package: (scores, beams, tokens); a greedy one's (next_tokens, sure, hidden);
        # else the logits (a search's: log-probabilities)
        return tuple(outputs) if self.layout.candidates or self.layout.greedy else outputs[0]


ALIGNMENT = 64
"""Bytes a re-homed weight starts on: a cache line, one AVX-512 vector."""


def _aligned_runner(path: Path):
    """A runner of the folded package at ``path`` whose weights start on :data:`ALIGNMENT` bytes, and
    those weights (kept by the caller: the runner reads their storage), or None where that cannot
    be done (then the package loader, as before).

    AOTInductor copies a package's weights into one ``malloc``'d block at offsets of multiples of 64
    bytes from its start, and glibc's ``malloc`` returns a large block 16 bytes past a page: every
    weight then starts 16 bytes past a cache line, and each 64-byte load of a product's weights
    touches two cache lines. Here the package's library is opened by a runner of its own, the weights
    are copied into one block of torch's allocator in the order they lay, each on 64 bytes
    (:func:`_aligned_copies`), the runner is pointed at those (``user_managed``: their storage) and its
    own block is freed, so the weights sit in memory once. Measured on a Zen 5 EPYC, one thread: the
    8,001 x 256 head of the multi30k beam-search package (4 rows) 165 -> 106 us a call with the same
    generated kernel; a batch-1 beam search 0.80 of the time, medium greedy 0.91, small greedy 1.01
    (docs/benchmarks.md). Weights in oneDNN's own layout (opaque) are each copied by oneDNN instead; on a
    Zen 3 EPYC a 32-source transformer_base search took 0.81 of the time."""
    import tempfile
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            libraries = [name for name in archive.namelist() if name.endswith(".wrapper.so")]
            if len(libraries) != 1:
                return None
            workspace = tempfile.mkdtemp(prefix="attnlab-aot-")
            try:
                library = archive.extract(libraries[0], workspace)
                runner = torch._C._aoti.AOTIModelContainerRunnerCpu(library, 1)
            finally:
                shutil.rmtree(workspace, ignore_errors=True)  # the library stays mapped
        names = runner.get_constant_names_to_original_fqns()
        values = runner.extract_constants_map(False)
        if len(set(names.values())) != len(names) or set(values) != set(names.values()):
            return None  # two constants under one name (a package built before _UNIQUE_NAMES)
        packed = {name for name, original in names.items() if values[original].layout != torch.strided}
        copies = _aligned_copies({name: values[original] for name, original in names.items() if name not in packed})
        if copies is None:
            return None
        # oneDNN's prepacked weights (opaque: a many-row package's, an encoder's) are copied by oneDNN, into
        # torch's allocator (64-byte aligned). Left 16 bytes past a cache line, transformer_base's 32-source
        # search spent 9.3 s of a search in its products against 6.7 s re-homed (Zen 3, ONEDNN_VERBOSE)
        copies.update({name: values[names[name]].clone() for name in packed})
        runner.update_constant_buffer(copies, True, True, True)  # the inactive buffer, user-managed
        runner.swap_constant_buffer()
        runner.free_inactive_constant_buffer()  # the runner's own copy
        return runner, copies
    except (AttributeError, OSError, RuntimeError, ValueError, zipfile.BadZipFile):  # (a torch without the runner)
        return None


def _aligned_copies(tensors: dict[str, Tensor]) -> dict[str, Tensor] | None:
    """Copies of ``tensors`` (dense, strided) in one block of memory, in the order they lie in memory
    now, each on :data:`ALIGNMENT` bytes; None if the block is not itself aligned."""
    spans = {name: (1 + sum((n - 1) * step for n, step in zip(t.shape, t.stride()))) * t.element_size()
             if t.numel() else 0 for name, t in tensors.items()}
    order = sorted(tensors, key=lambda name: tensors[name].data_ptr())
    offsets, total = {}, 0
    for name in order:
        offsets[name] = total
        total += -(-spans[name] // ALIGNMENT) * ALIGNMENT
    block = torch.empty(max(total, 1), dtype=torch.uint8)
    if block.data_ptr() % ALIGNMENT:
        return None
    copies = {}
    for name in order:
        t = tensors[name]
        flat = block.narrow(0, offsets[name], spans[name]).view(t.dtype)
        copy = flat.as_strided(t.shape, t.stride())
        copy.copy_(t)
        copies[name] = copy
    return copies


def _named_tensors(model) -> dict[str, Tensor]:
    """The package's names -> the tensors to load (parameters detached)."""
    return {name: t.detach() if isinstance(t, nn.Parameter) else t for name, t in _step_tensors(model)}


# model -> {key: AotStep | reason, (key, "auto"): why compile="auto" found none it could use}
_STEPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


DYNAMIC_CAPACITY_PATTERNS = ("causal", "full")
"""Patterns whose step exports with the capacity as a dynamic size. Others branch on it (a
window, the relative patterns' clipped distances: export then guards a range): their packages
have a fixed capacity, rounded up by :func:`aot_capacity` so that nearby lengths share one."""


def dynamic_capacity(model) -> bool:
    """Whether ``model``'s step exports for any cache capacity (one package for every length)."""
    for layer in _stack(model).layers:
        spec = layer.self_attn.pattern.spec()
        if (spec if isinstance(spec, str) else spec.get("name")) not in DYNAMIC_CAPACITY_PATTERNS:
            return False
    return True


def aot_capacity(model, needed: int) -> int:
    """The cache capacity a package for ``model`` is built for when ``needed`` positions are:
    ``needed`` itself where the capacity is dynamic, else rounded up to a multiple of 256
    (:func:`~attnlab.generation.compiled.bucket_capacity`, at most the context)."""
    if dynamic_capacity(model):
        return needed
    return _compiled.bucket_capacity(needed, getattr(model.config, "max_positions", None))


def _layout_of(model, kind: str, batch: int, beam: int | None, capacity: int, greedy: bool = False) -> Layout:
    fixed = kind == "image" or not dynamic_capacity(model)
    if kind == "search":  # the rows vary (sources leave the batch), except a single row
        few = 1 < batch <= FEW_ROWS  # batch: the rows, so the beam fits too
        return Layout(kind, batch=1 if batch == 1 else None, beam=beam or 1,
                      capacity=capacity if fixed else None, max_rows=FEW_ROWS if few else None,
                      candidates=2 * beam if (beam or 1) > 1 else None)
    return Layout(kind, batch=batch, capacity=capacity if fixed else None, greedy=greedy)


def _stack(model):
    stack = getattr(model, "stack", None)
    return stack if stack is not None else model.decoder.stack


def aot_step(model, kind: str, cache: StaticKVCache, *, beam: int | None = None,
             memory_mask: Tensor | None = None, quiet: bool = False, greedy: bool = False,
             build: bool = True) -> AotStep:
    """The package for ``model``'s step in ``kind`` ("causal", "image", "search") shaped like
    ``cache`` (a fixed-shape cache the caller made; for "search", ``beam`` rows per source):
    loaded from the cache directory, or built there first. Bound to the model's current
    tensors. Raises :class:`AotUnavailable` (with the reason) when it cannot be had.
    ``greedy``: the caller decodes greedily, so a causal step may return the next tokens with its head
    screened (:func:`screens_head`; the package's ``layout.greedy`` says whether it does).
    ``build=False``: never built (:class:`AotNotBuilt` where none is; :func:`auto_step`)."""
    if not cache.fixed_shape:
        raise ValueError("an ahead-of-time compiled step needs a fixed-shape cache (fixed_shape=True)")

    def inputs(layout: Layout):
        return _example_inputs(model, layout, cache, memory_mask)

    return _step_package(model, kind, cache.positions.shape[0], cache.capacity, beam=beam, greedy=greedy,
                         quiet=quiet, build=build, conditioning=cache.conditioning is not None, inputs=inputs)


def auto_step(model, kind: str, *, rows: int, capacity: int, beam: int | None = None,
              greedy: bool = False) -> AotStep | None:
    """``compile="auto"``, asked before the caller makes its cache: the package :func:`aot_step` would give for
    a fixed-shape cache of ``rows`` rows and ``capacity`` positions (:func:`aot_capacity`), where one is already
    built for this model (by ``attnlab compile`` or an earlier ``compile="aot"``) and valid — loaded and bound;
    else None, and the caller decodes eagerly on its default cache. Never builds (25-140 s), so a default
    costs nothing where no package is: where none is built (or on another device than the CPU, where no
    package was measured against the eager step, or with the weights kept outside, ``$ATTNLAB_AOT_WEIGHTS``,
    whose packages were slower than the eager step in some rows) it says nothing; where one is there but
    cannot be used (built for other weights, corrupt, a loader that fails) one warning says why."""
    parameter = next(model.parameters(), None)
    if parameter is None or parameter.device.type != "cpu" or not _holds_packages(cache_directory()):
        return None
    try:
        if not folds_weights(parameter.device):
            return None  # ($ATTNLAB_AOT_WEIGHTS=outside: packages measured slower than the eager step in some rows)
        # The tensors a step derives from the weights (the head's transposed copy, the layers' step plans: part
        # of the key) are made current by the making of a cache, as before the look-up of aot_step: a small one,
        # where the answer kept for the model's state does not serve (making it every call: 892 against 439 us
        # a call of a multi30k-shaped model, docs/benchmarks.md)
        def renew():
            (model.decoder.new_cache if kind == "search" else model.new_cache)(1, MIN_CAPACITY)

        return _step_package(model, kind, rows, capacity, beam=beam, greedy=greedy, quiet=True, build=False,
                             renew=renew)
    except AotNotBuilt:
        return None
    except AotUnavailable as error:
        _warn_once(model, str(error), mode="auto")
        return None


_HOLDS: dict[str, tuple[int, bool]] = {}  # directory -> (its st_mtime_ns, whether it holds a manifest)


def _holds_packages(directory: Path) -> bool:
    """Whether ``directory`` (the package cache) holds any manifest: one ``stat`` while its listing is as it
    was (kept by its modification time), so that ``compile="auto"`` costs ~nothing where no package was
    ever built. (The look-up of one model's package took ~1.6-2.6 ms a search of a multi30k-shaped model.) A
    time under :data:`STAMP_SETTLED_NS` old is looked behind every time (:func:`_stamp`)."""
    stamp = _stamp(directory)
    if stamp is None:
        return False
    kept = _HOLDS.get(str(directory))
    if kept is not None and kept[0] == stamp != -1:
        return kept[1]
    try:
        with os.scandir(directory) as entries:
            holds = any(entry.name.endswith(".json") for entry in entries)
    except OSError:
        return False
    _HOLDS[str(directory)] = (stamp, holds)
    return holds


def _step_package(model, kind: str, rows: int, capacity: int, *, beam: int | None, greedy: bool, quiet: bool,
                  build: bool, conditioning: bool = False, inputs=None, renew=None) -> AotStep:
    """:func:`aot_step` for a cache of ``rows`` rows and ``capacity`` positions; ``inputs(layout)``: the
    example inputs to export (needed only to build); ``renew``: see :func:`_package`."""
    weight = next(model.parameters())
    folded = folds_weights(weight.device)
    screen = model.greedy_screen() if greedy and kind == "causal" and screens_head(model, rows, folded) else None
    layout = _layout_of(model, kind, rows, beam, capacity, greedy=screen is not None)
    screen_tensors = () if screen is None else screen.step_tensors()

    def exported(derived: list[Tensor]):
        stack = _stack(model)
        module = _StepModule(model, layout, derived, len(stack.layers), conditioning,
                             stack.has_cross_attention, screen_tensors)
        return (module, *inputs(layout))

    return _package(model, layout, weight, folded, exported, quiet, screen_tensors, build=build, renew=renew)


def _package(model, layout: Layout, weight: Tensor, folded: bool, exported, quiet: bool,
             screen_tensors: tuple[Tensor, ...] = (), build: bool = True, renew=None) -> AotStep | None:
    """The package of ``layout`` for ``model`` (:func:`aot_step`, :func:`aot_encode`): kept, loaded or built
    (``exported(derived)``: the module to export, its example inputs and their dynamic shapes); None for
    an int8 model's "encode" layout. ``build=False``: :class:`AotNotBuilt` where none is built (that answer
    kept too, while the model's state is the same and no manifest of its key appears). ``renew()``: makes the
    derived tensors current, called where no answer kept for the model's state as it is serves (its state
    names every derived tensor, so a stale one cannot give a kept answer)."""
    # A folded package asked for again with nothing changed: the answer kept (see _lookup_state)
    looked = _lookup_state(model) if folded and not screen_tensors else None
    if looked is None and layout.kind == "encode":
        return None  # int8 weights (_lookup_state): an int8 model's encoder runs eagerly
    answer = _LOOKUPS.get(model, {}).get(layout) if looked is not None else None
    if answer is not None and answer[0] == looked[0]:  # (one read: another thread may clear the dict)
        found = answer[2]
        if isinstance(found, AotStep):
            return found
        if not build and isinstance(found, AotUnavailable):  # (packages for other weights alone, say)
            raise found
        if not build and isinstance(found, _Absent) and found.stamp != -1 and _stamp(cache_directory()) == found.stamp:
            raise AotNotBuilt(f"no package of this step is built in {cache_directory()}")  # (none added since)
    if renew is not None:
        renew()
        looked = _lookup_state(model) if looked is not None else None
    # (an encoder reads no derived tensor: its package's key and weights do not depend on the steps' plans)
    tensors = _step_tensors(model, [] if layout.kind == "encode" else None)
    derived = [t for name, t in tensors if name.startswith("derived_")]
    tensors += [(f"screen_{i}", t) for i, t in enumerate(screen_tensors)]
    structure = _structure(model, layout, weight.device, weight.dtype, tensors, folded, _int8_products(model, layout))
    key = package_key(structure)
    kept = _STEPS.setdefault(model, {})
    step = kept.get(key)
    if isinstance(step, AotUnavailable):
        raise step
    if not build and isinstance(kept.get((key, "auto")), AotUnavailable):
        raise kept[(key, "auto")]
    snapshot = weights_snapshot(model, tensors) if folded else None
    if step is not None and folded and step.weights != snapshot:
        step = None  # a weight was written or replaced since: the package holds the old values
    if step is None:
        stamp = _stamp(cache_directory()) if not build else None  # (before the look-up: nothing added after it missed)
        try:
            step = kept[key] = _load_or_build(model, layout, lambda: exported(derived), tensors, structure, key,
                                              quiet, snapshot, build=build)
        except AotNotBuilt:  # (not kept in _STEPS: compile="aot" builds it)
            if looked is not None:
                _remember(model, layout, looked, _Absent(stamp))
            raise
        except AotUnavailable as error:
            # why "auto" found none it could use: kept apart (not in the way of the build compile="aot" asks),
            # with the model's state where there is one
            if build:
                kept[key] = error
            elif looked is not None:
                _remember(model, layout, looked, error)
            else:
                kept[(key, "auto")] = error
            raise
    step.bind(model)
    if looked is not None:  # kept with the model's state as this look-up began
        _remember(model, layout, looked, step)
    return step


@dataclass(frozen=True)
class _Absent:
    """:func:`_package`'s kept answer where ``build=False`` found no package: the cache directory's
    modification time (:func:`_stamp`) before it looked (a package's manifest added since changes it)."""

    stamp: int | None


def _stamp(directory: Path) -> int | None:
    """``directory``'s modification time (None where it is not there), or -1 (never taken for an unchanged
    directory: :func:`_package`) where that time is less than :data:`STAMP_SETTLED_NS` old: a file added within the
    file system's clock tick of it (a few ms) may leave it as it was, so a time that recent cannot say that nothing
    was added since."""
    try:
        stamp = directory.stat().st_mtime_ns
    except OSError:
        return None
    return -1 if time.time_ns() - stamp < STAMP_SETTLED_NS else stamp


STAMP_SETTLED_NS = 2_000_000_000


def _remember(model, layout: Layout, looked: tuple[list, list], answer) -> None:
    answers = _LOOKUPS.setdefault(model, {})
    if len(answers) >= MAX_LOOKUPS and layout not in answers:
        answers.clear()
    answers[layout] = (*looked, answer)


_LOOKUPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""model -> {layout: (state, held, step)}: :func:`aot_step`'s answer for a folded package (no greedy screen),
with the :func:`_lookup_state` of the model it was given for. While that state is the same, so is the answer
(an :class:`_Absent` one: while no manifest of its key appears either)."""
MAX_LOOKUPS = 8  # layouts kept per model


def _lookup_state(model) -> tuple[list, list] | None:
    """Everything :func:`aot_step`'s answer for a folded package depends on, from one walk of
    ``model``'s modules, and the objects it names (held beside it, so that no id in it is reused
    while it is kept): the config, every module and the names of its parameters, buffers and
    children, each parameter and buffer with its shape and :func:`~attnlab.linear.derived_key`, and
    each derived tensor a step reads (:func:`derived_tensors`) as :func:`weights_snapshot` keys it.
    So after a weight written in place, replaced or moved, a module added, removed or replaced, or
    another config, the full look-up runs again. None for a model with int8 weights (their packages
    depend on this CPU's probes, :func:`_int8_products`: always the full look-up).

    The full look-up (the names of every tensor, the structure's hash, the weights' snapshot) took
    ~1.0 ms of a beam search's ~4.7 ms a sentence outside its steps (multi30k shape, one source,
    AMD EPYC Zen 5); this walk, a fraction of that (docs/benchmarks.md)."""
    # (a parameter's derived_key, less the count of optimizer steps that wrote it: the count of all of
    # them stands for those, OPTIMIZER_STEPS)
    state: list = [model.config, OPTIMIZER_STEPS[0]]
    held: list = []
    add, hold, stack = state.append, held.append, [model]
    while stack:
        module = stack.pop()
        if module is None:
            continue
        own = vars(module)
        parameters, buffers, children = own["_parameters"], own["_buffers"], own["_modules"]
        add((id(module), tuple(parameters), tuple(buffers), tuple(children)))
        hold(module)
        for group in (parameters, buffers):
            for t in group.values():
                if t is not None:
                    add((id(t), t.shape, t.data_ptr(), t._version, t.dtype, t.device))
                    hold(t)
        weight = own.get("weight")
        if weight is not None and own_product(weight) is not None:
            return None
        for name in _derived_names(type(module)):  # the derived tensors, as weights_snapshot keys them
            for t in _plan_tensors(own.get(name)):
                add((t.shape, t.data_ptr(), t.dtype, t.device) if t.is_inference()
                    else (t.shape, t.data_ptr(), t._version, t.dtype, t.device))
        stack.extend(children.values())
    return state, held


def screens_head(model, batch: int, folded: bool) -> bool:
    """Whether a greedy package of ``model`` for ``batch`` rows screens its head in int8: one row,
    the weights folded in (the screen is a derived copy the package holds), and a model whose
    ``greedy_step`` is its ``step``'s (both defined by one class: a subclass that changes ``step``
    decodes through it) with a head it screens (``greedy_screen()``, checked by the caller)."""
    kind = type(model)
    greedy_step, step = getattr(kind, "greedy_step", None), getattr(kind, "step", None)
    return batch == 1 and folded and greedy_step is not None and step is not None \
        and greedy_step.__qualname__.rsplit(".", 1)[0] == step.__qualname__.rsplit(".", 1)[0]


def _load_or_build(model, layout, exported, tensors, structure, key, quiet, snapshot=None,
                   build: bool = True) -> AotStep:
    directory = cache_directory()
    # nothing made or written (no directory, no lock file), nothing said, where none is built
    if not build and not _built(directory, key, structure, folded=snapshot is not None):
        raise AotNotBuilt(f"no package of this step is built in {directory}")
    if any(type(t) not in (Tensor, nn.Parameter) for t in model.parameters()):
        raise AotUnavailable("the model's parameters are not plain tensors")
    int8 = structure.get("int8_products")
    if snapshot is None and int8:
        raise AotUnavailable(f"the model's weights are int8 (model.quantize('int8')), which a package takes only "
                             f"with its weights folded in (${WEIGHTS_SETTING}=outside, or not on the CPU)")
    names = sorted(name for name, _ in tensors)
    weights = weights_digest(model, tensors) if snapshot is not None else None
    paths = _Paths(directory, key if weights is None else _folded_name(key, weights))
    if not build and not any(path.exists() or path.is_symlink() for path in (paths.manifest, paths.package)):
        raise AotUnavailable(f"the packages of this step in {directory} hold other weights than the model's "
                             "(`attnlab compile --model DIR` or compile='aot' builds one for them)")
    _check_directory(paths.directory)
    with _build_lock(paths):
        manifest = _read_manifest(paths)
        why = _valid(paths, manifest, structure, weights)
        if why is not None and not build:
            raise AotUnavailable(f"the package {paths.package} cannot be used: {why} (`attnlab compile --model DIR` "
                                 "or compile='aot' builds it again)")
        if why is not None:
            if manifest is not None and not quiet:
                print(f"attnlab: rebuilding {paths.package.name}: {why}", file=sys.stderr, flush=True)
            module, example, shapes = exported()
            _remove_leftovers(paths)
            _build(module, example, shapes, structure, paths, quiet=quiet, weights=weights,
                   few_rows=layout.max_rows is not None, int8=int8,
                   what="the encoder" if layout.kind == "encode" else "the decode step")
            if weights is not None:
                _remove_least_used(directory, key, paths)
        shim = _sgemm_library(structure)  # (loaded before the package that calls it)
        if _load_check_needed():
            _check_loads(paths, shim)
        try:
            step = AotStep(paths.package, layout, names, paths.package.stem, weights=snapshot)
        except RuntimeError as error:
            if isinstance(error, AotUnavailable):
                raise
            raise AotUnavailable(f"the package {paths.package} could not be loaded ({_first_line(error)})") from None
    if weights is not None:
        with contextlib.suppress(OSError):  # used now: the last of this structure's packages a build removes
            os.utime(paths.manifest)
    return step


FOLDED_KEPT = 4
"""Packages with their weights folded in kept per structure in the cache directory, each for its own weights
(``<key>-<weights>.pt2``: a model and the models fine-tuned from it each decode through their own, where one
package per structure made each build replace the last); a build past that many removes the least recently
used (its manifest's modification time, set at each load)."""
WEIGHTS_IN_NAME = 16  # hex digits of the weights' SHA-256 in a folded package's name


def _folded_name(key: str, weights: str) -> str:
    """The name of the package of structure ``key`` with weights of SHA-256 ``weights`` folded in."""
    return f"{key}-{weights[:WEIGHTS_IN_NAME]}"


def _folded_manifests(directory: Path, key: str) -> list[Path]:
    """The manifests' paths named as those of structure ``key``'s folded packages (:func:`_folded_name`), whoever
    wrote them (the caller reads each)."""
    return [manifest for manifest in directory.glob(f"{key}-*.json")
            if len(manifest.stem) == len(key) + 1 + WEIGHTS_IN_NAME]


def _built(directory: Path, key: str, structure: dict, *, folded: bool) -> bool:
    """Whether ``directory`` holds a manifest attnlab wrote of a package of ``structure`` (key ``key``): for a
    folded package, for any weights (the one for the model's own is looked for once its weights' digest is
    made; a file of such a name that attnlab did not write is passed over, where a file at an unfolded package's
    own name is refused with the reason, as a build would refuse it)."""
    if not directory.is_dir() or directory.is_symlink():
        return False
    candidates = [_Paths(directory, key)]  # (folded: one built before packages were named for their weights)
    if folded:
        candidates += [_Paths(directory, manifest.stem) for manifest in _folded_manifests(directory, key)]
    for paths in candidates:
        try:
            manifest = _read_manifest(paths)
        except AotUnavailable:
            if not folded:
                raise  # (its own name: the same warning as a build would give)
            continue
        if manifest is not None and _valid(paths, manifest, structure, files=False) is None:
            return True
    return False


def _remove_least_used(directory: Path, key: str, built: _Paths) -> None:
    """Past :data:`FOLDED_KEPT` folded packages of structure ``key``, remove the least recently used (not
    ``built``, just made): only packages attnlab wrote (its manifest), each under its own lock taken without
    waiting (one being loaded or rebuilt elsewhere stays), its package before its manifest (a manifest alone is
    rebuilt; a package alone would be refused as not attnlab's)."""
    import fcntl

    def used(path: Path) -> int:
        try:
            return path.stat().st_mtime_ns
        except OSError:
            return 0

    others = sorted((manifest for manifest in _folded_manifests(directory, key) if manifest != built.manifest),
                    key=used, reverse=True)
    # one built before packages were named for their weights (the same key: a folded package's): replaced
    others += [directory / f"{key}.json"] if (directory / f"{key}.json").exists() else []
    kept = 1  # (the one built)
    for manifest in others:
        paths = _Paths(directory, manifest.stem)
        try:
            if _read_manifest(paths) is None:
                continue
        except AotUnavailable:  # not attnlab's: neither counted nor touched
            continue
        if kept < FOLDED_KEPT and manifest.stem != key:
            kept += 1
            continue
        try:
            fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # (read again under the lock: as it is now; a symlink at the package's name is not attnlab's)
            if _read_manifest(paths) is not None and not paths.package.is_symlink():
                paths.package.unlink(missing_ok=True)
                paths.manifest.unlink(missing_ok=True)
        except (OSError, AotUnavailable):  # (its lock held elsewhere, or no longer attnlab's: it stays)
            continue
        finally:
            os.close(fd)


INTEGER_CACHE_SHARE = 4
"""An int8 one-row step multiplies in integers while its int8 weights take at most
1/INTEGER_CACHE_SHARE of the last-level cache (:func:`_int8_products`)."""


def _int8_products(model, layout: Layout) -> str | None:
    """How an int8 model's package multiplies: "integer" (the eager step's arithmetic,
    :meth:`attnlab.quantize.Int8Weight.integer_product`) for a one-row step where the eager
    kernel takes full-range inputs, ``torch._int_mm`` sums exactly and fast (``integer_sums_pay``:
    not without VNNI) and the model's int8 weights fit a quarter of the last-level cache; "codes"
    (the eager kernel's 7-bit input codes on a CPU whose kernel takes 7-bit inputs, exact sums, the
    results rounded to bfloat16: :meth:`~attnlab.quantize.Int8Weight.codes_product`, multiplied by the
    build's integer kernel,
    :data:`_PAIRS`) for a one-row step on an AVX2 CPU whose eager kernel takes 7-bit inputs, the
    weights within the same quarter; else "weight-only"; None for a model without int8 weights.
    "codes" on an AVX2 EPYC (Zen 3, one thread, interleaved in one process): the small LM's greedy
    package (4.4 MB of int8 weights) 1.10-1.12x the weight-only one's speed, the medium's (23 MB,
    beyond the quarter) 0.955x: there both wait on memory and the inputs' quantisation is extra work.

    Why (docs/benchmarks.md, "int8 in integers"): oneDNN's one-row int8 product read its weights
    at ~20 µs/MB while they stayed in the cache and ~140 µs/MB beyond it (1 MB weights cycled:
    the rate fell between 10 and 12 MB on a 32 MB L3), inductor's weight-only GEMM at ~55 µs/MB
    in the cache and at most ~61 out of it; at several rows oneDNN's product was slower than the
    GEMM even in the cache. So the 3-layer, d-256 LM (4.4 MB of int8 weights) decodes 1.35x
    faster in integers, and the 6-layer, d-512 one (23 MB) 2x slower. Measured on one CPU (AMD
    EPYC, 32 MB L3): the quarter is that machine's margin, not a law."""
    weights = {}
    for module in model.modules():  # a module's weight: an attribute of its own, else a parameter
        weight = vars(module).get("weight")
        weight = module._parameters.get("weight") if weight is None else weight
        if own_product(weight):
            weights[id(weight)] = weight
    if not weights:
        return None
    size = sum(w.values.numel() for w in weights.values())
    fits = size * INTEGER_CACHE_SHARE <= last_level_cache_bytes()
    if layout.batch != 1 or not fits:
        return "weight-only"
    if full_range_inputs():
        return "integer" if integer_sums_pay() else "weight-only"
    return "codes" if torch.backends.cpu.get_cpu_capability() == "AVX2" else "weight-only"


def aot_encode(model, src_ids: Tensor, *, quiet: bool = False,
               build: bool = True) -> tuple[Tensor, Tensor, list[Tensor]] | None:
    """A search's encoding of one source through a package (:func:`encoder_package`): ``model.encode(src_ids)``'s
    memory and mask, and each cross-attention layer's keys and values of that memory (``(1, S, 2·d_model)``
    each: what ``new_step_cache(..., memory_keys_values=...)`` takes); the memory equal to the eager
    encoder's up to float rounding. None where the caller encodes eagerly: not one row of ids, a source with
    padding or of one token, no C++ compiler (the step's look-up says so), where :func:`encoder_package`
    gives none, or where the package cannot be had (then one warning per reason; ``build=False``,
    ``compile="auto"``: none where it is not built, and nothing said). Ids out of range or a
    source longer than the positions allow: the eager encoder's ValueError.

    Why: one multi30k-shaped source's encoder and cross-attention products ran eagerly as ~60 operator
    calls, ~2 ms of a ~24 ms beam search (oneDNN packing each weight again for each source length); through
    the package the search took 0.97-0.98x the time (docs/benchmarks.md)."""
    from attnlab.models.base import check_token_ids

    if src_ids.dim() != 2 or src_ids.shape[0] != 1 or src_ids.shape[1] < MIN_CAPACITY or not _encodes_tokens(model):
        return None
    if not build and not _holds_packages(cache_directory()):
        return None  # (before the checks below: ~0.13 ms a source)
    encoder = model.encoder
    check_token_ids(src_ids, model.config.vocab_size, "src_ids")
    memory_mask = key_padding_mask(src_ids, encoder.pad_id)
    if not bool(memory_mask.all()):
        return None
    if encoder.positions is not None:
        encoder.positions.ensure_length(src_ids.shape[1])  # as the eager encoder does (a ValueError past the table)
    try:
        package = encoder_package(model, quiet=quiet, build=build)
    except AotNotBuilt:
        return None
    except AotUnavailable as error:
        if not build or _compiled.unavailable_reason() is None:  # (no compiler: the step's look-up says so, once)
            _warn_once(model, f"the encoder: {error}", "encoding", mode="aot" if build else "auto")
        return None
    if package is None:
        return None
    outputs = package.run([src_ids.contiguous()])
    return outputs[0], memory_mask, outputs[1:]


def _encodes_tokens(model) -> bool:
    """Whether ``model.encode`` is the Transformer's own (its encoder over token ids, after their check)."""
    from attnlab.models.transformer import Transformer

    return getattr(type(model), "encode", None) is Transformer.encode


def encoder_package(model, *, quiet: bool = False, build: bool = True) -> AotStep | None:
    """The package of a Transformer's encoder for one source of any length its positions cover as they are
    (layout "encode", :class:`_EncodeModule`: the memory, then each cross-attention layer's keys and values),
    kept, loaded or built like a step's; None where none applies: not the Transformer's own ``encode``, a
    model in training mode (its encoder's dropout), weights not folded (another device,
    ``$ATTNLAB_AOT_WEIGHTS``: the step's look-up names a bad value), int8 weights, positions without a
    table. Raises :class:`AotUnavailable` when it cannot be had (:class:`AotNotBuilt`: ``build=False`` and none
    is built). Built by the FOLDED_CONFIGS' tuning
    among inductor's templates and oneDNN: one multi30k-shaped source's call took 0.93-1.04 ms (1.24-1.36
    after 64 MB of other reads) against 1.38-1.45 (1.79-1.82) with the few-rows templates alone."""
    if not _encodes_tokens(model) or model.training:
        return None
    encoder = model.encoder
    limit = _source_limit(encoder)
    weight = next(model.parameters())
    try:
        folded = folds_weights(weight.device)
    except AotUnavailable:
        return None
    if limit is None or limit < MIN_CAPACITY or not folded:
        return None

    def exported(derived: list[Tensor]):
        example = torch.full((1, min(8, limit)), encoder.pad_id + 1 if encoder.pad_id + 1 < model.config.vocab_size
                             else 0, dtype=torch.long, device=weight.device)
        shape = {1: torch.export.Dim("source_length", min=MIN_CAPACITY, max=limit)}
        return _EncodeModule(model), (example,), (shape,)

    return _package(model, Layout("encode", batch=1), weight, True, exported, quiet, build=build)


def _source_limit(encoder) -> int | None:
    """The longest source ``encoder``'s positions cover as they are (its table's rows), ``1 << 20``
    without positions, None for positions without a table."""
    positions = encoder.positions
    if positions is None:
        return 1 << 20
    table = getattr(positions, "table", None)
    table = getattr(positions, "weight", None) if table is None else table
    return table.shape[0] if isinstance(table, Tensor) else None


def use_aot(model, kind: str, cache: StaticKVCache, *, beam: int | None = None, memory_mask: Tensor | None = None,
            quiet: bool = False, greedy: bool = False) -> AotStep | None:
    """:func:`aot_step`, or None after one warning saying why decoding runs eagerly."""
    try:
        return aot_step(model, kind, cache, beam=beam, memory_mask=memory_mask, quiet=quiet, greedy=greedy)
    except AotUnavailable as error:
        _warn_once(model, str(error))
        return None


_WARNED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _warn_once(model, reason: str, doing: str = "decoding", mode: str = "aot") -> None:
    said = _WARNED.setdefault(model, set())
    if reason not in said:
        said.add(reason)
        warnings.warn(f"compile={mode!r}: {reason}; {doing} eagerly", RuntimeWarning, stacklevel=4)
