"""Local 1D / 2D attention vs full causal attention, and cached vs uncached image sampling.

    python benchmarks/local_attention.py attention [--lengths 1024 4096 16384] [--repeats 3]
    python benchmarks/local_attention.py sampling [--subset 16]

``attention``: one attention call (the pattern on projected q, k, v; B=1, h=4 heads of 64,
i.e. d_model 256), forward + backward (the sum of the output), float32, for
``local_1d`` (blocks of 256 as tensor2tensor's CIFAR-10 setting, and 128), ``local_2d``
(query blocks 8×16 with flange 8×16 as tensor2tensor's default, and 8×8 with 4×8, over a
square raster of side √L) and full causal ``scaled_dot_product_attention(is_causal=True)``.
Time: the median of interleaved repeats in this process. Peak memory: each case runs
once more in a fresh subprocess, and the figure is its peak resident set (VmHWM, reset
through /proc/self/clear_refs just before) minus the resident set just before the call (inputs allocated, torch warmed up on a tiny
call): what the call itself needed at its peak, all allocations included.

``sampling``: one 28×28 grey image (``imagetransformer_mnist_small``, local 1D) and one
32×32×3 image (``imagetransformer_colour_small``, local 1D), random weights (timing
only). Cached: ``sample_images`` (a prefill of nothing, then one cached step per
sub-pixel), timed whole. Uncached: re-running the prefix for every sub-pixel; timed on
``--subset`` prefix lengths spread over the image (``model.prefill`` of t sub-pixels into a
fresh cache = the stack over t+1 positions) and summed over every t by linear
interpolation, i.e. *estimated* from a subset of steps. Also the cost of tensor2tensor's
way, the whole fixed-size image per sub-pixel: L × one full forward. ``--compile`` adds
``sample_images(..., compile=True)`` (:mod:`attnlab.generation.compiled`), its first call
(the compilation) timed apart and its runs interleaved with the eager cached ones.
``--models`` picks other presets, with ``PRESET:HxWxC`` for another image size (e.g.
``imagetransformer_cifar10_base:28x28x1``, the paper's 12 layers of width 512 on a 28×28
grey image): the ratio depends on the model, since a small model's cached step is bound by
per-operator overhead while re-running a prefix is bound by arithmetic.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import interleaved_medians  # noqa: E402

from attnlab.attention import AttentionContext, Local1D, Local2D  # noqa: E402

HEADS, HEAD_DIM = 4, 64


def attention_case(name: str, length: int):
    """A callable doing one forward + backward of ``name`` at ``length``."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, length, HEAD_DIM, requires_grad=True) for _ in range(3))
    side = int(math.isqrt(length))
    if name == "full causal (SDPA)":
        def forward():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        pattern = PATTERNS[name](side)
        ctx = AttentionContext()

        def forward():
            return pattern(q, k, v, ctx)[0]

    def run():
        out = forward()
        out.sum().backward()
        q.grad = k.grad = v.grad = None

    return run


PATTERNS = {  # name -> pattern for a square raster of side √L
    "local_1d b=256": lambda side: Local1D(256),
    "local_1d b=128": lambda side: Local1D(128),
    "local_2d 8x16 / 8x16": lambda side: Local2D((8, 16), (8, 16), width=side),
    "local_2d 8x8 / 4x8": lambda side: Local2D((8, 8), (4, 8), width=side),
}
CASES = (*PATTERNS, "full causal (SDPA)")


def peak_memory(name: str, length: int) -> int:
    """Bytes: peak RSS of one call in a fresh process minus the RSS before it."""
    code = (f"import sys; sys.argv = ['x']; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            "import local_attention as b; "
            f"b.attention_case({name!r}, 256)(); run = b.attention_case({name!r}, {length}); "
            "b.reset_peak(); before = b.rss_bytes(); run(); print(b.peak_rss_bytes() - before)")
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return int(result.stdout.strip().splitlines()[-1])


def reset_peak() -> None:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def benchmark_attention(lengths, repeats: int) -> list[dict]:
    rows = []
    for length in lengths:
        runs = {name: attention_case(name, length) for name in CASES}
        times = interleaved_medians(runs, repeats=repeats if length < 16384 else max(1, repeats // 2))
        for name in CASES:
            rows.append({"length": length, "case": name, "seconds": times[name],
                         "peak_bytes": peak_memory(name, length)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


SAMPLING_MODELS = ("imagetransformer_mnist_small", "imagetransformer_colour_small")


def sampling_model(name: str):
    """``PRESET`` or ``PRESET:HxWxC`` (the preset at another image size), random weights."""
    import attnlab

    preset, _, size = name.partition(":")
    overrides = {}
    if size:
        height, width, channels = (int(part) for part in size.lower().split("x"))
        overrides = {"height": height, "width": width, "channels": channels}
    torch.manual_seed(0)
    return attnlab.create_model(preset, **overrides).eval()


def benchmark_sampling(subset: int, repeats: int, models=SAMPLING_MODELS, compile: bool | str = False) -> list[dict]:
    from attnlab.generation.images import sample_images

    rows = []
    for preset in models:
        model = sampling_model(preset)
        length = model.config.sequence_length
        cached, compiled, compile_seconds = [], [], None
        if compile:  # the first compiled call compiles: timed apart, then interleaved with the eager runs
            start = time.perf_counter()
            sample_images(model, 1, generator=torch.Generator().manual_seed(0), compile=compile)
            compile_seconds = time.perf_counter() - start
        for _ in range(repeats):
            start = time.perf_counter()
            image = sample_images(model, 1, generator=torch.Generator().manual_seed(0))
            cached.append(time.perf_counter() - start)
            if compile:
                start = time.perf_counter()
                sample_images(model, 1, generator=torch.Generator().manual_seed(0), compile=compile)
                compiled.append(time.perf_counter() - start)
        sequence = model.images_to_sequence(image.long())
        points = sorted({round(i * (length - 1) / (subset - 1)) for i in range(subset)})
        prefix_times = {}
        with torch.inference_mode():
            for t in points:  # the prefix of t sub-pixels -> the logits of sub-pixel t
                times = []
                for _ in range(repeats):
                    cache = model.new_cache(1)
                    start = time.perf_counter()
                    model.prefill(sequence[:, :t], cache)
                    times.append(time.perf_counter() - start)
                prefix_times[t] = statistics.median(times)
            full = []
            for _ in range(repeats):
                start = time.perf_counter()
                model(image.long())
                full.append(time.perf_counter() - start)
        # Every t in 0..L-1, interpolating linearly between the measured prefix lengths.
        estimate = 0.0
        for a, b in zip(points, points[1:]):
            estimate += (prefix_times[a] + prefix_times[b]) / 2 * (b - a)
        estimate += prefix_times[points[-1]]
        row = {"preset": preset, "parameters": model.num_parameters(), "sub_pixels": length,
               "cached_seconds": statistics.median(cached),
               "uncached_prefix_seconds_estimated": estimate, "measured_prefix_lengths": len(points),
               "whole_image_per_sub_pixel_seconds": statistics.median(full) * length}
        row["speedup_vs_prefix"] = row["uncached_prefix_seconds_estimated"] / row["cached_seconds"]
        row["speedup_vs_whole_image"] = row["whole_image_per_sub_pixel_seconds"] / row["cached_seconds"]
        if compile:
            row["cached_compiled_seconds"] = statistics.median(compiled)
            row["first_compiled_call_seconds"] = compile_seconds
            row["compiled_speedup_vs_prefix"] = estimate / row["cached_compiled_seconds"]
            row["compiled_speedup_vs_whole_image"] = (row["whole_image_per_sub_pixel_seconds"]
                                                      / row["cached_compiled_seconds"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("attention", "sampling"))
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--subset", type=int, default=16, help="prefix lengths timed for the uncached estimate")
    parser.add_argument("--models", nargs="+", default=list(SAMPLING_MODELS),
                        help="sampling: presets, PRESET:HxWxC for another image size")
    parser.add_argument("--compile", action="store_true",
                        help="sampling: also the compiled step (sample_images(..., compile=True)), interleaved")
    parser.add_argument("--aot", action="store_true",
                        help="sampling: the compiled column with the step compiled ahead of time (compile='aot', "
                             "attnlab.generation.aot; its first call builds or loads the package) instead")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)", flush=True)
    if args.what == "attention":
        benchmark_attention(args.lengths, args.repeats)
    else:
        benchmark_sampling(args.subset, args.repeats, args.models, "aot" if args.aot else args.compile)


if __name__ == "__main__":
    main()
