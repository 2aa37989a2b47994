"""Greedy generation speed: attnlab's DecoderLM against HuggingFace's GPT2LMHeadModel.

Both models are built in this process with the same configuration and the same weights
(HuggingFace initialises, ``attnlab.interop.from_hf_gpt2`` copies), and both must produce
identical tokens. Measured, as medians of interleaved repetitions:

* batch-1 greedy decoding of 256 new tokens after a 16-token prompt, float32, at two sizes:
  small (3 layers, d_model 256, 8 heads, vocabulary 8000) and medium (6 layers, d_model
  512, 8 heads, vocabulary 8000, 1024 positions): tokens/s, the ratio, and attnlab's
  fraction of the memory-bandwidth bound (parameter bytes read per token / a measured
  large matrix–vector bandwidth);
* the same with bf16 weights (reported separately; tokens are compared, not asserted,
  since the two libraries round differently in bf16);
* time per token against context length (attnlab, medium, one decode step);
* batch-8 throughput (8 prompts of 16 tokens, 256 new tokens each).

``--step-products``: only an A/B of the decode step's matrix products, ``F.linear`` against
``attnlab.linear.step_linear`` (one row as ``addmv``), on both sizes and a 28x28 Image
Transformer sample (``step_products``).

Run:  python benchmarks/generate_lm.py [--threads N] [--repeats 5] [--sizes small medium] [--step-products]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import interleaved_medians, matvec_bandwidth  # noqa: E402

from attnlab.generation import generate  # noqa: E402
from attnlab.interop import from_hf_gpt2  # noqa: E402

SIZES = {
    "small": dict(n_layer=3, n_embd=256, n_head=8, vocab_size=8000, n_positions=1024),
    "medium": dict(n_layer=6, n_embd=512, n_head=8, vocab_size=8000, n_positions=1024),
}


def build_pair(size: str, dtype=torch.float32):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(**SIZES[size], bos_token_id=0, eos_token_id=0)
    hf = GPT2LMHeadModel(config).eval()
    ours = from_hf_gpt2(hf)
    return hf.to(dtype), ours.to(dtype)


def hf_generate(hf, prompt: torch.Tensor, new_tokens: int) -> list[list[int]]:
    with torch.inference_mode():
        out = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                          min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[:, prompt.shape[1]:].tolist()


def ours_generate(model, prompt: torch.Tensor, new_tokens: int) -> list[list[int]]:
    return generate(model, prompt, max_new_tokens=new_tokens, greedy=True)


def bytes_per_token(model) -> int:
    """Parameter bytes one decode step reads: every weight once (the tied embedding serves
    as the output projection, read in full), except the position table, of which one row."""
    total = 0
    for name, parameter in model.named_parameters():
        if name.endswith("positions.weight"):
            total += parameter[0].numel() * parameter.element_size()
        else:
            total += parameter.numel() * parameter.element_size()
    return total


def compare(size: str, dtype, prompt_len: int, new_tokens: int, repeats: int, batch: int = 1,
            bandwidth: float | None = None, strict: bool = True) -> dict:
    hf, ours = build_pair(size, dtype)
    prompt = torch.randint(0, 8000, (batch, prompt_len), generator=torch.Generator().manual_seed(1))
    theirs_tokens, our_tokens = hf_generate(hf, prompt, new_tokens), ours_generate(ours, prompt, new_tokens)
    same = theirs_tokens == our_tokens
    if strict and not same:
        raise AssertionError(f"{size}: attnlab and HuggingFace generated different tokens")
    medians = interleaved_medians({"hf": lambda: hf_generate(hf, prompt, new_tokens),
                                   "attnlab": lambda: ours_generate(ours, prompt, new_tokens)}, repeats=repeats)
    result = {"size": size, "dtype": str(dtype).removeprefix("torch."), "batch": batch, "same_tokens": same,
              "hf_tok_s": batch * new_tokens / medians["hf"], "attnlab_tok_s": batch * new_tokens / medians["attnlab"]}
    result["ratio"] = result["attnlab_tok_s"] / result["hf_tok_s"]
    if bandwidth is not None:
        bound = bandwidth / bytes_per_token(ours)
        result["bound_tok_s"] = bound
        result["fraction_of_bound"] = result["attnlab_tok_s"] / bound
    return result


@torch.inference_mode()
def time_per_token_vs_context(size: str, contexts: list[int], steps: int = 32, repeats: int = 5) -> list[tuple]:
    """Milliseconds of one attnlab decode step with ``context`` positions already cached
    (and the same for HuggingFace's forward with its DynamicCache)."""
    hf, ours = build_pair(size)
    rows = []
    for context in contexts:
        ids = torch.randint(0, 8000, (1, context))
        token = torch.tensor([7])

        def run_ours():
            cache = ours.new_cache(1, context + steps)
            ours.prefill(ids, cache)
            start = time.perf_counter()
            for _ in range(steps):
                ours.step(token, cache)
            return time.perf_counter() - start

        def run_hf():
            out = hf(ids, use_cache=True)
            past = out.past_key_values
            start = time.perf_counter()
            for _ in range(steps):
                past = hf(token[None], past_key_values=past, use_cache=True).past_key_values
            return time.perf_counter() - start

        ours_ms = sorted(run_ours() for _ in range(repeats))[repeats // 2] / steps * 1e3
        hf_ms = sorted(run_hf() for _ in range(repeats))[repeats // 2] / steps * 1e3
        rows.append((context, ours_ms, hf_ms))
    return rows


def step_products(repeats: int, new_tokens: int, prompt_len: int) -> None:
    """The decode step's products as ``F.linear`` (before) against ``attnlab.linear.step_linear``
    (a single row as ``addmv``), interleaved in this process: batch-1 greedy decoding of both
    LM sizes and one greedy 28x28 ``imagetransformer_mnist_small`` sample; outputs must match."""
    import torch.nn.functional as F

    import attnlab
    import attnlab.attention.multihead as multihead
    import attnlab.layers.blocks as blocks
    from attnlab.generation import sample_images
    from attnlab.linear import step_linear

    def choose(new: bool) -> None:  # read by prepare_step when generate / sample_images make a cache
        multihead.step_linear = blocks.step_linear = step_linear if new else (lambda weight: F.linear)

    torch.manual_seed(0)
    prompt = torch.randint(1, 8000, (1, prompt_len))
    cases = {}
    for size in SIZES:
        from transformers import GPT2Config, GPT2LMHeadModel

        model = from_hf_gpt2(GPT2LMHeadModel(GPT2Config(**SIZES[size])).eval())
        cases[f"{size} LM, {new_tokens} tokens"] = lambda model=model: generate(
            model, prompt, max_new_tokens=new_tokens, greedy=True)[0]
    image_model = attnlab.create_model("imagetransformer_mnist_small").eval()
    cases["28x28 image sample"] = lambda: sample_images(image_model, 1, temperature=0).flatten().tolist()
    for name, run in cases.items():
        outputs = {}

        def timed(new, run=run):
            choose(new)
            outputs[new] = run()

        medians = interleaved_medians({"F.linear": lambda: timed(False), "step_linear": lambda: timed(True)},
                                      repeats=repeats)
        choose(True)
        print(f"  {name}: F.linear {medians['F.linear'] * 1e3:.1f} ms, step_linear {medians['step_linear'] * 1e3:.1f} "
              f"ms, {medians['F.linear'] / medians['step_linear']:.2f}x, same outputs {outputs[False] == outputs[True]}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["small", "medium"], choices=sorted(SIZES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["bf16", "context", "batch8"])
    parser.add_argument("--step-products", action="store_true",
                        help="only the A/B of the decode step's products (F.linear vs step_linear's addmv)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, repeats {args.repeats}")
    if args.step_products:
        return step_products(args.repeats, args.new_tokens, args.prompt_len)
    bandwidth = matvec_bandwidth()
    print(f"matrix-vector bandwidth (512 MB float32 matrix): {bandwidth / 1e9:.1f} GB/s")

    def show(r):
        line = (f"{r['size']:>6} {r['dtype']:>8} batch {r['batch']}: HF {r['hf_tok_s']:7.1f} tok/s, "
                f"attnlab {r['attnlab_tok_s']:7.1f} tok/s, ratio {r['ratio']:.2f}x, same tokens {r['same_tokens']}")
        if "fraction_of_bound" in r:
            line += f", bound {r['bound_tok_s']:.0f} tok/s, fraction {r['fraction_of_bound']:.2f}"
        print(line, flush=True)

    for size in args.sizes:
        show(compare(size, torch.float32, args.prompt_len, args.new_tokens, args.repeats, bandwidth=bandwidth))
    if "bf16" not in args.skip:
        for size in args.sizes:
            show(compare(size, torch.bfloat16, args.prompt_len, args.new_tokens, args.repeats,
                         bandwidth=bandwidth, strict=False))
    if "batch8" not in args.skip:
        for size in args.sizes:
            show(compare(size, torch.float32, args.prompt_len, args.new_tokens, max(3, args.repeats // 2), batch=8))
    if "context" not in args.skip:
        size = args.sizes[-1]
        print(f"time per token vs context ({size}, float32, batch 1): context, attnlab ms, HF ms")
        for context, ours_ms, hf_ms in time_per_token_vs_context(size, [16, 128, 256, 512, 960]):
            print(f"  {context:5d}  {ours_ms:6.2f}  {hf_ms:6.2f}", flush=True)


if __name__ == "__main__":
    main()
