"""A decode step compiled by ``torch.compile`` (opt-in: ``generate(..., compile=True)``,
``sample_images(..., compile=True)``).

A one-token step of a small model is a few hundred small operator calls; on a CPU their
Python and dispatch overhead is a large part of the step (docs/benchmarks.md). Here the
model's own :meth:`step` (the one decoding road, nothing rewritten) runs over a
``fixed_shape`` :class:`~attnlab.attention.cache.StaticKVCache` — every step the same shapes,
the write position a device tensor — so inductor compiles it once (``dynamic=False``) into
fused C++ loops around the matrix products, and every later step of the same batch size and
cache capacity reuses that code. As for a replayed CUDA graph, the host's count of cache
positions does not move inside the compiled step (:meth:`StaticKVCache.advance` skips it
while compiling); :meth:`CompiledStep.__call__` counts with ``count_replayed`` after each call.

The first call for a (model structure, batch, capacity) compiles: seconds to tens of seconds
on a small CPU, paid once per process (torch.compile keeps the code, for up to its
recompilation limit of structures and shapes; callers round the capacity up,
:func:`bucket_capacity`, so that nearby lengths share it). Measured on a 2-core CPU
(docs/benchmarks.md): 1.2-1.4x faster steps for a small Image Transformer (local attention,
whose fixed-shape step gathers only its window of keys), 1.12x for a small GPT-2-shaped LM
with one thread, and slower at two threads, at medium size and for the relative-attention
music model (a pattern without a window attends the whole fixed buffer at every step), so it
is opt-in. Dynamo's guard check before every call (~0.1-0.17 ms) is what remains of the
per-call overhead. The results equal the eager step's up to float rounding (fused kernels add
in another order), which the tests check with tolerances.

inductor's CPU backend builds C++: without a compiler (``$CXX``, ``g++``, ``c++`` or
``clang++``) :func:`unavailable_reason` says so, and the callers warn once and decode eagerly.
``torch._dynamo`` is imported on the first compiled step only, so importing this module costs
nothing.
"""

from __future__ import annotations

import inspect
import os
import shutil
import warnings
import weakref

import torch
from torch import Tensor

__all__ = ["COMPILE_MODES", "CompiledStep", "bucket_capacity", "check_compile", "compiled_step", "unavailable_reason",
           "use_compiled"]

LENGTH_MULTIPLE = 256
"""Capacities are rounded up to a multiple of this (at most the model's context), so that
prompts of nearby lengths reuse one compilation."""


def unavailable_reason() -> str | None:
    """Why ``torch.compile`` cannot build a CPU step here, or None when it can."""
    compiler = os.environ.get("CXX")
    if compiler:
        if shutil.which(compiler) is None:
            return f"the C++ compiler $CXX={compiler!r} is not found"
        return None
    if not any(shutil.which(name) for name in ("g++", "c++", "clang++")):
        return "torch.compile needs a C++ compiler (g++, c++ or clang++ on PATH, or $CXX) for the CPU, none found"
    return None


COMPILE_MODES = (False, True, "aot", "auto")
"""What the decoding functions take as ``compile``: eager, ``torch.compile``'d, compiled ahead
of time (:mod:`attnlab.generation.aot`), or ahead of time where a package is already built and eager
otherwise (:func:`attnlab.generation.aot.auto_step`: never a build; the decoding verbs' default)."""


def check_compile(compile) -> None:
    """ValueError unless ``compile`` is one of :data:`COMPILE_MODES` (None counts as False)."""
    if compile is not None and not any(compile is mode or (isinstance(mode, str) and compile == mode)
                                       for mode in COMPILE_MODES):
        raise ValueError(f"compile={compile!r} must be False, True (torch.compile), 'aot' (ahead of time) or "
                         "'auto' (ahead of time where a package is built)")


def use_compiled(compile: bool, device: torch.device) -> bool:
    """Whether a caller that was asked for ``compile`` gets a compiled step: False (with one
    warning saying why) when the step cannot be compiled here, so decoding runs eagerly."""
    if compile is not True:
        return False
    reason = unavailable_reason() if device.type == "cpu" else None
    if reason is not None:
        warnings.warn(f"compile=True: {reason}; decoding eagerly", RuntimeWarning, stacklevel=3)
        return False
    return True


def bucket_capacity(needed: int, limit: int | None) -> int:
    """``needed`` positions rounded up to a multiple of :data:`LENGTH_MULTIPLE`, at most
    ``limit`` (the model's context), never below ``needed``."""
    rounded = -(-needed // LENGTH_MULTIPLE) * LENGTH_MULTIPLE
    return rounded if limit is None else max(needed, min(rounded, limit))


class CompiledStep:
    """``model.step(tokens, cache)`` compiled, for ``fixed_shape`` caches of the model.

    Call it with the model: ``logits = compiled(model, tokens, cache)``. The cache must have
    been made with ``fixed_shape=True`` (a cache that hands the pattern a growing prefix
    would change shapes at every step, and recompile). Holds no reference to the model (the
    compiled function is the class's ``step``, the model an argument), so it lives as long
    as the model does in :func:`compiled_step`'s table. If compiling fails on the first call
    (a compiler that cannot build inductor's code), it warns once and steps eagerly from
    then on; a failure after a successful first call is raised.
    """

    def __init__(self, model):
        # The step's own code without its @torch.inference_mode() wrapper (dynamo cannot
        # trace that context around inference tensors); __call__ runs it in inference mode.
        self._eager = inspect.unwrap(type(model).step)
        self._compiled = torch.compile(self._eager, dynamic=False, fullgraph=True, options=_OPTIONS)
        self._called = False

    @torch.inference_mode()
    def __call__(self, model, tokens: Tensor, cache) -> Tensor:
        if not cache.fixed_shape:
            raise ValueError("a compiled step needs a fixed-shape cache (new_cache(..., fixed_shape=True))")
        if self._compiled is None:
            return self._eager(model, tokens, cache)  # compiling failed: the same step, eagerly
        try:
            logits = self._compiled(model, tokens, cache)
        except Exception as error:  # the first call compiles: its failure (not the step's) falls back
            if self._called:
                raise
            self._compiled = None
            first_line = (str(error).strip().splitlines() or [""])[0][:200]
            warnings.warn(f"compile=True: torch.compile failed ({type(error).__name__}: {first_line}); "
                          "decoding eagerly", RuntimeWarning, stacklevel=2)
            return self._eager(model, tokens, cache)
        self._called = True
        cache.count_replayed(1)  # the compiled step moved the device cursor only
        return logits


# The C++ wrapper calls the kernels without a Python function per step (measured faster on
# the small models, docs/benchmarks.md).
_OPTIONS = {"cpp_wrapper": True}
_STEPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def compiled_step(model) -> CompiledStep:
    """The model's :class:`CompiledStep` (made on first use, dropped with the model)."""
    step = _STEPS.get(model)
    if step is None:
        step = _STEPS[model] = CompiledStep(model)
    return step
