"""Small helpers shared by the benchmark scripts: interleaved timing and medians."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def interleaved_medians(runs: dict[str, Callable[[], object]], *, repeats: int, warmup: int = 1) -> dict[str, float]:
    """Time each callable ``repeats`` times, alternating between them so that machine
    noise hits all of them alike; return the median seconds of each."""
    for fn in runs.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def matvec_bandwidth(num_bytes: int = 512 << 20, repeats: int = 7) -> float:
    """Bytes/s of a float32 matrix–vector product over a ``num_bytes`` matrix (default
    512 MB, beyond the 260 MB L3 this VM reports)."""
    matrix = torch.randn(num_bytes // 4 // 4096, 4096)
    vector = torch.randn(4096)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mv(matrix, vector)
        times.append(time.perf_counter() - start)
    return matrix.numel() * 4 / sorted(times)[len(times) // 2]
