"""``attnlab export-onnx``: one ONNX graph of a model directory (BERT: ids, attention_mask,
token_type_ids -> hidden states; LM and Music Transformer: ids -> logits; translation: src_ids,
tgt_in_ids -> logits; ViT: images -> logits; captioner: images, tgt_in_ids -> logits;
text-to-image: text_ids, codes -> logits; Image Transformer: images (+ labels, + low_res) ->
logits) with a dynamic batch (and dynamic token lengths), checked against onnxruntime when
installed; a model it cannot represent (the VQ-VAE, the scene-attribute reader) is refused
with the reason.
A translation model also gets its two halves for decoding outside torch, beside OUT:
OUT.encoder.onnx (src_ids -> memory, memory_mask) and OUT.decoder.onnx (tgt_in_ids, memory,
memory_mask -> logits); see attnlab.interop.onnx_export.onnx_greedy_translate."""

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
    from pathlib import Path

    from attnlab.files import check_output_file

    # Every output is checked before the model is read (the export takes tens of seconds):
    # OUT, and beside it the two halves a translation model also gets.
    out = check_output_file(args.out, force=args.force, flag="-o", suffixes=(".onnx",))
    if not 14 <= args.opset <= 20:
        raise ValueError(f"--opset {args.opset}: choose 14 to 20")
    from attnlab.cli.options import require_packages

    require_packages("export-onnx", "onnx")  # torch's exporter needs it; onnxruntime only checks (optional)

    from attnlab.families import family_for_directory

    family = family_for_directory(args.model)
    parts = [out.with_suffix(".encoder.onnx"), out.with_suffix(".decoder.onnx")]
    if family is None or family.name != "translation":
        parts = []
    for path in parts:
        check_output_file(path, force=args.force, flag="-o (the decoding half beside it)")

    from attnlab.interop.onnx_export import PARITY_BATCH, PARITY_LENGTH, describe_shapes, export_onnx, onnx_parity
    from attnlab.models.base import _atomic_write
    from attnlab.models.registry import load_model
    from attnlab.models.transformer import Transformer

    if family is not None and family.recognise and family.recognises(args.model):
        # a directory another library wrote (HuggingFace BERT, GPT-2, MarianMT): its family's loader reads it
        model = family.pipeline_class().load(args.model).model
    else:
        model = load_model(args.model)
    if not isinstance(model, Transformer):
        parts = []
    elif not parts:  # a Transformer its directory did not announce (no family): checked now, still before the export
        parts = [out.with_suffix(".encoder.onnx"), out.with_suffix(".decoder.onnx")]
        for path in parts:
            check_output_file(path, force=args.force, flag="-o (the decoding half beside it)")
    inputs = []
    _atomic_write(out, lambda path: inputs.extend(export_onnx(model, path, opset=args.opset)))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): inputs {', '.join(inputs)}; {describe_shapes(model)}")
    if parts:
        _write_parts(model, parts, args.opset)
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
    if parts:
        from attnlab.interop.onnx_export import parts_parity

        for path, part_error in zip(parts, parts_parity(model, *parts)):
            print(f"{path.name}: onnxruntime vs torch on other shapes: max |difference| {part_error:.2e} "
                  f"-> {'OK' if part_error < 1e-4 else 'MISMATCH'}")
            ok = ok and part_error < 1e-4
    return 0 if ok else 1


def _write_parts(model, parts, opset: int) -> None:
    """Both halves written to fresh temporary files (files.atomic_write, nested) and renamed
    over their names only once both are complete; a failure leaves neither."""
    from attnlab.files import atomic_write
    from attnlab.interop.onnx_export import export_translation_parts

    encoder, decoder = parts
    atomic_write(encoder, lambda encoder_tmp: atomic_write(
        decoder, lambda decoder_tmp: export_translation_parts(model, encoder_tmp, decoder_tmp, opset=opset)))
    print(f"wrote {parts[0]} and {parts[1]}: the halves for step-by-step decoding (onnx_greedy_translate)")
