"""Greedy LM packages built two ways, side by side: ``FOLDED_CONFIGS`` (every product timed between
inductor's C++ GEMM templates and ATen/oneDNN, the faster kept) against the C++ templates alone
(``FEW_ROWS_CONFIGS``, what beam search's packages of at most 16 rows use: there oneDNN's per-call
set-up was a fifth of a 4-row step). Does one row gain as 4 did?

    taskset -c 0 python benchmarks/aot_configs.py [--blocking | --screen | --codes] [--int8] [--sizes small medium]
        [--repeats 7]

GPT-2-shaped models of ``cpu_engines.SIZES`` (random weights, one thread), 16-token prompt, the
size's new tokens, greedy through ``generate(compile="aot")``; each package built once into its own
fresh cache directory (untimed), then medians of interleaved runs in ms per token. Tokens are
checked against the eager step's in every run. ``--blocking``: both packages ``FOLDED_CONFIGS``,
built with and without ``aot.ONE_ROW_BLOCKING`` and ``ONE_ROW_INT8_BLOCKING`` (what an AVX2 CPU's
one-row products gain from them); ``--int8``: the models quantised (``model.quantize("int8")``; tokens
checked against the first package's: weight-only products round their inputs to bfloat16).
``--screen``: both packages ``FOLDED_CONFIGS``, the greedy one with its head screened in int8
(``attnlab.head_screen``, what ``generate(greedy=True, compile="aot")`` builds) against the plain
step's logits and their argmax (the screen off: ``head_screen.MIN_VOCABULARY`` above the vocabulary).
``--codes`` (implies ``--int8``): the int8 package's products in 7-bit codes by the build's integer
pairs kernel (``aot._PAIRS``, what an AVX2 CPU's one-row package takes where its weights fit a quarter
of the cache) against the weight-only products; each way's tokens checked against its own first run.

``--search``: a many-row search package built two ways, ``FOLDED_CONFIGS`` (oneDNN's prepacked
products and the C++ templates, timed against each other, the faster kept) against
``MANY_ROWS_AVX2_CONFIGS`` (oneDNN's products alone: what an AVX2 CPU's package is built with), does
the tuning's choice pay on this CPU? (Until 2026-11-28 the second way was ``cpp.weight_prepack=False``,
MKL's addmm for every product: not kept, docs/benchmarks.md.) Beam 4 over 32 Multi30k test sources (one batch) at a translation shape
of ``cpu_engines.py --translate`` (``--shape``, random Marian weights, the same settings),
with CTranslate2's Translator in the same interleaved loop; seconds per search, best hypotheses
compared between the two packages.

    taskset -c 0 python benchmarks/aot_configs.py --search [--shape multi30k] [--repeats 9]
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
from common import interleaved_medians  # noqa: E402

from attnlab import head_screen  # noqa: E402
from attnlab.generation import aot, generate  # noqa: E402
from attnlab.interop import from_hf_gpt2  # noqa: E402


def run_size(size: str, repeats: int, blocking: bool = False, int8: bool = False, screen: bool = False,
             codes: bool = False) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    int8 = int8 or codes
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(**cpu_engines.SIZES[size][0], bos_token_id=0, eos_token_id=0)).eval()
    vocabulary, new_tokens = cpu_engines.SIZES[size][0]["vocab_size"], cpu_engines.SIZES[size][1]
    prompt = torch.randint(1, vocabulary, (1, 16), generator=torch.Generator().manual_seed(1))

    def made():
        model = from_hf_gpt2(hf).eval()
        return model.quantize("int8") if int8 else model

    # int8: the packages' weight-only products round their inputs to bfloat16, so the reference is the
    # first package's tokens, not the eager int8 step's
    eager = None if int8 else generate(made(), prompt, max_new_tokens=new_tokens, greedy=True)
    folded = dict(aot.FOLDED_CONFIGS)
    build = aot._BUILD
    base = tempfile.mkdtemp(prefix="attnlab-aot-configs-")
    runs = {}
    screened = head_screen.MIN_VOCABULARY
    whole = 1 << 62  # no head is screened
    rule = aot._int8_products
    products = {}  # an int8 model's products, per way (--codes)
    if codes:
        ways = [("7-bit codes, integer pairs kernel", folded, build, screened),
                ("weight-only", folded, build, screened)]
        products = {"7-bit codes, integer pairs kernel": "codes", "weight-only": "weight-only"}
    elif blocking:
        ways = [("with the one-row blockings", folded, build, screened),
                ("without", folded, build.replace(aot._ONE_ROW, ""), screened)]
    elif screen:
        ways = [("head screened in int8", folded, build, screened), ("whole head", folded, build, whole)]
    else:
        ways = [("CPP,ATEN (FOLDED_CONFIGS)", folded, build, screened),
                ("CPP only (FEW_ROWS_CONFIGS)", aot.FEW_ROWS_CONFIGS, build, screened)]
    try:
        for name, configs, script, least in ways:
            os.environ["ATTNLAB_CACHE"] = directory = f"{base}/{len(runs)}"
            aot.FOLDED_CONFIGS.clear()
            aot.FOLDED_CONFIGS.update(configs)  # what a batch-1 LM package is built with
            aot._BUILD = script
            head_screen.MIN_VOCABULARY = least
            if name in products:
                aot._int8_products = lambda model, layout, chosen=products[name]: chosen
            model = made()
            started = time.perf_counter()
            generate(model, prompt, max_new_tokens=new_tokens, greedy=True, compile="aot")
            print(f"{size}: {name} built in {time.perf_counter() - started:.0f} s", flush=True)
            runs[name] = (model, directory, least)
    finally:
        aot.FOLDED_CONFIGS.clear()
        aot.FOLDED_CONFIGS.update(folded)
        aot._BUILD = build
        head_screen.MIN_VOCABULARY = screened
        aot._int8_products = rule
    times = {name: [] for name in runs}
    first = {}
    try:
        for _ in range(repeats):
            for name, (model, directory, least) in runs.items():
                os.environ["ATTNLAB_CACHE"] = directory
                head_screen.MIN_VOCABULARY = least
                if name in products:
                    aot._int8_products = lambda model, layout, chosen=products[name]: chosen
                started = time.perf_counter()
                tokens = generate(model, prompt, max_new_tokens=new_tokens, greedy=True, compile="aot")
                times[name].append((time.perf_counter() - started) / new_tokens * 1e3)
                if products:  # each way against its own first run
                    assert first.setdefault(name, tokens) == tokens, f"{name}: tokens differ between runs"
                    continue
                eager = tokens if eager is None else eager
                assert tokens == eager, f"{name}: tokens differ from the eager step's (int8: the first package's)"
    finally:
        head_screen.MIN_VOCABULARY = screened
        aot._int8_products = rule
    if products:
        int8_eager = generate(made(), prompt, max_new_tokens=new_tokens, greedy=True)
        print(f"{size}: tokens equal to the eager int8 step's: " + ", ".join(
            f"{name} {cpu_engines.first_difference(tokens, int8_eager) is None}" for name, tokens in first.items()))
    print(f"{size}{' int8' if int8 else ''} ({new_tokens} tokens, medians of {repeats}): " + ", ".join(
        f"{name} {statistics.median(v):.3f} ms/token" for name, v in times.items()), flush=True)


def run_search(shape: str, repeats: int, sources: int = 32) -> None:
    import warnings

    from attnlab.generation import beam_search
    from attnlab.interop import load_hf_marian

    warnings.simplefilter("ignore")
    base = tempfile.mkdtemp(prefix="attnlab-aot-configs-")
    spm_model = cpu_engines.train_sentencepiece(base)
    hf_dir = cpu_engines.build_marian(shape, base, spm_model)
    test = cpu_engines.multi30k_lines("test_2016_flickr.de.gz")[:sources]
    model, tokenizer, _ = load_hf_marian(hf_dir)
    ((src, lengths, limit),) = cpu_engines.translation_batches(tokenizer, test, sources, model.config.pad_id,
                                                               model.config.eos_id)
    eos = model.config.eos_id
    runs = {}
    folded, many = dict(aot.FOLDED_CONFIGS), dict(aot.MANY_ROWS_AVX2_CONFIGS)
    try:
        # the model loaded above for the first package, a second copy for the other (packages are kept per model)
        ways = (("FOLDED_CONFIGS", folded, model), ("oneDNN alone", many, load_hf_marian(hf_dir)[0]))
        for name, configs, own in ways:
            os.environ["ATTNLAB_CACHE"] = directory = f"{base}/{len(runs)}"
            for kept in (aot.FOLDED_CONFIGS, aot.MANY_ROWS_AVX2_CONFIGS):  # what a many-row package is built with
                kept.clear()
                kept.update(configs)

            def search(model=own):
                return [[t for t in hyps[0].tokens if t != eos] for hyps in beam_search(
                    model, src, beam_size=4, alpha=0.0, max_len_a=0, max_len_b=limit, compile="aot")]

            started = time.perf_counter()
            search()
            print(f"search, {shape}: {name} built in {time.perf_counter() - started:.0f} s", flush=True)
            runs[name] = (search, directory)
    finally:
        for kept, configs in ((aot.FOLDED_CONFIGS, folded), (aot.MANY_ROWS_AVX2_CONFIGS, many)):
            kept.clear()
            kept.update(configs)
    try:
        import ctranslate2
    except ImportError:
        ctranslate2 = None
    if ctranslate2 is not None:
        ctranslate2.converters.TransformersConverter(hf_dir).convert(hf_dir + "-ct2", quantization=None)
        translator = ctranslate2.Translator(hf_dir + "-ct2", device="cpu", compute_type="float32", intra_threads=1)
        pieces = cpu_engines.ct2_pieces(tokenizer, src, lengths)
        runs["CT2"] = (lambda: cpu_engines.ct2_beam(translator, tokenizer, pieces, limit), None)
    best = {}

    def timed(name, run, directory):
        def call():
            if directory:
                os.environ["ATTNLAB_CACHE"] = directory
            best[name] = run()
        return call

    medians = interleaved_medians({name: timed(name, *way) for name, way in runs.items()}, repeats=repeats, warmup=0)
    same = {name: sum(a == b for a, b in zip(best["FOLDED_CONFIGS"], out)) for name, out in best.items()}
    print(f"search, {shape}, {sources} sources, beam 4, medians of {repeats}: " + ", ".join(
        f"{name} {seconds:.3f} s" for name, seconds in medians.items())
        + f"; FOLDED/oneDNN alone {medians['FOLDED_CONFIGS'] / medians['oneDNN alone']:.3f}"
        + ("".join(f", {name}/CT2 {medians['CT2'] / medians[name]:.3f}x" for name in ("FOLDED_CONFIGS", "oneDNN alone"))
           if "CT2" in medians else "")
        + "; best hypotheses equal to FOLDED_CONFIGS': " + ", ".join(
            f"{name} {count}/{sources}" for name, count in same.items() if name != "FOLDED_CONFIGS"), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=["small", "medium", "gpt2"], default=["small", "medium"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--blocking", action="store_true", help="greedy packages built with and without "
                        "aot.ONE_ROW_BLOCKING (one-row float32 products on an AVX2 CPU), instead of the two configs")
    parser.add_argument("--screen", action="store_true", help="greedy packages with the head screened in int8 "
                        "(attnlab.head_screen) and without, instead of the two configs")
    parser.add_argument("--int8", action="store_true", help="the models quantised (model.quantize('int8'))")
    parser.add_argument("--codes", action="store_true", help="int8 packages in 7-bit codes by the build's integer "
                        "pairs kernel against weight-only products (implies --int8)")
    parser.add_argument("--search", action="store_true", help="the many-row search package: FOLDED_CONFIGS against "
                        "MANY_ROWS_AVX2_CONFIGS (and CTranslate2), instead of the greedy sizes")
    parser.add_argument("--shape", choices=sorted(cpu_engines.TRANSLATE_SHAPES), default="multi30k",
                        help="--search's translation shape")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.search:
        run_search(args.shape, args.repeats)
        return
    for size in args.sizes:
        run_size(size, args.repeats, args.blocking, args.int8, args.screen, args.codes)


if __name__ == "__main__":
    main()
