"""``Linear``: ``nn.Linear`` that can use MKL's packed GEMM during generation.

Decoding multiplies a few rows (batch × beam) by every weight matrix at every step. For
such skinny products MKL's packed GEMM (weights reordered once into its kernel's layout)
runs about twice as fast as the plain ``addmm`` on our CPUs (see docs/benchmarks.md).
The packed path is opt-in, inside :func:`packed_inference`, which the search functions
use; it needs no gradients, float32 on the CPU, and an MKL build of torch. A module keeps
one packed copy of its weight for one row count, made the second time in a row it sees
that count (so an encoder pass, run once per batch, never pays for packing). Results
equal ``F.linear`` up to float32 summation order.
"""

from __future__ import annotations

import contextlib
import threading

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def derived_key(weight: Tensor) -> tuple:
    """The one staleness rule for anything derived from a parameter's values (a packed or
    transposed copy): the copy is current while this key is unchanged. It changes when the
    tensor's storage moves (``.to()``, a new ``.data``), its dtype or device changes, or its
    values are written in place (an optimizer step, ``load_state_dict``, ``copy_``: the
    version counter)."""
    return (weight.data_ptr(), weight._version, weight.dtype, weight.device)


_MKL_PACKED = torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")
_state = threading.local()


@contextlib.contextmanager
def packed_inference(enabled: bool = True):
    """Within this block, :class:`Linear` layers may use MKL's packed GEMM (no autograd)."""
    previous = getattr(_state, "enabled", False)
    _state.enabled = enabled and _MKL_PACKED
    try:
        yield
    finally:
        _state.enabled = previous


class Linear(nn.Linear):
    """``nn.Linear`` with the opt-in packed inference path described in the module doc."""

    _packed_key = None
    _last_rows = 0

    def forward(self, x: Tensor) -> Tensor:
        if not getattr(_state, "enabled", False) or torch.is_grad_enabled() or x.dtype != torch.float32 \
                or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        rows = x.numel() // x.shape[-1]
        previous_rows, self._last_rows = self._last_rows, rows
        weight = self.weight
        key = (rows, derived_key(weight))
        if key != self._packed_key:
            if rows != previous_rows or rows < 2:
                return F.linear(x, weight, self.bias)
            self._packed = torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), rows)
            self._packed_key = key
        out = torch.ops.mkl._mkl_linear(x.reshape(rows, x.shape[-1]), self._packed, weight, self.bias, rows)
        return out.view(*x.shape[:-1], weight.shape[0])


def one_row_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)`` for the decode step, ``x`` ``(B, L, in)``: a single row
    (B = L = 1) as a matrix-vector product (``addmv``; MKL's gemv runs a one-row product
    1.1-1.4x faster than ``addmm``'s gemm on our CPUs, docs/benchmarks.md), more rows as
    ``F.linear``. Equal to ``F.linear`` up to float32 summation order. Only for plain
    tensors (:func:`step_linear` chooses)."""
    if x.shape[0] == 1 and x.shape[1] == 1:
        row = x.view(-1)
        out = torch.mv(weight, row) if bias is None else torch.addmv(bias, weight, row)
        return out.view(1, 1, -1)
    return F.linear(x, weight, bias)


def step_linear(weight: Tensor):
    """The product a decode step uses for ``weight``: :func:`one_row_linear` for a plain
    float32 CPU tensor, ``F.linear`` otherwise (a quantised weight answers ``F.linear``
    through ``__torch_function__``; other devices and dtypes keep their own kernels)."""
    if type(weight) in (Tensor, nn.Parameter) and weight.device.type == "cpu" and weight.dtype == torch.float32:
        return one_row_linear
    return F.linear
