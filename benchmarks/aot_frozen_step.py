"""What torch's own compilers can make of a decode step, against CTranslate2's (issue 40's unmet rows).

Beam search's step (``--step beam``, the default: the random Marian model of ``cpu_engines.py
--translate``, ``--shape multi30k|transformer_base``, ``--batch`` sources x 4 beams) or a
language model's greedy step (``--step lm``, ``--size small|medium``: the GPT-2-shaped model of
``cpu_engines.py``), each compiled ahead of time (AOTInductor) in the ways torch offers:

* **package**: attnlab's own (``compile="aot"``: on the CPU since 7103279 folded as frozen+cpp below;
  ``ATTNLAB_AOT_WEIGHTS=outside`` gives the form of the docs' 00:17-00:33 rows: weights read from
  the model, plain GEMMs);
* **frozen**: inductor's ``freezing`` (the weights folded into the package, its products
  prepacked for oneDNN);
* **frozen+cpp**: freezing and ``max_autotune`` with inductor's C++ GEMM templates (it
  benchmarks its own generated GEMM kernels against oneDNN's per product and keeps the faster);
* (``--step lm``) **int8 pt2e**: dynamic int8 (int8 weights per channel, activations quantised per
  call) by torchao's ``X86InductorQuantizer``, frozen: oneDNN's int8 products (needs ``torchao``,
  not one of attnlab's dependencies: ``pip install --no-deps torchao``; the row is skipped without it);

against the eager step and CTranslate2 (fp32, and int8 for ``--step lm``). CT2 runs its whole
search or generation; its time per step is (time for N+1 steps - time for 1 step) / N, so its
encoder and prompt are left out as attnlab's rows leave them out. Wall time (CT2 keeps its own
thread) on one pinned core, one thread, medians of interleaved rounds; every compiled step's first
logits are checked against the eager step's first.

    taskset -c 0 python benchmarks/aot_frozen_step.py                     # beam, multi30k, 1 source
    taskset -c 0 python benchmarks/aot_frozen_step.py --batch 32 --static
    taskset -c 0 python benchmarks/aot_frozen_step.py --step lm --size small

The frozen rows are not a product path: a frozen package holds the weights it was built from
(stale when they change, the form attnlab's folded packages rebuild for). For the frozen rows the
step is exported as attnlab's folded packages export it (``linear.products_for_folding``: every
product ``F.linear``, one row too, which freezing prepacks and the C++ templates take; the
one-row ``addmv`` is neither; the head multiplies its transposed copy). The rows of
docs/benchmarks.md of 2026-11-28 00:17-00:33 UTC were measured at 64747a4, whose own patch also
sent the head through ``F.linear`` on its table. ``--static`` exports beam search's rows as a fixed size
(the C++ templates autotune a fixed number of rows only). Builds take 10-60 s each, untimed.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import copy
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(__file__))
import cpu_engines as ce  # noqa: E402

from attnlab.generation import aot  # noqa: E402
from attnlab.linear import packed_inference, products_for_folding  # noqa: E402

FROZEN = {"freezing": True}
FROZEN_CPP = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}


def export_step(model, kind: str, capacity: int, *, memory=None, memory_mask=None, beam: int | None = None,
                static: bool, linear: bool):
    """The step of a copy of ``model`` (fresh step plans) exported as attnlab's package exports it:
    one row ("causal"), or ``beam`` rows per source of ``memory`` ("search")."""
    with contextlib.ExitStack() as stack:
        if linear:
            stack.enter_context(products_for_folding())
        copy_ = copy.deepcopy(model)  # a copy drops the step plans: made afresh for this export
        if kind == "search":
            cache = copy_.new_step_cache(memory, rows_per_source=beam, capacity=capacity, fixed_shape=True)
        else:
            cache = copy_.new_cache(1, capacity, fixed_shape=True)
        layout = aot._layout_of(copy_, kind, cache.positions.shape[0], beam, cache)
        stack_ = aot._stack(copy_)
        module = aot._StepModule(copy_, layout, aot.derived_tensors(copy_), len(stack_.layers),
                                 cache.conditioning is not None, stack_.has_cross_attention)
        if static:
            example = (torch.zeros(cache.positions.shape[0], dtype=torch.long), cache.step_tensors())
            example += (memory_mask,) if kind == "search" else ()
            shapes = None
        else:
            example, shapes = aot._example_inputs(copy_, layout, cache, memory_mask)
        stack.enter_context(packed_inference(False))
        stack.enter_context(torch.no_grad())
        return torch.export.export(module, example, dynamic_shapes=shapes, strict=True), example


def build(exported, directory: str, name: str, configs: dict):
    start = time.perf_counter()
    path = torch._inductor.aoti_compile_and_package(exported, package_path=os.path.join(directory, name + ".pt2"),
                                                    inductor_configs=configs)
    runner = torch._C._aoti.AOTIModelPackageLoader(path, "model", False, 1, -1).run
    print(f"  {name}: built in {time.perf_counter() - start:.0f} s", flush=True)
    return runner


def pt2e_int8(exported, example):
    """The exported step quantised to dynamic int8 by torchao's X86InductorQuantizer (None without torchao)."""
    try:
        import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as x86
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    except ImportError:
        print("  int8 pt2e: skipped (torchao is not installed: pip install --no-deps torchao)")
        return None
    quantizer = x86.X86InductorQuantizer()
    quantizer.set_global(x86.get_default_x86_inductor_quantization_config(is_dynamic=True))
    prepared = prepare_pt2e(exported.module(), quantizer)
    with torch.no_grad():
        prepared(*example)
        return torch.export.export(convert_pt2e(prepared), example, strict=False)


def per_step(call_n, call_1, steps: int):
    """Seconds a step of an engine that runs whole searches: (N+1 steps - 1 step) / N."""
    def run():
        start = time.perf_counter()
        call_n()
        middle = time.perf_counter()
        call_1()
        return (middle - start - (time.perf_counter() - middle)) / steps
    return run


def report(calls: dict, rounds: int, first: str, peers: list[str]) -> None:
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, run in calls.items():
            times[name].append(run())
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"\nms a step (wall time, median of {rounds} interleaved rounds)" + "".join(f"; / {p}" for p in peers))
    for name, seconds in medians.items():
        ratios = "".join(f"   {medians[p] / seconds:5.2f}x" for p in peers)
        print(f"  {name:22s} {1e3 * seconds:8.3f}{ratios}")
    print(f"(ratios: the peer's time over the row's, > 1 is faster than the peer; {first} is attnlab's default step)")


def check(name: str, out, ref) -> None:
    finite = torch.isfinite(ref)
    print(f"  {name}: max |out - eager| {float((out - ref)[finite].abs().max()):.2e}, same -inf positions "
          f"{bool((torch.isfinite(out) == finite).all())}, same argmax {bool((out.argmax(-1) == ref.argmax(-1)).all())}")


def beam(args, directory: str) -> None:
    import ctranslate2

    from attnlab.interop import load_hf_marian

    hf_dir = ce.build_marian(args.shape, directory, ce.train_sentencepiece(directory))
    ctranslate2.converters.TransformersConverter(hf_dir).convert(hf_dir + "-ct2", quantization=None)
    translator = ctranslate2.Translator(hf_dir + "-ct2", device="cpu", compute_type="float32", intra_threads=1)
    model, tokenizer, _ = load_hf_marian(hf_dir)
    model.eval()
    lines = ce.multi30k_lines("test_2016_flickr.de.gz")[:args.batch]
    src, lengths, _ = ce.translation_batches(tokenizer, lines, args.batch, model.config.pad_id, model.config.eos_id)[0]
    sources = [tokenizer.pieces(src[row, :n].tolist()) for row, n in enumerate(lengths)]
    rows = 4 * args.batch
    with torch.no_grad():
        memory, _ = model.encode(src)
        memory_mask = (src != model.config.pad_id)[:, None, None, :]
        capacity = aot.aot_capacity(model, args.steps + 8)
        cache = model.new_step_cache(memory, rows_per_source=4, capacity=capacity, fixed_shape=True)
        print(f"{args.shape}, {args.batch} source(s) x 4 beams = {rows} rows, capacity {capacity}, "
              f"{'static' if args.static else 'dynamic'} rows")
        package = aot.aot_step(model, "search", cache, beam=4, memory_mask=memory_mask)
        exported, _ = export_step(model, "search", capacity, memory=memory, memory_mask=memory_mask, beam=4,
                                  static=args.static, linear=True)
        runners = {"package (attnlab)": lambda tokens: package(tokens, cache, memory_mask)}
        for name, configs in (("frozen", FROZEN), ("frozen+cpp", FROZEN_CPP)):
            run = build(exported, directory, name.replace("+", "_"), configs)
            runners[name] = lambda tokens, run=run: run([tokens, *cache.step_tensors(), memory_mask])[0]
        tokens = torch.full((rows,), 5, dtype=torch.long)
        start = cache.snapshot()

        with packed_inference():  # a search step's package gives log-probabilities
            ref = torch.log_softmax(model.decode_step(tokens, model.new_step_cache(memory, rows_per_source=4,
                                                                                   capacity=capacity), memory_mask), -1)
        for name, run in runners.items():
            cache.restore(start)
            check(name, run(tokens), ref)

        def eager():
            eager_cache = model.new_step_cache(memory, rows_per_source=4, capacity=capacity)
            begin = time.perf_counter()
            with packed_inference():
                for _ in range(args.steps):
                    model.decode_step(tokens, eager_cache, memory_mask)
            return (time.perf_counter() - begin) / args.steps

        def compiled(run):
            def call():
                cache.restore(start)
                begin = time.perf_counter()
                for _ in range(args.steps):
                    run(tokens)
                return (time.perf_counter() - begin) / args.steps
            return call

        def ct2(steps):
            return lambda: translator.translate_batch(sources, beam_size=4, length_penalty=0.0, max_decoding_length=steps,
                                                      min_decoding_length=steps, max_batch_size=0)

        calls = {"eager decode_step": eager, **{name: compiled(run) for name, run in runners.items()},
                 "CT2 whole search": per_step(ct2(args.steps + 1), ct2(1), args.steps)}
        for run in calls.values():
            run()
        report(calls, args.rounds, "eager decode_step", ["CT2 whole search"])


def lm(args, directory: str) -> None:
    import ctranslate2

    hf, model, converted = ce.build(args.size, directory, True)
    del hf
    model.eval()
    generators = {name: ctranslate2.Generator(path, device="cpu", compute_type=name, intra_threads=1)
                  for name, path in converted.items()}
    vocab = ce.SIZES[args.size][0]["vocab_size"]
    prompt = torch.randint(1, vocab, (1, ce.PROMPT_TOKENS), generator=torch.Generator().manual_seed(1))
    capacity = aot.aot_capacity(model, ce.PROMPT_TOKENS + args.steps + 1)
    int8 = copy.deepcopy(model).quantize("int8")
    with torch.no_grad():
        cache = model.new_cache(1, capacity, fixed_shape=True)
        print(f"LM {args.size}, greedy, 1 row, capacity {capacity}")
        package = aot.aot_step(model, "causal", cache)
        exported, example = export_step(model, "causal", capacity, static=True, linear=True)
        runners = {"package (attnlab)": lambda tokens, c: package(tokens, c)}
        variants = [("frozen", exported, FROZEN), ("frozen+cpp", exported, FROZEN_CPP)]
        quantised = pt2e_int8(exported, example)
        if quantised is not None:
            variants.append(("int8 pt2e, frozen", quantised, FROZEN))
        for name, program, configs in variants:
            run = build(program, directory, name.split(",")[0].replace("+", "_").replace(" ", "_"), configs)
            runners[name] = lambda tokens, c, run=run: run([tokens, *c.step_tensors()])[0]

    def steps_of(step, source):
        def call():
            c = source.new_cache(1, capacity, fixed_shape=step is not None)
            with torch.inference_mode():
                logits = source.prefill(prompt, c, None)
                begin = time.perf_counter()
                for _ in range(args.steps):
                    tokens = logits.argmax(-1)
                    logits = (step or source.step)(tokens, c)
                return (time.perf_counter() - begin) / args.steps
        return call

    with torch.inference_mode():  # first logits after the prompt: each compiled step against the eager one
        eager_cache = model.new_cache(1, capacity)
        tokens = model.prefill(prompt, eager_cache, None).argmax(-1)
        ref = model.step(tokens, eager_cache)
        for name, run in runners.items():
            c = model.new_cache(1, capacity, fixed_shape=True)
            model.prefill(prompt, c, None)
            check(name, run(tokens, c), ref)

    def ct2(name, steps):
        return lambda: ce.ct2_generate(generators[name], prompt, steps)

    calls = {"eager step": steps_of(None, model), "eager int8": steps_of(None, int8),
             **{name: steps_of(run, model) for name, run in runners.items()},
             "CT2 fp32": per_step(ct2("float32", args.steps + 1), ct2("float32", 1), args.steps),
             "CT2 int8": per_step(ct2("int8", args.steps + 1), ct2("int8", 1), args.steps)}
    for run in calls.values():
        run()
    report(calls, args.rounds, "eager step", ["CT2 fp32", "CT2 int8"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step", choices=["beam", "lm"], default="beam")
    parser.add_argument("--shape", choices=sorted(ce.TRANSLATE_SHAPES), default="multi30k")
    parser.add_argument("--batch", type=int, default=1, help="sources (beam search: 4 rows each)")
    parser.add_argument("--static", action="store_true", help="export beam search's rows as a fixed size")
    parser.add_argument("--size", choices=["small", "medium"], default="small")
    parser.add_argument("--steps", type=int, default=24, help="steps timed a round (default 24)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    directory = tempfile.mkdtemp()
    atexit.register(shutil.rmtree, directory, True)
    os.environ.setdefault("ATTNLAB_CACHE", os.path.join(directory, "cache"))
    (beam if args.step == "beam" else lm)(args, directory)


if __name__ == "__main__":
    main()
