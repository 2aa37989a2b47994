"""GPU speed of attnlab against its peers: one process, the same shapes and weights for each.

    PYTHONPATH=src python3 benchmarks/gpu.py [--quick] [--translation-model DIR] [--only decode,train,varlen,translate,aot]

Needs torch with CUDA and transformers (the peers). Every figure is a median of timed
repetitions after a warm-up, with ``torch.cuda.synchronize()`` around each; the runs of the
libraries being compared are interleaved (A B A B ...) so a clock or thermal drift hits all.

* **decode**: GPT-2-small (HF config, random weights copied into attnlab by
  ``from_hf_gpt2``), greedy, 16-token prompt: attnlab ``generate`` vs HF ``generate`` with
  its default dynamic cache, with ``cache_implementation="static"``, and static + compiled
  (``CompileConfig(mode="reduce-overhead")``) where the installed transformers has it.
  Tokens/s, the ratio to HF's fastest, whether the tokens are identical, and the fraction of
  the memory-bandwidth bound (all weights read once per step).
* **train**: encoder-decoder at transformer_base and transformer_big dimensions, 32k shared
  vocabulary, forward + label-smoothed loss + backward + fused AdamW step; attnlab eager and
  ``torch.compile``d vs ``torch.nn.Transformer`` (with tied embeddings and head) and HF
  Marian; target tokens/s and model-FLOPs utilisation (6 x parameters x target tokens over
  the bf16 dense peak: a rough figure, the source side is counted as the target's length).
* **varlen**: the same training step on right-padded batches (400 x 64, lengths from 16 to
  64): the padded forward vs ``varlen=True`` (packed tokens, flash ``varlen_attn``), bf16.
* **translate**: beam-4 translation of Multi30k's test_2016_flickr (1,000 German sentences,
  shipped with attnlab) with a trained model directory (``--translation-model``), model
  loaded and warmed up: sentences/s of the eager beam search and of ``cuda_graph=True``
  (graphs captured per batch and length bucket on the first pass, replayed after), and how
  many translations agree.
* **aot** (only when named: ``--only aot``): GPT-2-small greedy b1 (fp32 and bf16, ``--aot-dtypes``)
  with the decode step compiled ahead of time for CUDA (``generate(..., compile="aot")``,
  :mod:`attnlab.generation.aot`: torch.export + AOTInductor, Triton kernels called from a C++
  wrapper, no Python in the step; the package is built into a fresh ``$ATTNLAB_CACHE`` and its
  build time printed), the same package's step replayed from a CUDA graph captured once around the
  runner call (inductor makes no CUDA graphs in an AOT package itself; this capture, in "relaxed"
  mode with its own loader, has not yet run on a GPU: the first try, in the default mode, failed), attnlab's
  own CUDA-graph greedy path, and HF with its static cache (not compiled: that takes minutes
  per configuration). Sized to finish in about 3 minutes, builds included, on an H200. Where no
  package runs (the build fails, or the load check in a child process fails) it prints "no
  package ran" and why, rather than timing the eager fallback as the package.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
BANDWIDTH = {"H100": 3.35e12, "H200": 4.8e12, "A100": 2.0e12}


def _lookup(table: dict[str, float]) -> float:
    name = torch.cuda.get_device_name()
    return next((value for key, value in table.items() if key in name), float("nan"))


def interleaved(runs: dict[str, callable], repeats: int) -> dict[str, float]:
    """Median seconds of each callable, run in turn ``repeats`` times after one warm-up each."""
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


# ------------------------------------------------------------------------------ decoding
def decode(batch: int, dtype: torch.dtype, new_tokens: int, repeats: int, hf_compile: bool = True) -> None:
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    from attnlab.generation import generate
    from attnlab.interop import from_hf_gpt2

    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(bos_token_id=0, eos_token_id=0)).eval()
    ours = from_hf_gpt2(hf)
    hf, ours = hf.cuda().to(dtype), ours.cuda().to(dtype).eval()
    prompt = torch.randint(1, 50257, (batch, 16), device="cuda")

    def hf_run(**kwargs):
        def run():
            with torch.inference_mode():
                out = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                                  min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, **kwargs)
            return out[:, prompt.shape[1]:].tolist()
        return run

    runs = {"attnlab": lambda: generate(ours, prompt, max_new_tokens=new_tokens, greedy=True),
            "attnlab eager": lambda: generate(ours, prompt, max_new_tokens=new_tokens, greedy=True, cuda_graph=False),
            "HF dynamic": hf_run(), "HF static": hf_run(cache_implementation="static")}
    if hf_compile and hasattr(transformers, "CompileConfig"):
        runs["HF static+compile"] = hf_run(cache_implementation="static",
                                           compile_config=transformers.CompileConfig(mode="reduce-overhead"))
    outputs = {}
    for name, fn in list(runs.items()):
        try:
            outputs[name] = fn()
        except Exception as error:  # a peer configuration this transformers cannot run: say so, go on
            print(f"  ({name} skipped: {type(error).__name__}: {str(error)[:120]})")
            del runs[name]
    seconds = interleaved(runs, repeats)
    tokens = batch * new_tokens
    params = sum(p.numel() for p in ours.parameters())
    bound = _lookup(BANDWIDTH) / (params * torch.finfo(dtype).bits / 8) * batch
    fastest_peer = min((name for name in seconds if not name.startswith("attnlab")), key=seconds.get)
    peers = " | ".join(f"{name} {tokens / t:7.0f}" for name, t in seconds.items() if name != "attnlab")
    same = {name: outputs[name] == outputs["attnlab"] for name in outputs if name != "attnlab"}
    print(f"decode gpt2-small b{batch} {str(dtype)[6:]}: attnlab {tokens / seconds['attnlab']:7.0f} tok/s | {peers} | "
          f"vs fastest ({fastest_peer}) {seconds[fastest_peer] / seconds['attnlab']:4.2f}x | "
          f"bound ~{bound:6.0f} ({tokens / seconds['attnlab'] / bound:5.1%}) | identical tokens "
          + ", ".join(f"{name}: {value}" for name, value in same.items()))


# ------------------------------------------------------------------------------ ahead of time
def decode_aot(dtype: torch.dtype, new_tokens: int, repeats: int) -> None:
    import os
    import tempfile

    from transformers import GPT2Config, GPT2LMHeadModel

    from attnlab.generation import generate
    from attnlab.generation.aot import AotStep, aot_step
    from attnlab.interop import from_hf_gpt2

    os.environ.setdefault("ATTNLAB_CACHE", tempfile.mkdtemp(prefix="attnlab-aot-"))
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(bos_token_id=0, eos_token_id=0)).eval()
    ours = from_hf_gpt2(hf)
    hf, ours = hf.cuda().to(dtype), ours.cuda().to(dtype).eval()
    prompt = torch.randint(1, 50257, (1, 16), device="cuda")
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback would time the eager step as "aot"
        try:
            aot_tokens = generate(ours, prompt, max_new_tokens=new_tokens, greedy=True, compile="aot")  # builds
        except RuntimeWarning as reason:
            print(f"aot gpt2-small b1 {str(dtype)[6:]}: no package ran ({reason}); no rows", flush=True)
            return
    torch.cuda.synchronize()
    built = time.perf_counter() - started

    kept = {}  # the capture, made on the first call and replayed by every later one

    def graphed_aot():
        """The package's step captured once in a CUDA graph and replayed per token (the greedy
        choice inside the graph too): what is left of per-token host work. The capture has its
        own loader and runs in "relaxed" mode: AOTInductor's container queries its last run's
        event (cudaEventQuery) before each run, which a capture in the default mode forbids
        ("operation not permitted when stream is capturing", H200, 2026-11-28), and the run inside
        the capture records that event on the capturing stream, so that loader never runs
        outside the graph again. Each call: the prompt prefilled into the kept cache, then replays."""
        with torch.inference_mode():
            if not kept:
                cache = ours.new_cache(1, prompt.shape[1] + new_tokens, fixed_shape=True)
                shared = aot_step(ours, "causal", cache)
                step = AotStep(shared.path, shared.layout, shared._names, shared.key)
                step.bind(ours)
                empty = cache.snapshot()
                current = ours.prefill(prompt, cache).argmax(-1)
                inputs = [current, *cache.step_tensors()]
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):  # warm-up off the capture
                    step._run(inputs)
                torch.cuda.current_stream().wait_stream(stream)
                torch.cuda.synchronize()  # that run finished: the capture's event query finds it so
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, capture_error_mode="relaxed"):
                    current.copy_(step._run(inputs)[0].argmax(-1))
                kept.update(cache=cache, empty=empty, current=current, graph=graph, step=step)
            cache, current, graph = kept["cache"], kept["current"], kept["graph"]
            cache.restore(kept["empty"])
            current.copy_(ours.prefill(prompt, cache).argmax(-1))
            produced = torch.empty(1, new_tokens, dtype=torch.long, device="cuda")
            for t in range(new_tokens):
                produced[:, t] = current
                if t < new_tokens - 1:
                    graph.replay()
            return produced.tolist()

    runs = {"attnlab aot": lambda: generate(ours, prompt, max_new_tokens=new_tokens, greedy=True, compile="aot"),
            "attnlab aot+graph": graphed_aot,
            "attnlab graph": lambda: generate(ours, prompt, max_new_tokens=new_tokens, greedy=True),
            "attnlab eager": lambda: generate(ours, prompt, max_new_tokens=new_tokens, greedy=True, cuda_graph=False)}

    def hf_static():
        with torch.inference_mode():
            out = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                              cache_implementation="static")
        return out[:, prompt.shape[1]:].tolist()

    runs["HF static"] = hf_static
    outputs = {}
    for name, fn in list(runs.items()):
        try:
            outputs[name] = fn()
        except Exception as error:  # say what could not run, go on with the others
            print(f"  ({name} skipped: {type(error).__name__}: {str(error)[:160]})")
            del runs[name]
    seconds = interleaved(runs, repeats)
    rates = " | ".join(f"{name} {new_tokens / t:7.0f}" for name, t in seconds.items())
    same = ", ".join(f"{name}: {outputs[name] == aot_tokens}" for name in outputs)
    print(f"aot gpt2-small b1 {str(dtype)[6:]}: package built in {built:.0f} s | tok/s: {rates} | "
          + (f"aot / HF static {seconds['HF static'] / seconds['attnlab aot']:4.2f}x"
             if "HF static" in seconds and "attnlab aot" in seconds else "")
          + (f", aot+graph / HF static {seconds['HF static'] / seconds['attnlab aot+graph']:4.2f}x"
             if "attnlab aot+graph" in seconds and "HF static" in seconds else "")
          + f" | tokens identical to aot: {same}", flush=True)


# ------------------------------------------------------------------------------ training
def train(preset: str, batch: int, length: int, vocab: int, dtype: torch.dtype, repeats: int,
          compiled: bool) -> None:
    from transformers import MarianConfig, MarianMTModel

    from attnlab import create_model

    torch.manual_seed(0)
    src = torch.randint(4, vocab, (batch, length), device="cuda")
    tgt = torch.randint(4, vocab, (batch, length + 1), device="cuda")
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    ours = create_model(preset, vocab_size=vocab).cuda().train()
    c = ours.config
    d, heads, ff, layers = c.d_model, c.num_heads, c.d_ff, c.num_encoder_layers

    class NN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            self.core = torch.nn.Transformer(d, heads, layers, layers, ff, c.dropout, batch_first=True)
            self.head = torch.nn.Linear(d, vocab, bias=False)
            self.head.weight = self.emb.weight
            self.mask = torch.nn.Transformer.generate_square_subsequent_mask(length, device="cuda")

        def forward(self, s, t):
            return self.head(self.core(self.emb(s) * d ** 0.5, self.emb(t) * d ** 0.5, tgt_mask=self.mask,
                                       tgt_is_causal=True))

    nn_model = NN().cuda().train()
    marian = MarianMTModel(MarianConfig(vocab_size=vocab, d_model=d, encoder_layers=layers, decoder_layers=layers,
                                        encoder_attention_heads=heads, decoder_attention_heads=heads,
                                        encoder_ffn_dim=ff, decoder_ffn_dim=ff, dropout=c.dropout,
                                        max_position_embeddings=1024, pad_token_id=0,
                                        decoder_start_token_id=1)).cuda().train()
    forwards = {"attnlab": (ours, ours), "nn.Transformer": (nn_model, nn_model),
                "HF Marian": (marian, lambda s, t: marian(input_ids=s, decoder_input_ids=t).logits)}
    if compiled:
        forwards["attnlab compiled"] = (ours, torch.compile(ours))

    def stepper(model, forward):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

        def step():
            with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
                logits = forward(src, tgt_in)
            loss = F.cross_entropy(logits.float().view(-1, vocab), tgt_out.reshape(-1), label_smoothing=0.1)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return step

    seconds = interleaved({name: stepper(*pair) for name, pair in forwards.items()}, repeats)
    tokens = batch * length
    params = sum(p.numel() for p in ours.parameters())
    peak = _lookup(PEAK_BF16)
    best = min(seconds["attnlab"], seconds.get("attnlab compiled", float("inf")))
    row = " | ".join(f"{name} {tokens / t:7.0f} ({6 * params * tokens / t / peak:5.1%})" for name, t in seconds.items())
    ratios = ", ".join(f"{seconds[name] / best:4.2f}x {name}" for name in ("nn.Transformer", "HF Marian"))
    print(f"train {preset} V={vocab} {tokens} tgt tok {str(dtype)[6:]}: tok/s (MFU) {row} | best attnlab = {ratios}")


def varlen(preset: str, batch: int, length: int, vocab: int, repeats: int) -> None:
    """A training step on right-padded batches whose lengths spread from L/4 to L: the padded
    forward vs ``varlen=True`` (packed tokens; flash ``varlen_attn`` in bf16), bf16 autocast."""
    from attnlab import create_model
    from attnlab.families.translation.task import translation_loss

    torch.manual_seed(0)

    def padded_ids(extra: int) -> torch.Tensor:
        lengths = torch.randint(length // 4, length + 1, (batch,), device="cuda")
        ids = torch.randint(4, vocab, (batch, length + extra), device="cuda")
        return ids.masked_fill(torch.arange(length + extra, device="cuda") >= lengths[:, None] + extra, 0)

    src, tgt = padded_ids(0), padded_ids(1)
    data = {"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}
    ours = create_model(preset, vocab_size=vocab).cuda().train()
    optimizer = torch.optim.AdamW(ours.parameters(), lr=1e-4, fused=True)

    def stepper(is_varlen: bool):
        loss_fn = translation_loss(0.1, 0, varlen=is_varlen)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss_sum, tokens, _ = loss_fn(ours, data)
            (loss_sum / tokens).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return step

    seconds = interleaved({"padded": stepper(False), "varlen": stepper(True)}, repeats)
    real = int((data["tgt_in"] != 0).sum())
    print(f"varlen {preset} {batch}x{length} (target {real} of {data['tgt_in'].numel()} tokens real): tok/s "
          f"padded {real / seconds['padded']:7.0f} | varlen {real / seconds['varlen']:7.0f} | "
          f"{seconds['padded'] / seconds['varlen']:4.2f}x")


# ------------------------------------------------------------------------------ translation
def translate(model_dir: str, repeats: int, batch_sizes=(100, 500, 1000)) -> None:
    from attnlab.data import get_parallel_dataset
    from attnlab.translation import Translator

    translator = Translator.load(model_dir, device="cuda")
    sources = [src for src, _ in get_parallel_dataset("multi30k", "test", "de", "en").pairs]
    for batch_size in batch_sizes:
        eager = translator.translate(sources, batch_size=batch_size, beam=4)
        graphed = translator.translate(sources, batch_size=batch_size, beam=4, cuda_graph=True)
        same = sum(a == b for a, b in zip(eager, graphed))
        seconds = interleaved({
            "eager": lambda: translator.translate(sources, batch_size=batch_size, beam=4),
            "graph": lambda: translator.translate(sources, batch_size=batch_size, beam=4, cuda_graph=True),
        }, repeats)
        print(f"translate multi30k test ({len(sources)} sentences) beam 4, batch {batch_size}: "
              f"eager {len(sources) / seconds['eager']:7.1f} sentences/s ({seconds['eager']:.2f} s), "
              f"CUDA graph {len(sources) / seconds['graph']:7.1f} sentences/s ({seconds['graph']:.2f} s); "
              f"identical translations {same}/{len(sources)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and tokens")
    parser.add_argument("--translation-model", help="trained translation model directory for the beam-4 figure")
    parser.add_argument("--only", default="decode,train,varlen,translate", help="comma-separated sections")
    parser.add_argument("--train-rows", default="0,1,2,3",
                        help="which training rows to run (0: base 3k TF32, 1: base 3k bf16, 2: base 25.6k bf16, "
                             "3: big 25.6k bf16; default: all)")
    parser.add_argument("--translate-batches", default="100,500,1000",
                        help="comma-separated batch sizes of the beam-4 translation figure (default: 100,500,1000)")
    parser.add_argument("--aot-dtypes", default="fp32,bf16", help="--only aot: which dtypes (default: both)")
    parser.add_argument("--no-hf-compile", action="store_true", help="skip HF's compiled static cache (minutes of "
                                                                     "compilation per configuration)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu.py needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    sections = set(args.only.split(","))
    repeats = 3 if args.quick else 5
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    if "decode" in sections:
        for batch, dtype in ((1, torch.float32), (1, torch.bfloat16), (16, torch.bfloat16)):
            decode(batch, dtype, 128 if args.quick else 256, repeats, hf_compile=not args.no_hf_compile)
    if "train" in sections:
        rows = (("transformer_base", 96, 32, torch.float32), ("transformer_base", 96, 32, torch.bfloat16),
                ("transformer_base", 400, 64, torch.bfloat16), ("transformer_big", 400, 64, torch.bfloat16))
        for preset, batch, length, dtype in (rows[int(i)] for i in args.train_rows.split(",")):
            train(preset, batch, length, 32000, dtype, repeats, compiled=dtype == torch.bfloat16)
    if "varlen" in sections:
        for preset in ("transformer_base", "transformer_big"):
            varlen(preset, 400, 64, 32000, repeats)
    if "translate" in sections and args.translation_model:
        translate(args.translation_model, repeats, tuple(int(b) for b in args.translate_batches.split(",")))
    if "aot" in sections:
        names = {"fp32": torch.float32, "bf16": torch.bfloat16}
        for name in args.aot_dtypes.split(","):
            decode_aot(names[name], 64 if args.quick else 128, repeats)


if __name__ == "__main__":
    main()
