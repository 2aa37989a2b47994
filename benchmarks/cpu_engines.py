"""CPU decoding engines side by side: attnlab, HuggingFace transformers and CTranslate2.

GPT-2-shaped decoders with the same random weights in one process: HuggingFace initialises
a ``GPT2LMHeadModel`` (seed 0), ``attnlab.interop.from_hf_gpt2`` copies it, CTranslate2
converts the same saved directory (with a word-level tokenizer "t0".."tV-1" so token ids
pass through unchanged). Measured: batch 1, greedy, a 16-token prompt, medians of
interleaved repetitions (``common.interleaved_medians``), tokens/s and ratios, in

* fp32: attnlab, HF, CTranslate2 ``float32``; the tokens must be identical (attnlab vs HF
  is asserted, CTranslate2's are compared and any difference reported);
* int8: attnlab ``model.quantize("int8")`` (``attnlab.quantize``), CTranslate2 ``int8``
  (weights converted with ``quantization="int8"``); HF has no int8 path for GPT-2 here
  (its ``Conv1D`` layers are not ``nn.Linear``, so ``quantize_dynamic`` leaves them alone).
  How many tokens each follows the fp32 output is reported (random weights give nearly flat
  distributions, so int8 rounding changes a near-tie early: a check that it runs, not of
  quality; tests/test_quantize.py measures agreement on trained models).

Sizes: small (3 layers, d 256, vocabulary 8k, 128 new tokens), medium (6, 512, 8k, 128),
gpt2 (GPT-2 small: 12, 768, 50,257, 64 new tokens); threads 1 and 2.

``--kernels``: the micro-benchmark behind attnlab's choice of int8 kernel: one decode step's
linear layers of GPT-2 small (batch 1 and 4, one thread), float32 ``F.linear`` against
``torch.ops.quantized.linear_dynamic`` and the weight-only ``torch.ops.aten._weight_int8pack_mm``.

CTranslate2 is a benchmark-only dependency (``pip install ctranslate2``); without it, or with
``--no-ct2``, its columns are skipped.

``--compile`` adds a column: attnlab fp32 with the compiled step (``generate(...,
compile=True)``, attnlab.generation.compiled); its compilation happens in the untimed first
call, and its tokens are compared with the eager ones.

Run:  python benchmarks/cpu_engines.py [--quick] [--sizes small medium gpt2] [--threads 1 2]
      [--repeats 5] [--kernels] [--no-ct2] [--compile]
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import interleaved_medians  # noqa: E402

from attnlab.generation import generate  # noqa: E402
from attnlab.interop import from_hf_gpt2  # noqa: E402

SIZES = {
    "small": (dict(n_layer=3, n_embd=256, n_head=8, vocab_size=8000, n_positions=1024), 128),
    "medium": (dict(n_layer=6, n_embd=512, n_head=8, vocab_size=8000, n_positions=1024), 128),
    "gpt2": (dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024), 64),
}
PROMPT_TOKENS = 16


def build(size: str, directory: str, with_ct2: bool):
    """HF model (seed 0), attnlab's copy, and the CTranslate2 conversions (fp32, int8) in ``directory``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(**SIZES[size][0], bos_token_id=0, eos_token_id=0)
    hf = GPT2LMHeadModel(config).eval()
    ours = from_hf_gpt2(hf)
    converted = {}
    if with_ct2:
        import ctranslate2
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        hf_dir = os.path.join(directory, "hf")
        hf.save_pretrained(hf_dir)
        vocab = {f"t{i}": i for i in range(config.vocab_size)}
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
                                            eos_token="t0", bos_token="t0", unk_token="t0")
        tokenizer.save_pretrained(hf_dir)
        for name, quantization in (("float32", None), ("int8", "int8")):
            out = os.path.join(directory, f"ct2-{name}")
            ctranslate2.converters.TransformersConverter(hf_dir).convert(out, quantization=quantization)
            converted[name] = out
    return hf, ours, converted


def hf_generate(hf, prompt: torch.Tensor, new_tokens: int) -> list[int]:
    with torch.inference_mode():
        out = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                          min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[0, prompt.shape[1]:].tolist()


def ours_generate(model, prompt: torch.Tensor, new_tokens: int, compile: bool = False) -> list[int]:
    return generate(model, prompt, max_new_tokens=new_tokens, greedy=True, compile=compile)[0]


def ct2_generate(generator, prompt: torch.Tensor, new_tokens: int) -> list[int]:
    tokens = [f"t{i}" for i in prompt[0].tolist()]
    result = generator.generate_batch([tokens], max_length=new_tokens, min_length=new_tokens, sampling_topk=1,
                                      beam_size=1, include_prompt_in_result=False)
    return result[0].sequences_ids[0]


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run_size(size: str, threads_list: list[int], repeats: int, new_tokens: int, with_ct2: bool,
             compile: bool = False) -> None:
    with tempfile.TemporaryDirectory() as directory, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf, ours, converted = build(size, directory, with_ct2)
        ours_int8 = copy.deepcopy(ours).quantize("int8")
        prompt = torch.randint(1, SIZES[size][0]["vocab_size"], (1, PROMPT_TOKENS),
                               generator=torch.Generator().manual_seed(1))
        for threads in threads_list:
            torch.set_num_threads(threads)
            engines = {}
            if with_ct2:
                import ctranslate2

                engines = {name: ctranslate2.Generator(path, device="cpu", compute_type=name, intra_threads=threads)
                           for name, path in converted.items()}
            runs = {
                "attnlab fp32": lambda: ours_generate(ours, prompt, new_tokens),
                "HF fp32": lambda: hf_generate(hf, prompt, new_tokens),
                "attnlab int8": lambda: ours_generate(ours_int8, prompt, new_tokens),
            }
            if compile:  # its first call (below, for the tokens) compiles; the timed runs reuse it
                runs["attnlab compiled"] = lambda: ours_generate(ours, prompt, new_tokens, compile=True)
            if with_ct2:
                runs["CT2 fp32"] = lambda: ct2_generate(engines["float32"], prompt, new_tokens)
                runs["CT2 int8"] = lambda: ct2_generate(engines["int8"], prompt, new_tokens)
            tokens = {name: fn() for name, fn in runs.items()}
            if tokens["attnlab fp32"] != tokens["HF fp32"]:
                raise SystemExit(f"{size}: attnlab and HF fp32 tokens differ at position "
                                 f"{first_difference(tokens['attnlab fp32'], tokens['HF fp32'])}")
            checks = ["fp32 tokens: attnlab == HF"]
            if with_ct2:
                where = first_difference(tokens["attnlab fp32"], tokens["CT2 fp32"])
                checks.append("attnlab == CT2" if where is None else f"CT2 differs from token {where}")
            if compile:
                where = first_difference(tokens["attnlab fp32"], tokens["attnlab compiled"])
                checks.append("compiled == fp32" if where is None else f"compiled differs from token {where}")
            for name in [n for n in runs if "int8" in n]:  # greedy paths diverge for good after one difference
                where = first_difference(tokens["attnlab fp32"], tokens[name])
                checks.append(f"{name} == fp32" if where is None else f"{name} follows fp32 for {where} tokens")
            medians = interleaved_medians(runs, repeats=repeats)
            rate = {name: new_tokens / seconds for name, seconds in medians.items()}
            print(f"\n{size} (layers {SIZES[size][0]['n_layer']}, d {SIZES[size][0]['n_embd']}, vocabulary "
                  f"{SIZES[size][0]['vocab_size']}), {new_tokens} new tokens, {threads} thread(s); " + "; ".join(checks))
            for name in runs:
                print(f"  {name:14s} {rate[name]:8.1f} tokens/s")
            print(f"  ratios: attnlab/HF fp32 {rate['attnlab fp32'] / rate['HF fp32']:.2f}x, attnlab int8/fp32 "
                  f"{rate['attnlab int8'] / rate['attnlab fp32']:.2f}x" + (
                      f", attnlab/CT2 fp32 {rate['attnlab fp32'] / rate['CT2 fp32']:.2f}x, attnlab/CT2 int8 "
                      f"{rate['attnlab int8'] / rate['CT2 int8']:.2f}x" if with_ct2 else "")
                  + (f", compiled/eager fp32 {rate['attnlab compiled'] / rate['attnlab fp32']:.2f}x" if compile else "")
                  + (f", compiled/CT2 fp32 {rate['attnlab compiled'] / rate['CT2 fp32']:.2f}x"
                     if compile and with_ct2 else ""))


def kernels(repeats: int, quick: bool) -> None:
    """One decode step's linear layers of GPT-2 small, per kernel (one thread)."""
    torch.set_num_threads(1)
    shapes = [(2304, 768), (768, 768), (3072, 768), (768, 3072)]
    head = (50257, 768)
    warnings.simplefilter("ignore")
    print("\nkernels: one GPT-2-small decode step's linear layers (12 x 4 matrices + the 50,257 x 768 head), "
          "1 thread, ms")
    for rows in (1, 4):
        total = {"float32 F.linear": 0.0, "quantized.linear_dynamic": 0.0, "_weight_int8pack_mm": 0.0}
        for out_features, in_features in shapes + [head]:
            weight = torch.randn(out_features, in_features) * 0.02
            x = torch.randn(rows, in_features)
            scales = weight.abs().amax(1) / 127
            values = torch.round(weight / scales[:, None]).to(torch.int8)
            quantized = torch._make_per_channel_quantized_tensor(values, scales.double(),
                                                                 torch.zeros(out_features, dtype=torch.long), 0)
            packed = torch.ops.quantized.linear_prepack(quantized, None)
            calls = 3 if quick else (20 if out_features > 10000 else 100)
            runs = {
                "float32 F.linear": lambda: [F.linear(x, weight) for _ in range(calls)],
                "quantized.linear_dynamic": lambda: [torch.ops.quantized.linear_dynamic(x, packed, True)
                                                     for _ in range(calls)],
                "_weight_int8pack_mm": lambda: [torch.ops.aten._weight_int8pack_mm(x, values, scales)
                                                for _ in range(calls)],
            }
            medians = interleaved_medians(runs, repeats=repeats)
            count = 1 if (out_features, in_features) == head else 12
            for name, seconds in medians.items():
                total[name] += count * seconds / calls
        print(f"  batch {rows}: " + ", ".join(f"{name} {seconds * 1e3:.1f}" for name, seconds in total.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels", action="store_true", help="also the int8 kernel micro-benchmark")
    parser.add_argument("--no-ct2", action="store_true", help="skip CTranslate2")
    parser.add_argument("--compile", action="store_true",
                        help="also attnlab fp32 with the compiled step (generate(..., compile=True))")
    parser.add_argument("--quick", action="store_true",
                        help="a check that everything runs: small only, 1 thread, 16 new tokens, 2 repeats")
    args = parser.parse_args()
    with_ct2 = not args.no_ct2
    if with_ct2:
        try:
            import ctranslate2  # noqa: F401
        except ImportError:
            print("ctranslate2 is not installed (pip install ctranslate2): its columns are skipped")
            with_ct2 = False
    if args.quick:
        args.sizes, args.threads, args.repeats = ["small"], [1], 2
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"quantized engine {torch.backends.quantized.engine}, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    start = time.perf_counter()
    for size in args.sizes:
        run_size(size, args.threads, args.repeats, 16 if args.quick else SIZES[size][1], with_ct2, args.compile)
    if args.kernels or args.quick:
        kernels(args.repeats, args.quick)
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
