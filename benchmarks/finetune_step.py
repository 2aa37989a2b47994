"""A fine-tuning step of a GPT-2-small-shaped language model on the CPU (issue 37 §2):
attnlab full fine-tuning vs LoRA r=8, and attnlab's full step vs HuggingFace's.

    python benchmarks/finetune_step.py [--batch 2] [--length 128] [--repeats 5] [--threads N] [--peft]

The model: a random ``GPT2LMHeadModel(GPT2Config())`` (GPT-2 small's defaults: 12 layers,
d_model 768, 12 heads, 1,024 positions, 50,257-token vocabulary, tied head, dropout 0.1;
124M parameters) and attnlab's ``DecoderLM`` converted from it by ``from_hf_gpt2`` (the same
weights; the script first checks both give the same eval-mode loss). One step, the same on
every row: zero the gradients, forward ``ids[:, :-1]`` of one fixed random batch in train mode
(dropout on), ``F.cross_entropy`` of the logits against ``ids[:, 1:]`` (mean over tokens),
backward, ``torch.optim.AdamW(lr 1e-5, weight decay 0.01)`` over the trainable parameters.

Rows (interleaved in one process, medians of ``--repeats``; glibc malloc tuning on for all,
the process-wide setting attnlab's Trainer makes):
* ``hf-full``: HuggingFace GPT2LMHeadModel, every weight trains;
* ``attnlab-full``: attnlab, every weight trains;
* ``attnlab-lora8``: attnlab with ``apply_lora(LoraConfig(rank=8))`` (the attention's joint qkv
  and output projections of every layer; alpha 16), only the adapters train;
* ``hf-peft-lora8`` (with ``--peft``): peft's LoRA r=8 on the same projections of HF GPT-2.

Peak memory, full vs LoRA: each in a fresh subprocess (``--memory full|lora``) that builds
the attnlab model alone (from the config, no HF copy), reads its resident set after
building, runs warm-up + 3 steps and reports ``ru_maxrss`` (the peak resident set of the
process, as the kernel counts it) and the peak minus the built model's resident set (what
training adds: gradients, AdamW's two moments, activations).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_medians  # noqa: E402

from attnlab.training.allocator import tune_allocator  # noqa: E402
from attnlab.training.lora import LoraConfig, apply_lora  # noqa: E402


def rss_bytes(field: str = "VmRSS") -> int:
    """This process's resident set (``VmRSS``) or its peak (``VmHWM``), from /proc/self/status.
    (Not ``ru_maxrss``: Linux carries it over from the parent through fork and exec, so a child
    started by a large process reports the parent's size.)"""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def make_step(model, ids, logits_of):
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=1e-5, weight_decay=0.01)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    model.train()

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        logits = logits_of(model, inputs)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step


def attnlab_logits(model, inputs):
    return model(inputs)


def hf_logits(model, inputs):
    return model(inputs).logits


def memory_child(mode: str, batch: int, length: int, threads: int) -> None:
    import transformers

    from attnlab.interop.hf_gpt2 import config_from_hf_gpt2
    from attnlab.models.lm import DecoderLM

    torch.set_num_threads(threads)
    tune_allocator()
    torch.manual_seed(0)
    model = DecoderLM(config_from_hf_gpt2(transformers.GPT2Config()))
    if mode == "lora":
        report = apply_lora(model, LoraConfig(rank=8))
    built = rss_bytes()
    ids = torch.randint(0, model.config.vocab_size, (batch, length + 1), generator=torch.Generator().manual_seed(1))
    step = make_step(model, ids, attnlab_logits)
    step()  # warm-up: AdamW's moments are allocated here
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
    parser.add_argument("--peft", action="store_true", help="add peft's LoRA on HF GPT-2 as a row")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    parser.add_argument("--memory", choices=("full", "lora"), help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.memory:
        memory_child(args.memory, args.batch, args.length, args.threads)
        return

    import transformers

    from attnlab.interop import from_hf_gpt2

    torch.set_num_threads(args.threads)
    tune_allocator()
    print(f"threads {args.threads}, batch {args.batch} x {args.length} tokens, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}")
    if not args.no_memory:
        print("peak memory, each in a fresh process (attnlab model only):")
        for mode in ("full", "lora"):
            result = subprocess.run([sys.executable, __file__, "--memory", mode, "--batch", str(args.batch),
                                     "--length", str(args.length), "--threads", str(args.threads)],
                                    capture_output=True, text=True, check=True)
            row = json.loads(result.stdout.strip().splitlines()[-1])
            print(f"| {mode} | trainable {row['trainable']:,} | built {row['built'] / 2**20:,.0f} MiB | "
                  f"peak {row['peak'] / 2**20:,.0f} MiB | training adds {(row['peak'] - row['built']) / 2**20:,.0f} "
                  f"MiB | step {row['step_s']:.3f} s (median of 3, alone) |")
    torch.manual_seed(0)
    config = transformers.GPT2Config()
    hf = transformers.GPT2LMHeadModel(config)
    ours = from_hf_gpt2(hf)
    ours_lora = from_hf_gpt2(hf)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.length + 1), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hf.eval(), ours.eval()
        a = F.cross_entropy(hf_logits(hf, ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        b = F.cross_entropy(attnlab_logits(ours, ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    print(f"eval-mode loss: HF {float(a):.6f}, attnlab {float(b):.6f}; "
          f"{sum(p.numel() for p in ours.parameters()):,} parameters")
    report = apply_lora(ours_lora, LoraConfig(rank=8))
    print(report.describe())
    runs = {"hf-full": make_step(hf, ids, hf_logits), "attnlab-full": make_step(ours, ids, attnlab_logits),
            "attnlab-lora8": make_step(ours_lora, ids, attnlab_logits)}
    if args.peft:
        import peft

        hf_peft = peft.get_peft_model(transformers.GPT2LMHeadModel(config),
                                      peft.LoraConfig(r=8, lora_alpha=16, fan_in_fan_out=True,
                                                      target_modules=r".*\.attn\.(c_attn|c_proj)"))
        runs["hf-peft-lora8"] = make_step(hf_peft, ids, hf_logits)
    medians = interleaved_medians(runs, repeats=args.repeats, warmup=1)
    tokens = args.batch * args.length
    base = medians["hf-full"]
    print(f"\n| row | s per step | tokens/s | steps/s vs hf-full |\n|---|---|---|---|")
    for name, seconds in medians.items():
        print(f"| `{name}` | {seconds:.3f} | {tokens / seconds:,.0f} | {base / seconds:.2f}x |")
    print(f"attnlab-full vs hf-full: {base / medians['attnlab-full']:.2f}x the step rate; "
          f"attnlab-lora8 vs attnlab-full: {medians['attnlab-full'] / medians['attnlab-lora8']:.2f}x")


if __name__ == "__main__":
    main()
