"""``attnlab compile --model DIR``: build the model's decode step ahead of time (AOTInductor).

    attnlab compile --model runs/shakespeare/model             # then: attnlab generate ... (--compile auto)
    attnlab compile --model runs/shakespeare/model --greedy    # generate ... --greedy
    attnlab compile --model runs/m30k/model --beam 4 --batch 32 # translate ... (32 sources at a time)
    attnlab compile --model runs/m30k/model                    # one source at a time: its encoder's package too
    attnlab compile --model runs/caption-scenes/model          # caption ... (beam 3)
    attnlab compile --model runs/shakespeare/model --quantize int8  # generate ... --quantize int8

The package (:mod:`attnlab.generation.aot`) goes to the user cache (``$ATTNLAB_CACHE/aot``,
default ``~/.cache/attnlab/aot``), keyed by the model's structure, dtype, batch (a language
model, music or image model's rows; a translation model's or captioner's beam size) and torch version, and on
the CPU by its weights (one package per set of weights, the four most recently used of a structure kept); a
decoding verb then loads it on the CPU by default (``--compile auto``: a package where one is built, never
a build) and with ``--compile aot`` (which builds it on first use otherwise). An
existing valid package is only checked. Nothing is written next to the model.
"""

from __future__ import annotations

HELP = "compile a model's decode step ahead of time (AOTInductor); the decoding verbs then run it by default"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_quantize_argument, add_runtime_arguments, bounded_int

    parser.add_argument("--model", required=True, help="a model directory that decodes (language model, music, "
                                                        "image, text-to-image, translation, captioner)")
    parser.add_argument("--batch", type=bounded_int(1, 4096), default=1, metavar="N",
                        help="rows decoded together (language, music and image models: one package per batch "
                             "size; translation models and captioners: sources, whose beams up to 16 rows in all "
                             "share one package and more rows another; default: 1)")
    parser.add_argument("--beam", type=bounded_int(1, 64), metavar="K",
                        help="translation models and captioners: the beam size (any batch and length; default: "
                             "what their decoding verb uses, 4 for translation, 3 for a captioner)")
    parser.add_argument("--greedy", action="store_true",
                        help="language models and music: the package `generate --greedy` loads (at batch 1 with a "
                             "head of 1,024 or more tokens, on a CPU with VNNI or AMX, it picks the next token "
                             "itself, its head screened in int8: another package than sampling's)")
    add_quantize_argument(parser)
    add_runtime_arguments(parser)


def run(args) -> int:
    import time

    import torch

    from attnlab.cli.options import apply_quantize, resolve_device
    from attnlab.generation.aot import AotUnavailable, aot_step, cache_directory, encoder_package
    from attnlab.generation.compiled import unavailable_reason
    from attnlab.models.registry import load_model

    device = resolve_device(args.device)
    if device.startswith("cpu") and unavailable_reason() is not None:
        raise ValueError(f"attnlab compile: {unavailable_reason()}")
    model = load_model(args.model, device=device).eval()
    apply_quantize(model, args.quantize, device)  # the package of the weights a --quantize decode multiplies by
    kind = decoding_kind(model, args.model)
    beam = args.beam if args.beam is not None else getattr(model, "default_beam", 4)
    start = time.perf_counter()
    with torch.inference_mode():
        cache = example_cache(model, kind, args.batch, beam)
        try:
            step = aot_step(model, kind, cache, beam=beam if kind == "search" else None, greedy=args.greedy)
        except AotUnavailable as error:
            raise ValueError(f"--model {args.model}: the step cannot be compiled ahead of time: {error}") from None
        try:  # one source (--batch 1): a search encodes it through a package too (a translation model's)
            encoder = encoder_package(model) if kind == "search" and args.batch == 1 else None
        except AotUnavailable as error:
            raise ValueError(f"--model {args.model}: the encoder cannot be compiled ahead of time: {error}") from None
    print(f"{step.path} ({'greedy ' if step.layout.greedy else ''}{kind} step, "
          f"{'beam ' + str(beam) if kind == 'search' else 'batch ' + str(args.batch)}"
          f"; ready in {time.perf_counter() - start:.1f} s; cache: {cache_directory()})")
    if encoder is not None:
        print(f"{encoder.path} (encoder, one source)")
    return 0


def decoding_kind(model, name: str) -> str:
    """The package kind a model's decoding uses, or a ValueError naming the directory."""
    from attnlab.models.image_transformer import ImageTransformer

    if isinstance(model, ImageTransformer):
        return "image"
    if hasattr(model, "decode_step") and hasattr(model, "new_step_cache"):
        return "search"
    if hasattr(model, "step") and hasattr(model, "prefill"):
        return "causal"
    raise ValueError(f"--model {name}: a {type(model).__name__} has no step-by-step decoding to compile")


def example_cache(model, kind: str, batch: int, beam: int):
    """A fixed-shape cache shaped as decoding makes it (the package's example inputs)."""
    import torch

    from attnlab.generation.aot import aot_capacity

    device = next(model.parameters()).device
    if kind == "causal":
        return model.new_cache(batch, aot_capacity(model, min(16, model.config.max_positions)), fixed_shape=True)
    if kind == "image":
        c = model.config
        cache = model.new_cache(batch, fixed_shape=True)
        labels = torch.zeros(batch, dtype=torch.long, device=device) if c.num_classes else None
        low_res = (torch.zeros(batch, c.channels, c.low_resolution, c.low_resolution, dtype=torch.long,
                               device=device) if c.low_resolution else None)
        model.prefill(torch.zeros(batch, 0, dtype=torch.long, device=device), cache, labels, low_res)
        return cache
    # Several rows: one package for any number up to FEW_ROWS (sources x beam), another above.
    sources = 1 if beam == 1 and batch == 1 else max(2, batch)
    # The package takes any source length (a sentence, an image's cells): two memory positions
    # stand for them (their values are not read; the key depends on no size that varies).
    memory = next(model.parameters()).new_zeros(sources, 2, model.config.d_model)
    return model.new_step_cache(memory, rows_per_source=beam, capacity=8, fixed_shape=True)
