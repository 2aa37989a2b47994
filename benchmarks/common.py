"""Small helpers shared by the benchmark scripts: interleaved timing and medians."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


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
