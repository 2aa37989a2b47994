"""Relative attention: the Music Transformer's skewing vs Shaw et al.'s gathered pairs,
and sampling with vs without the key/value cache.

    python benchmarks/relative_attention.py --threads 1 --repeats 5
    python benchmarks/relative_attention.py --threads 1 --skip-layer --sample-tokens 1024
    python benchmarks/relative_attention.py --threads 1 --repeats 5 --skew-chunk-elements 0   # skew in one piece

Layer part: one self-attention layer (``MultiHeadAttention``, d_model 512, 8 heads, causal,
``max_relative_position = L - 1`` so every distance has its own embedding, as in the
paper's comparison) on one sequence of L = 512, 1024, 2048: forward + backward of
``out.sum()`` w.r.t. the input and all parameters, float32, CPU.

``relative_skew`` computes inputs of more than ``RelativeSkew.chunk_elements`` logits (2²¹:
L = 2048 here) in checkpointed query chunks; ``--skew-chunk-elements 0`` measures it in one
piece, as the paper's layer does.

* time: medians of interleaved repetitions in one process (benchmarks/common.py);
* memory, two honest CPU measures, each (pattern, L) in a fresh child process:
  - *peak RSS increase*: the child resets the kernel's peak-RSS mark (``echo 5 >
    /proc/self/clear_refs``), notes its resident size, runs forward + backward once and
    reads the peak (``VmHWM``); the difference is what the step needed beyond what was
    already resident (glibc serves blocks of >= 128 KB by mmap and unmaps them on free,
    so the large activations show up and go away as they are used);
  - *saved for backward*: the bytes of the distinct tensors autograd saves during the
    forward (``torch.autograd.graph.saved_tensors_hooks``), the activation memory that
    must survive until the backward.

Shaw's per-head pairs tensor alone is ``H·L·L·D_h·4`` bytes (8.6 GB at L = 2048, D = 512:
the paper's 8.5 GB), more than this machine can spare, so ``--shaw-max-length`` (default
1024) skips Shaw's per-head layer beyond it; the shared-embedding variant (one
``(L, L, D_h)`` tensor for all heads) runs at every length.

Sampling part: a relative Music Transformer (the ``music_performance_small`` shape
unless given ``--sample-preset``; random weights) generates ``--sample-tokens`` tokens
greedily from a one-token prompt, with ``attnlab.generation.generate`` (prefill + cached
steps) and by full recomputation of the whole prefix for every token (no cache); the
script asserts the same tokens.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_medians  # noqa: E402

from attnlab.attention import MultiHeadAttention, RelativeSkew, build_pattern  # noqa: E402

D_MODEL, HEADS = 512, 8


def layer(name: str, length: int, shared: bool) -> MultiHeadAttention:
    torch.manual_seed(0)
    pattern = build_pattern({"name": name, "max_relative_position": length - 1, "shared": shared})
    return MultiHeadAttention(D_MODEL, HEADS, pattern=pattern)


def forward_backward(module: MultiHeadAttention, x: torch.Tensor) -> None:
    out, _ = module(x)
    out.sum().backward()


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def memory_child(name: str, length: int, shared: bool) -> dict:
    """Run in a fresh process: peak RSS increase and saved-for-backward bytes of one step."""
    module = layer(name, length, shared)
    forward_backward(module, torch.randn(1, 16, D_MODEL, requires_grad=True))  # kernels and allocator warm
    module.zero_grad(set_to_none=False)
    x = torch.randn(1, length, D_MODEL, requires_grad=True)
    saved: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status_kb("VmRSS")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out, _ = module(x)
    out.sum().backward()
    peak = _status_kb("VmHWM")
    return {"peak_rss_increase_mb": (peak - before) / 1024, "saved_for_backward_mb": sum(saved.values()) / 2**20}


def measure_memory(name: str, length: int, shared: bool, threads: int) -> dict:
    command = [sys.executable, __file__, "--memory-child", name, str(length), str(int(shared)),
               "--threads", str(threads), "--skew-chunk-elements", str(RelativeSkew.chunk_elements)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def layer_part(args) -> None:
    print("| L | embeddings | skew time (s) | Shaw time (s) | time Shaw/skew | skew peak RSS + (MB) | "
          "Shaw peak RSS + (MB) | memory Shaw/skew | skew saved (MB) | Shaw saved (MB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for length in args.lengths:
        for shared in (False, True):
            runs = {}
            x = torch.randn(1, length, D_MODEL, requires_grad=True)
            names = ["relative_skew"]
            if shared or length <= args.shaw_max_length:
                names.append("relative_shaw")
            modules = {name: layer(name, length, shared) for name in names}
            for name, module in modules.items():
                runs[name] = lambda module=module: forward_backward(module, x)
            times = interleaved_medians(runs, repeats=args.repeats)
            memory = {name: measure_memory(name, length, shared, args.threads) for name in names}
            skew_t, skew_m = times["relative_skew"], memory["relative_skew"]
            kind = "shared" if shared else "per head"
            if "relative_shaw" in names:
                shaw_t, shaw_m = times["relative_shaw"], memory["relative_shaw"]
                print(f"| {length} | {kind} | {skew_t:.3f} | {shaw_t:.3f} | {shaw_t / skew_t:.1f}× | "
                      f"{skew_m['peak_rss_increase_mb']:.0f} | {shaw_m['peak_rss_increase_mb']:.0f} | "
                      f"{shaw_m['peak_rss_increase_mb'] / skew_m['peak_rss_increase_mb']:.1f}× | "
                      f"{skew_m['saved_for_backward_mb']:.0f} | {shaw_m['saved_for_backward_mb']:.0f} |", flush=True)
            else:
                print(f"| {length} | {kind} | {skew_t:.3f} | (skipped) | | {skew_m['peak_rss_increase_mb']:.0f} | "
                      f"(skipped) | | {skew_m['saved_for_backward_mb']:.0f} | |", flush=True)


@torch.inference_mode()
def recompute_greedy(model, prompt: list[int], new_tokens: int) -> list[int]:
    """No cache: the whole prefix through the model for every new token."""
    sequence = torch.tensor([prompt])
    for _ in range(new_tokens):
        next_token = model(sequence)[:, -1].argmax(-1, keepdim=True)
        sequence = torch.cat([sequence, next_token], dim=1)
    return sequence[0, len(prompt):].tolist()


def sampling_part(args) -> None:
    import attnlab
    from attnlab.generation import generate

    torch.manual_seed(0)
    model = attnlab.create_model(args.sample_preset, max_positions=args.sample_tokens + 1).eval()
    prompt = [1]
    start = time.perf_counter()
    cached = generate(model, [prompt], max_new_tokens=args.sample_tokens, greedy=True)[0]
    with_cache = time.perf_counter() - start
    start = time.perf_counter()
    naive = recompute_greedy(model, prompt, args.sample_tokens)
    without = time.perf_counter() - start
    if cached != naive:
        raise SystemExit("cached and recomputed greedy tokens differ")
    c = model.config
    print(f"sampling {args.sample_tokens} tokens, {args.sample_preset} ({c.num_layers} layers, d_model {c.d_model}, "
          f"{c.num_heads} heads, attention {c.attention}): with cache {with_cache:.2f} s "
          f"({args.sample_tokens / with_cache:.0f} tok/s), without {without:.2f} s "
          f"({args.sample_tokens / without:.1f} tok/s): {without / with_cache:.1f}× (same tokens)")
    if args.compile or args.aot:  # the compiled step: a first call that compiles, then eager and compiled interleaved
        mode = "aot" if args.aot else True
        start = time.perf_counter()
        compiled_tokens = generate(model, [prompt], max_new_tokens=args.sample_tokens, greedy=True, compile=mode)[0]
        first = time.perf_counter() - start
        times = {"eager": [], "compiled": []}
        for _ in range(args.repeats):
            for name in times:
                start = time.perf_counter()
                generate(model, [prompt], max_new_tokens=args.sample_tokens, greedy=True,
                         compile=mode if name == "compiled" else False)
                times[name].append(time.perf_counter() - start)
        eager, compiled = (sorted(times[name])[len(times[name]) // 2] for name in ("eager", "compiled"))
        print(f"{'aot' if args.aot else 'compiled'} step: first call {first:.1f} s (compiling), then with cache eager {eager:.2f} s, compiled "
              f"{compiled:.2f} s (medians of {args.repeats}): {eager / compiled:.2f}×; against no cache "
              f"{without / compiled:.1f}×; tokens {'the same' if compiled_tokens == cached else 'DIFFERENT'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--shaw-max-length", type=int, default=1024,
                        help="skip Shaw's per-head layer above this length (its pairs tensor: H·L²·D_h·4 bytes)")
    parser.add_argument("--skip-layer", action="store_true")
    parser.add_argument("--skew-chunk-elements", type=int, default=RelativeSkew.chunk_elements,
                        help="relative_skew computes inputs of more logits than this in query chunks "
                             f"(default {RelativeSkew.chunk_elements}; 0 = always in one piece)")
    parser.add_argument("--skip-sampling", action="store_true")
    parser.add_argument("--sample-tokens", type=int, default=1024)
    parser.add_argument("--sample-preset", default="music_performance_small")
    parser.add_argument("--compile", action="store_true",
                        help="sampling: also generate(..., compile=True) (attnlab.generation.compiled)")
    parser.add_argument("--aot", action="store_true",
                        help="sampling: that column with the step compiled ahead of time (compile='aot')")
    parser.add_argument("--memory-child", nargs=3, metavar=("PATTERN", "LENGTH", "SHARED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    RelativeSkew.chunk_elements = args.skew_chunk_elements
    if args.memory_child:
        name, length, shared = args.memory_child
        print(json.dumps(memory_child(name, int(length), bool(int(shared)))))
        return
    chunks = (f"relative_skew in query chunks above {args.skew_chunk_elements} logits"
              if args.skew_chunk_elements > 0 else "relative_skew in one piece")
    print(f"torch {torch.__version__}, {args.threads} thread(s), {chunks}")
    if not args.skip_layer:
        layer_part(args)
    if not args.skip_sampling:
        sampling_part(args)


if __name__ == "__main__":
    main()
