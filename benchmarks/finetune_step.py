"""A fine-tuning step of a GPT-2-small-shaped language model on the CPU (issue 37 §2):
attnlab full fine-tuning vs LoRA r=8, and attnlab's full step vs HuggingFace's.

    python benchmarks/finetune_step.py [--batch 2] [--length 128] [--repeats 5] [--threads N] [--peft] [--layers 12]
    python benchmarks/finetune_step.py --phases --no-memory   # where a step's CPU time goes
    python benchmarks/finetune_step.py --no-memory --roofline  # the fastest step on torch's kernels

The model: a random ``GPT2LMHeadModel(GPT2Config())`` (GPT-2 small's defaults: 12 layers,
d_model 768, 12 heads, 1,024 positions, 50,257-token vocabulary, tied head, dropout 0.1;
124M parameters) and attnlab's ``DecoderLM`` converted from it by ``from_hf_gpt2`` (the same
weights; the script first checks both give the same eval-mode loss). Every row trains on one
fixed random batch in train mode (dropout on), ``ids[:, :-1]`` in, ``ids[:, 1:]`` scored, and
does one whole update as its library's trainer does it:

* attnlab (``Trainer._update`` of ``train lm``): the summed next-token loss
  (``training.losses.lm_loss``), backward, every gradient scaled by 1 / tokens, the gradient
  norm clipped at 1.0 (``train lm``'s ``clip_grad_norm``), the optimizer step,
  ``zero_grad(set_to_none=True)``;
* HuggingFace (``Trainer.training_step`` + its update): the mean cross-entropy of the logits,
  backward, the norm clipped at ``TrainingArguments().max_grad_norm`` (1.0), the step, zero_grad.

Optimizers. HF: what its ``Trainer`` builds by default, read from the installed transformers
(``Trainer.get_optimizer_cls_and_kwargs(TrainingArguments(...))``: ``optim="adamw_torch_fused"``
= ``torch.optim.AdamW(fused=True)``, betas (0.9, 0.999), eps 1e-8, weight decay 0), lr 1e-5.
Rows (interleaved in one process, medians of ``--repeats``; glibc malloc tuning on for all,
the process-wide setting attnlab's Trainer makes):

* ``hf-full``: HF GPT2LMHeadModel, every weight trains, HF's default optimizer;
* ``attnlab-full``: attnlab, every weight trains, **the same optimizer** as ``hf-full``
  (the same class, kernel and settings): the like-for-like comparison;
* ``attnlab-full-own``: attnlab with ``train lm``'s own optimizer (``build_optimizer(model,
  "adam", betas=(0.9, 0.99), eps=1e-8)``: fused Adam on the CPU);
* ``attnlab-full-loop``: the same with ``fused=False``: torch's per-parameter loop, what
  ``build_optimizer`` used on the CPU before it picked the fused kernel;
* ``attnlab-lora8``: attnlab with ``apply_lora(LoraConfig(rank=8))`` (the attention's joint qkv
  and output projections of every layer; alpha 16), only the adapters train, ``train lm``'s optimizer;
* ``hf-peft-lora8`` (with ``--peft``): peft's LoRA r=8 on the same projections of HF GPT-2, HF's optimizer;
* ``attnlab-full-bf16`` and ``hf-full-bf16`` (with ``--bf16``): the like-for-like rows with the
  forward and loss under bf16 autocast (float32 weights, gradients and optimizer), as ``train lm
  --precision bf16`` and HF's ``TrainingArguments(bf16=True)`` run on a CPU;
* ``attnlab-full-compiled`` and ``hf-full-compiled`` (with ``--compile``): the two like-for-like
  rows with the model's forward under ``torch.compile`` (what ``train lm --compile`` and HF's
  ``TrainingArguments(torch_compile=True)`` do; each compiles in the untimed warm-up), same optimizer.

Each row's seconds are wall-clock (``perf_counter``) and, beside them, the CPU time of the
stepping thread (``thread_time``): on a machine shared with other jobs the wall clock also
counts the time the scheduler gave to others, the thread's CPU time much less so.

Peak memory, full vs LoRA: each in a fresh subprocess (``--memory full|lora``) that builds
the attnlab model alone (from the config, no HF copy), reads its resident set after
building, runs warm-up + 3 steps (``train lm``'s optimizer) and reports the peak resident set
(``VmHWM``) and the peak minus the built model's resident set (what training adds: gradients,
the optimizer's two moments, activations).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_medians  # noqa: E402

from attnlab.training.allocator import tune_allocator  # noqa: E402
from attnlab.training.lora import LoraConfig, apply_lora  # noqa: E402
from attnlab.training.losses import lm_loss  # noqa: E402
from attnlab.training.optim import build_optimizer  # noqa: E402

CLIP = 1.0  # train lm's clip_grad_norm; HF TrainingArguments().max_grad_norm (checked in main)
LR = 1e-5


def rss_bytes(field: str = "VmRSS") -> int:
    """This process's resident set (``VmRSS``) or its peak (``VmHWM``), from /proc/self/status.
    (Not ``ru_maxrss``: Linux carries it over from the parent through fork and exec, so a child
    started by a large process reports the parent's size.)"""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def attnlab_optimizer(model, fused=None):
    """``train lm``'s optimizer (cli/window_runs.py: Adam, betas (0.9, 0.99), eps 1e-8)."""
    return build_optimizer(model, "adam", lr=LR, betas=(0.9, 0.99), eps=1e-8, fused=fused)


def hf_optimizer(model, hf_default):
    cls, kwargs, weight_decay = hf_default
    return cls([p for p in model.parameters() if p.requires_grad], weight_decay=weight_decay, **kwargs)


PHASES = ("forward + loss", "backward", "scale 1/tokens", "clip", "optimizer", "zero_grad")


def attnlab_step(model, ids, optimizer, phases=None, bf16=False):
    """One update as attnlab's ``Trainer._update`` makes it (one micro-batch, one process).
    With ``phases`` (a dict of lists), each phase's thread CPU time is appended to it; with
    ``bf16`` the forward and loss run under bf16 autocast (``train lm --precision bf16``)."""
    model.train()
    batch = {"ids": ids}

    def step() -> float:
        marks = [time.thread_time()]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss_sum, tokens, _ = lm_loss(model, batch)
        marks.append(time.thread_time())
        loss_sum.backward()
        marks.append(time.thread_time())
        for parameter in model.parameters():
            if parameter.grad is not None:
                parameter.grad.mul_(1 / tokens)
        marks.append(time.thread_time())
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        marks.append(time.thread_time())
        optimizer.step()
        marks.append(time.thread_time())
        optimizer.zero_grad(set_to_none=True)
        marks.append(time.thread_time())
        _record(phases, marks)
        return float(loss_sum.detach()) / tokens

    return step


def hf_step(model, ids, optimizer, phases=None, bf16=False):
    """One update as HF's ``Trainer`` makes it: mean loss, backward, clip, step, zero_grad
    (``bf16``: the forward under bf16 autocast, as ``TrainingArguments(bf16=True)`` on a CPU)."""
    model.train()
    inputs, targets = ids[:, :-1], ids[:, 1:]

    def step() -> float:
        marks = [time.thread_time()]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(inputs).logits
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        marks.append(time.thread_time())
        loss.backward()
        marks += [time.thread_time()] * 2  # no separate scaling: the mean loss's backward scales
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        marks.append(time.thread_time())
        optimizer.step()
        marks.append(time.thread_time())
        optimizer.zero_grad(set_to_none=True)
        marks.append(time.thread_time())
        _record(phases, marks)
        return float(loss.detach())

    return step


def _record(phases, marks) -> None:
    if phases is not None:
        for name, start, end in zip(PHASES, marks, marks[1:]):
            phases.setdefault(name, []).append(end - start)


def hf_default_optimizer():
    """(class, kwargs, weight decay) of the optimizer HF's Trainer builds by default."""
    import transformers

    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(output_dir=out, learning_rate=LR, report_to=[])
        if args.max_grad_norm != CLIP:
            raise RuntimeError(f"TrainingArguments().max_grad_norm is {args.max_grad_norm}, not {CLIP}")
        cls, kwargs = transformers.Trainer.get_optimizer_cls_and_kwargs(args)
        return cls, kwargs, args.weight_decay, str(args.optim)


def product_shapes(config, batch: int, length: int) -> list[tuple[int, int, int, int, str]]:
    """Every matrix product of one full fine-tuning step of a GPT-2-shaped model, as
    ``(count, m, k, n, what)`` for ``(m, k) @ (k, n)``: each forward product and the two of its
    backward (the input's gradient and the weight's), the attention's per (sequence, head) as
    batched products, the tied head's three."""
    tokens, d, vocabulary, layers = batch * length, config.n_embd, config.vocab_size, config.n_layer
    heads, inner = config.n_head, config.n_inner or 4 * config.n_embd
    head_dim = d // heads
    shapes = []

    def weight(count, m, k, n, what):  # forward, the input's gradient, the weight's gradient
        shapes.extend([(count, m, k, n, what), (count, m, n, k, what + " dX"), (count, k, m, n, what + " dW")])

    for k, n, what in ((d, 3 * d, "qkv"), (d, d, "attention out"), (d, inner, "FFN in"), (inner, d, "FFN out")):
        weight(layers, tokens, k, n, what)
    weight(1, tokens, d, vocabulary, "head")
    # Scores q k^T and outputs p v per (sequence, head), each with two gradient products; causal:
    # only the lower triangle is needed, so half of each is counted (kept a floor, not a guess).
    pairs = layers * batch * heads / 2
    for m, k, n, what in ((length, head_dim, length, "q k^T, causal half"), (length, length, head_dim, "p v, causal half")):
        shapes.extend([(pairs, m, k, n, what), (pairs, m, n, k, what + " d1"), (pairs, k, m, n, what + " d2")])
    return shapes


def _layouts(m: int, k: int, n: int):
    """The ways a library can lay out the product (m, k) @ (k, n) for BLAS: each operand stored
    as it is or transposed, and the transposed problem (n, k) @ (k, m); the floor takes the
    fastest, whichever a real step uses."""
    for rows, inner, cols in ((m, k, n), (n, k, m)):
        for a_transposed in (False, True):
            for b_transposed in (False, True):
                a = torch.randn(inner, rows).t() if a_transposed else torch.randn(rows, inner)
                b = torch.randn(cols, inner).t() if b_transposed else torch.randn(inner, cols)
                yield a, b


def roofline(config, batch: int, length: int, repeats: int, hf_default, num_parameters: int,
             hf_cpu_seconds: float | None) -> None:
    """The fastest a step built on torch's own kernels can be on this core: every product of
    the step timed alone through ``torch.mm`` (thread CPU time, median; the fastest of its
    eight layouts), plus the same fused
    AdamW step over the model's parameters; everything else (layer norms, GELU, softmax, dropout,
    the loss, clipping) counted as free. Against HF's measured step: the most any library
    calling these kernels could gain."""
    def cpu_median(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            start = time.thread_time()
            fn()
            times.append(time.thread_time() - start)
        return statistics.median(times)

    total_seconds, total_flops, seen = 0.0, 0.0, {}
    print("\n| product (m × k × n) | count | GFLOP/s alone | seconds in a step |\n|---|---|---|---|")
    for count, m, k, n, what in product_shapes(config, batch, length):
        if (m, k, n) not in seen:
            seen[(m, k, n)] = min(cpu_median(lambda: torch.mm(a, b)) for a, b in _layouts(m, k, n))
        seconds = count * seen[(m, k, n)]
        total_seconds += seconds
        total_flops += count * 2 * m * k * n
        print(f"| {what} ({m} × {k} × {n}) | {count:g} | {2 * m * k * n / seen[(m, k, n)] / 1e9:.1f} | {seconds:.3f} |")
    embedding = config.vocab_size * config.n_embd
    parameters = [torch.nn.Parameter(torch.randn(n)) for n in (embedding, num_parameters - embedding)]
    for p in parameters:
        p.grad = torch.randn_like(p)
    cls, kwargs, weight_decay = hf_default
    optimizer = cls(parameters, weight_decay=weight_decay, **kwargs)
    optimizer_seconds = cpu_median(optimizer.step)
    floor = total_seconds + optimizer_seconds
    print(f"products: {total_flops / 1e9:.1f} GFLOP in {total_seconds:.3f} s alone ({total_flops / total_seconds / 1e9:.1f} "
          f"GFLOP/s); the fused AdamW step over {num_parameters:,} parameters {optimizer_seconds:.3f} s; "
          f"floor {floor:.3f} s of CPU time per step")
    if hf_cpu_seconds is not None:
        print(f"hf-full's step {hf_cpu_seconds:.3f} s: a step on these kernels is at most {hf_cpu_seconds / floor:.2f}x "
              f"HF's step rate (1.2x would need {hf_cpu_seconds / 1.2:.3f} s)")


def memory_child(mode: str, batch: int, length: int, threads: int, layers: int) -> None:
    import transformers

    from attnlab.interop.hf_gpt2 import config_from_hf_gpt2
    from attnlab.models.lm import DecoderLM

    torch.set_num_threads(threads)
    tune_allocator()
    torch.manual_seed(0)
    model = DecoderLM(config_from_hf_gpt2(transformers.GPT2Config(n_layer=layers)))
    if mode == "lora":
        report = apply_lora(model, LoraConfig(rank=8))
    built = rss_bytes()
    ids = torch.randint(0, model.config.vocab_size, (batch, length + 1), generator=torch.Generator().manual_seed(1))
    step = attnlab_step(model, ids, attnlab_optimizer(model))
    step()  # warm-up: the optimizer's moments are allocated here
    times = []
    for _ in range(3):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    peak = rss_bytes("VmHWM")
    print(json.dumps({"mode": mode, "built": built, "peak": peak, "step_s": statistics.median(times),
                      "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
                      "describe": report.describe() if mode == "lora" else ""}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=128, help="tokens per sequence fed to the model")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layers", type=int, default=12, help="fewer for a quick check of the script")
    parser.add_argument("--peft", action="store_true", help="add peft's LoRA on HF GPT-2 as a row")
    parser.add_argument("--compile", action="store_true",
                        help="add the like-for-like rows with torch.compile'd forwards (attnlab and HF)")
    parser.add_argument("--bf16", action="store_true",
                        help="add the like-for-like rows under bf16 autocast (attnlab and HF; a CPU with "
                             "AVX512-BF16 or AMX makes its products natively)")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    parser.add_argument("--phases", action="store_true",
                        help="instead of the rows: the thread CPU time of each phase of hf-full's and "
                             "attnlab-full's step (the same optimizer), interleaved, medians")
    parser.add_argument("--roofline", action="store_true",
                        help="after the rows: every matrix product of the step timed alone through torch.mm, "
                             "plus the optimizer step: the fastest step on these kernels, against hf-full's")
    parser.add_argument("--memory", choices=("full", "lora"), help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.memory:
        memory_child(args.memory, args.batch, args.length, args.threads, args.layers)
        return

    import transformers

    from attnlab.interop import from_hf_gpt2

    torch.set_num_threads(args.threads)
    tune_allocator()
    print(f"{args.layers} layers, threads {args.threads}, batch {args.batch} x {args.length} tokens, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}")
    if not args.no_memory:
        print("peak memory, each in a fresh process (attnlab model only):")
        for mode in ("full", "lora"):
            result = subprocess.run([sys.executable, __file__, "--memory", mode, "--batch", str(args.batch),
                                     "--length", str(args.length), "--threads", str(args.threads),
                                     "--layers", str(args.layers)],
                                    capture_output=True, text=True, check=True)
            row = json.loads(result.stdout.strip().splitlines()[-1])
            print(f"| {mode} | trainable {row['trainable']:,} | built {row['built'] / 2**20:,.0f} MiB | "
                  f"peak {row['peak'] / 2**20:,.0f} MiB | training adds {(row['peak'] - row['built']) / 2**20:,.0f} "
                  f"MiB | step {row['step_s']:.3f} s (median of 3, alone) |")
    cls, kwargs, weight_decay, optim_name = hf_default_optimizer()
    hf_default = (cls, kwargs, weight_decay)
    print(f"HF Trainer's default optimizer (optim={optim_name}): {cls.__module__}.{cls.__qualname__}"
          f"({', '.join(f'{k}={v}' for k, v in kwargs.items())}, weight_decay={weight_decay}); "
          f"max_grad_norm {CLIP}")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=args.layers)
    hf = transformers.GPT2LMHeadModel(config)
    ours = from_hf_gpt2(hf)
    ours_lora = from_hf_gpt2(hf)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.length + 1), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hf.eval(), ours.eval()
        a = F.cross_entropy(hf(ids[:, :-1]).logits.flatten(0, 1), ids[:, 1:].flatten())
        b = lm_loss(ours, {"ids": ids})
    print(f"eval-mode loss: HF {float(a):.6f}, attnlab {float(b[0]) / b[1]:.6f}; "
          f"{sum(p.numel() for p in ours.parameters()):,} parameters")
    report = apply_lora(ours_lora, LoraConfig(rank=8))
    print(report.describe())
    # The three attnlab full rows share one model (each its own optimizer state): the step's
    # work does not depend on the weights' values, and three copies would need 1 GB more each.
    own = attnlab_optimizer(ours)
    loop = attnlab_optimizer(ours, fused=False)
    print(f"train lm's optimizer: {type(own).__name__}, fused={own.param_groups[0]['fused']}; "
          f"attnlab-full-loop: fused={loop.param_groups[0]['fused']}")
    if args.phases:
        phases = {"hf-full": {}, "attnlab-full": {}}
        interleaved_medians({"hf-full": hf_step(hf, ids, hf_optimizer(hf, hf_default), phases["hf-full"]),
                             "attnlab-full": attnlab_step(ours, ids, hf_optimizer(ours, hf_default),
                                                          phases["attnlab-full"])},
                            repeats=args.repeats, warmup=1)
        print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print("\n| phase (thread CPU s, median) | `hf-full` | `attnlab-full` |\n|---|---|---|")
        medians = {row: {name: statistics.median(times[1:]) for name, times in by_phase.items()}
                   for row, by_phase in phases.items()}  # [0]: the warm-up
        for name in PHASES + ("sum",):
            hf_s, ours_s = (sum(m.values()) if name == "sum" else m[name] for m in medians.values())
            print(f"| {name} | {hf_s:.3f} | {ours_s:.3f} |")
        return
    runs = {"hf-full": hf_step(hf, ids, hf_optimizer(hf, hf_default)),
            "attnlab-full": attnlab_step(ours, ids, hf_optimizer(ours, hf_default)),
            "attnlab-full-own": attnlab_step(ours, ids, own),
            "attnlab-full-loop": attnlab_step(ours, ids, loop),
            "attnlab-lora8": attnlab_step(ours_lora, ids, attnlab_optimizer(ours_lora))}
    if args.compile:
        runs["attnlab-full-compiled"] = attnlab_step(torch.compile(ours), ids, hf_optimizer(ours, hf_default))
        runs["hf-full-compiled"] = hf_step(torch.compile(hf), ids, hf_optimizer(hf, hf_default))
    if args.bf16:
        runs["attnlab-full-bf16"] = attnlab_step(ours, ids, hf_optimizer(ours, hf_default), bf16=True)
        runs["hf-full-bf16"] = hf_step(hf, ids, hf_optimizer(hf, hf_default), bf16=True)
    if args.peft:
        import peft

        hf_peft = peft.get_peft_model(transformers.GPT2LMHeadModel(config),
                                      peft.LoraConfig(r=8, lora_alpha=16, fan_in_fan_out=True,
                                                      target_modules=r".*\.attn\.(c_attn|c_proj)"))
        runs["hf-peft-lora8"] = hf_step(hf_peft, ids, hf_optimizer(hf_peft, hf_default))
    cpu: dict[str, list[float]] = {name: [] for name in runs}

    def on_thread_clock(name, step):
        def run():
            start = time.thread_time()
            step()
            cpu[name].append(time.thread_time() - start)
        return run

    medians = interleaved_medians({name: on_thread_clock(name, step) for name, step in runs.items()},
                                  repeats=args.repeats, warmup=1)
    cpu_medians = {name: statistics.median(times[1:]) for name, times in cpu.items()}  # [0]: the warm-up
    tokens = args.batch * args.length
    base, cpu_base = medians["hf-full"], cpu_medians["hf-full"]
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\n| row | s per step (wall) | tokens/s | step rate vs `hf-full` | CPU s per step | "
          "vs `hf-full` (CPU) |\n|---|---|---|---|---|---|")
    for name, seconds in medians.items():
        print(f"| `{name}` | {seconds:.3f} | {tokens / seconds:,.0f} | {base / seconds:.2f}x | "
              f"{cpu_medians[name]:.3f} | {cpu_base / cpu_medians[name]:.2f}x |")
    pairs = (("attnlab-full-compiled", "hf-full"), ("attnlab-full-compiled", "hf-full-compiled"),
             ("attnlab-full-compiled", "attnlab-full")) if args.compile else ()
    pairs += (("attnlab-full-bf16", "hf-full"), ("attnlab-full-bf16", "hf-full-bf16")) if args.bf16 else ()
    for a, b in pairs + (("attnlab-full", "hf-full"), ("attnlab-full-own", "hf-full"),
                 ("attnlab-full-own", "attnlab-full-loop"), ("attnlab-lora8", "attnlab-full-own")):
        print(f"{a} vs {b}: {medians[b] / medians[a]:.2f}x the step rate (wall), "
              f"{cpu_medians[b] / cpu_medians[a]:.2f}x (CPU)")
    if args.roofline:
        roofline(config, args.batch, args.length, args.repeats, hf_default, sum(p.numel() for p in hf.parameters()),
                 cpu_base)

if __name__ == "__main__":
    main()
