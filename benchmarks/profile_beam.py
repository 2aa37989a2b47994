"""Where attnlab's beam-4 translation step spends its time on the CPU (issue 40): the same random
Marian model and Multi30k sources as ``cpu_engines.py --translate``, attnlab's eager beam search
alone, its thread CPU time per output step, and torch.profiler's operators by their own time.

    taskset -c 0 python benchmarks/profile_beam.py [--shape multi30k] [--batch 1] [--sentences 16] [--compile aot]

``--compile aot``: the search through the ahead-of-time package (built first into ``$ATTNLAB_CACHE``,
untimed); the package's calls do not show as operators, so their share of one run is timed
separately (thread CPU time around ``AotStep.__call__``), and the operators' table is what is
left: the search's own work and the encoder.

The matrix products are oneDNN's (``mkldnn::_linear_pointwise``: the step's products on weights
reordered once, ``attnlab.linear.skinny_linear``); what the products do not take is the step's
overhead, the figure to hold against CTranslate2's whole step (``cpu_engines.py --translate``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import cpu_engines  # noqa: E402

from attnlab.generation import beam_search  # noqa: E402
from attnlab.interop import load_hf_marian  # noqa: E402


def cycle_products(repeats: int) -> None:
    """The step's products alone: oneDNN's reordered copies the search made
    (``attnlab.linear.ONEDNN_COPIES``, in the order of first use) called one after another at 4
    rows, as a step does — each weight read from wherever the others left it — against each
    called on its own in a loop (its weight then stays in the core's caches)."""
    from attnlab.linear import ONEDNN_COPIES

    packed = [(weight.shape, copy) for weight, (_, copy) in ONEDNN_COPIES.items()]
    linear = torch.ops.mkldnn._linear_pointwise
    inputs = {shape[1]: torch.randn(4, shape[1]) for shape, _ in packed}
    cycled = {k: [] for k in range(len(packed))}
    for _ in range(30 * repeats):
        for k, (shape, copy) in enumerate(packed):
            start = time.perf_counter()
            linear(inputs[shape[1]], copy, None, "none", [], "")
            cycled[k].append(time.perf_counter() - start)
    alone = []
    for shape, copy in packed:
        times = []
        for _ in range(30 * repeats):
            start = time.perf_counter()
            linear(inputs[shape[1]], copy, None, "none", [], "")
            times.append(time.perf_counter() - start)
        alone.append(statistics.median(times))
    megabytes = sum(shape.numel() for shape, _ in packed) * 4 / 2**20
    print(f"the step's {len(packed)} products at 4 rows ({megabytes:.1f} MiB of weights): "
          f"{1e3 * sum(statistics.median(t) for t in cycled.values()):.2f} ms called in turn, "
          f"{1e3 * sum(alone):.2f} ms each alone (medians)")


def package_share(run, seconds: float) -> None:
    """Thread CPU time inside the package's calls during one more run, against the run's."""
    from attnlab.generation.aot import AotStep

    call, spent = AotStep.__call__, []

    def timed(self, *args, **kwargs):
        start = time.thread_time()
        try:
            return call(self, *args, **kwargs)
        finally:
            spent.append(time.thread_time() - start)

    AotStep.__call__ = timed
    try:
        start = time.thread_time()
        run()
        whole = time.thread_time() - start
    finally:
        AotStep.__call__ = call
    print(f"the package: {len(spent)} calls, {sum(spent):.3f} s of this run's {whole:.3f} s "
          f"({100 * sum(spent) / whole:.0f} %; the median run above: {seconds:.3f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=list(cpu_engines.TRANSLATE_SHAPES), default="multi30k")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compile", choices=["off", "aot"], default="off")
    args = parser.parse_args()
    compile = "aot" if args.compile == "aot" else False
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as directory:
        model, tokenizer, _ = load_hf_marian(cpu_engines.build_marian(
            args.shape, directory, cpu_engines.train_sentencepiece(directory)))
    config = model.config
    sources = cpu_engines.multi30k_lines("test_2016_flickr.de.gz")[:args.sentences]
    batches = cpu_engines.translation_batches(tokenizer, sources, args.batch, config.pad_id, config.eos_id)

    def run():
        return [hyps[0].tokens for src, _, limit in batches
                for hyps in beam_search(model, src, beam_size=4, alpha=0.0, max_len_a=0, max_len_b=limit,
                                        compile=compile)]

    run()
    times = []
    for _ in range(args.repeats):
        start = time.thread_time()
        outputs = run()
        times.append(time.thread_time() - start)
    seconds = statistics.median(times)
    steps = sum(map(len, outputs))  # one beam step per output token of the best hypothesis, per source
    print(f"{args.shape}, batch {args.batch}, {len(sources)} sentences: {seconds:.3f} s of thread CPU time "
          f"(median of {args.repeats}), {steps} output steps, {1000 * seconds / steps:.2f} ms a step")
    if compile:
        package_share(run, seconds)
    else:
        cycle_products(args.repeats)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        run()
    averages = profiler.key_averages()
    products = sum(event.self_cpu_time_total for event in averages
                   if event.key in ("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm", "aten::addmv"))
    total = sum(event.self_cpu_time_total for event in averages)
    print(f"products{' outside the package' if compile else ''} {products / 1e3:.0f} ms of the operators' "
          f"{total / 1e3:.0f} ms under the profiler "
          f"({1e-3 * products / steps:.2f} ms a step)")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
