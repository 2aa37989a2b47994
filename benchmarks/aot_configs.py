"""Greedy LM packages built two ways, side by side: ``FOLDED_CONFIGS`` (every product timed between
inductor's C++ GEMM templates and ATen/oneDNN, the faster kept) against the C++ templates alone
(``FEW_ROWS_CONFIGS``, what beam search's packages of at most 16 rows use: there oneDNN's per-call
set-up was a fifth of a 4-row step). Does one row gain as 4 did?

    taskset -c 0 python benchmarks/aot_configs.py [--sizes small medium] [--repeats 7]

GPT-2-shaped models of ``cpu_engines.SIZES`` (random weights, one thread), 16-token prompt, the
size's new tokens, greedy through ``generate(compile="aot")``; each package built once into its own
fresh cache directory (untimed), then medians of interleaved runs in ms per token. Tokens are
checked against the eager step's in every run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import cpu_engines  # noqa: E402

from attnlab.generation import aot, generate  # noqa: E402
from attnlab.interop import from_hf_gpt2  # noqa: E402


def run_size(size: str, repeats: int) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(**cpu_engines.SIZES[size][0], bos_token_id=0, eos_token_id=0)).eval()
    vocabulary, new_tokens = cpu_engines.SIZES[size][0]["vocab_size"], cpu_engines.SIZES[size][1]
    prompt = torch.randint(1, vocabulary, (1, 16), generator=torch.Generator().manual_seed(1))
    eager = generate(from_hf_gpt2(hf).eval(), prompt, max_new_tokens=new_tokens, greedy=True)
    folded = dict(aot.FOLDED_CONFIGS)
    base = tempfile.mkdtemp(prefix="attnlab-aot-configs-")
    runs = {}
    try:
        for name, configs in (("CPP,ATEN (FOLDED_CONFIGS)", folded), ("CPP only (FEW_ROWS_CONFIGS)", aot.FEW_ROWS_CONFIGS)):
            os.environ["ATTNLAB_CACHE"] = directory = f"{base}/{len(runs)}"
            aot.FOLDED_CONFIGS.clear()
            aot.FOLDED_CONFIGS.update(configs)  # what a batch-1 LM package is built with
            model = from_hf_gpt2(hf).eval()
            started = time.perf_counter()
            generate(model, prompt, max_new_tokens=new_tokens, greedy=True, compile="aot")
            print(f"{size}: {name} built in {time.perf_counter() - started:.0f} s", flush=True)
            runs[name] = (model, directory)
    finally:
        aot.FOLDED_CONFIGS.clear()
        aot.FOLDED_CONFIGS.update(folded)
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, (model, directory) in runs.items():
            os.environ["ATTNLAB_CACHE"] = directory
            started = time.perf_counter()
            tokens = generate(model, prompt, max_new_tokens=new_tokens, greedy=True, compile="aot")
            times[name].append((time.perf_counter() - started) / new_tokens * 1e3)
            assert tokens == eager, f"{name}: tokens differ from the eager step's"
    print(f"{size} ({new_tokens} tokens, medians of {repeats}): " + ", ".join(
        f"{name} {statistics.median(v):.3f} ms/token" for name, v in times.items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=["small", "medium", "gpt2"], default=["small", "medium"])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for size in args.sizes:
        run_size(size, args.repeats)


if __name__ == "__main__":
    main()
