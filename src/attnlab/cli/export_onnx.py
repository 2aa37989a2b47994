"""``attnlab export-onnx``: one ONNX graph of a model directory (BERT: ids, attention_mask,
token_type_ids -> hidden states; LM and Music Transformer: ids -> logits; translation: src_ids,
tgt_in_ids -> logits; ViT: images -> logits; captioner: images, tgt_in_ids -> logits;
text-to-image: text_ids, codes -> logits; Image Transformer: images (+ labels, + low_res) ->
logits) with a dynamic batch (and dynamic token lengths), checked against onnxruntime when
installed; a model it cannot represent (the VQ-VAE, the scene-attribute reader) is refused
with the reason.
A family whose registration names ONNX parts also gets them beside OUT (OUT.<part>.onnx): a
translation model its two halves for decoding outside torch, OUT.encoder.onnx (src_ids ->
memory, memory_mask) and OUT.decoder.onnx (tgt_in_ids, memory, memory_mask -> logits); see
attnlab.translation.onnx_greedy_translate."""

HELP = "export a model directory of any family to ONNX (dynamic batch and length) and check it with onnxruntime"


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True,
                        help="model directory (attnlab's, or a HuggingFace BERT, GPT-2 or MarianMT one)")
    parser.add_argument("-o", "--out", required=True, help="the .onnx file to write")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (default: 17)")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.add_argument("--no-check", action="store_true", help="skip the onnxruntime comparison")
    from attnlab.cli.options import add_threads_argument

    add_threads_argument(parser)  # export and check run on the CPU: no --device


def run(args) -> int:
    from attnlab.files import check_output_file

    # Every output is checked before the model is read (the export takes tens of seconds):
    # OUT, and beside it the parts its family's registration names (a translation model's halves).
    out = check_output_file(args.out, force=args.force, flag="-o", suffixes=(".onnx",))
    if not 14 <= args.opset <= 20:
        raise ValueError(f"--opset {args.opset}: choose 14 to 20")
    from attnlab.cli.options import require_packages

    require_packages("export-onnx", "onnx")  # torch's exporter needs it; onnxruntime only checks (optional)

    from attnlab.families import family_for_config, family_for_directory

    family = family_for_directory(args.model)
    parts = _check_parts(out, family, {}, args.force)

    from attnlab.interop.onnx_export import (PARITY_BATCH, PARITY_LENGTH, describe_shapes, export_onnx, onnx_graph,
                                             onnx_parity)
    from attnlab.models.base import _atomic_write
    from attnlab.models.registry import load_model

    if family is not None and family.recognise and family.recognises(args.model):
        # a directory another library wrote (HuggingFace BERT, GPT-2, MarianMT): its family's loader reads it
        model = family.pipeline_class().load(args.model).model
    else:
        model = load_model(args.model)
    # The model's own family decides its parts (a directory that did not announce its family,
    # restored by load_model, is checked now: still before the export).
    parts = _check_parts(out, family_for_config(model.config.family), parts, args.force)
    inputs = []
    _atomic_write(out, lambda path: inputs.extend(export_onnx(model, path, opset=args.opset)))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): inputs {', '.join(inputs)}; {describe_shapes(model)}")
    if parts:
        _write_parts(model, parts, args.opset)
        print(f"wrote {' and '.join(map(str, parts.values()))}: {onnx_graph(model).parts_note}")
    if args.no_check:
        return 0
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        print("onnxruntime is not installed: not checked (pip install onnxruntime)")
        return 0
    error = onnx_parity(model, out)
    ok = error < 1e-4
    shapes = describe_shapes(model, PARITY_BATCH, PARITY_LENGTH)
    print(f"onnxruntime vs torch on other shapes ({shapes}): max |difference| {error:.2e} "
          f"-> {'OK' if ok else 'MISMATCH'}")
    for part, path in parts.items():
        part_error = onnx_parity(model, path, part=part)
        print(f"{path.name}: onnxruntime vs torch on other shapes: max |difference| {part_error:.2e} "
              f"-> {'OK' if part_error < 1e-4 else 'MISMATCH'}")
        ok = ok and part_error < 1e-4
    return 0 if ok else 1


def _check_parts(out, family, checked: dict, force: bool) -> dict:
    """``{part: OUT.<part>.onnx}`` for the ONNX parts ``family``'s registration names (none
    without a family), each checked as an output (those in ``checked`` already were)."""
    from attnlab.files import check_output_file

    parts = {part: out.with_suffix(f".{part}.onnx") for part in (family.onnx_parts if family else ())}
    for part, path in parts.items():
        if checked.get(part) != path:
            check_output_file(path, force=force, flag=f"-o (the {part} part beside it)")
    return parts


def _write_parts(model, parts: dict, opset: int) -> None:
    """Every part written to a fresh temporary file (files.atomic_write, nested) and renamed
    over its name only once all are complete; a failure leaves none."""
    from attnlab.files import atomic_write
    from attnlab.interop.onnx_export import export_onnx

    def write(pending: list, written: list) -> None:
        if not pending:
            for part, path in written:
                export_onnx(model, path, opset=opset, part=part)
            return
        (part, path), rest = pending[0], pending[1:]
        atomic_write(path, lambda tmp: write(rest, [*written, (part, tmp)]))

    write(list(parts.items()), [])
