"""``attnlab export-onnx``: one ONNX graph of a model directory (BERT: ids, attention_mask,
token_type_ids -> hidden states; LM: ids -> logits; translation: src_ids, tgt_in_ids ->
logits) with dynamic batch and length axes, checked against onnxruntime when installed."""

HELP = "export a model directory to ONNX (dynamic batch and length) and check it with onnxruntime"


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help="model directory (HuggingFace BERT or attnlab)")
    parser.add_argument("-o", "--out", required=True, help="the .onnx file to write")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (default: 17)")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.add_argument("--no-check", action="store_true", help="skip the onnxruntime comparison")


def run(args) -> int:
    from pathlib import Path

    out = Path(args.out)
    if out.suffix.lower() != ".onnx":
        raise ValueError(f"-o {args.out}: give a file name ending in .onnx")
    if out.exists() and not args.force:
        raise ValueError(f"-o {args.out}: the file exists; pass --force to replace it")
    if not out.parent.is_dir():
        raise ValueError(f"-o {args.out}: no such directory {out.parent}")
    if not 14 <= args.opset <= 20:
        raise ValueError(f"--opset {args.opset}: choose 14 to 20")
    try:
        import onnx  # noqa: F401  (torch's exporter needs it)
    except ImportError:
        raise ValueError("ONNX export needs the onnx package: pip install onnx onnxruntime") from None

    from attnlab.interop.hf_bert import is_hf_bert_directory, load_hf_bert
    from attnlab.interop.onnx_export import export_onnx, onnx_parity
    from attnlab.models.base import _atomic_write
    from attnlab.models.registry import load_model

    model = load_hf_bert(args.model)[0] if is_hf_bert_directory(args.model) else load_model(args.model)
    inputs = []
    _atomic_write(out, lambda path: inputs.extend(export_onnx(model, path, opset=args.opset)))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): inputs {', '.join(inputs)}; batch and length dynamic")
    if args.no_check:
        return 0
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        print("onnxruntime is not installed: not checked (pip install onnxruntime)")
        return 0
    error = onnx_parity(model, out)
    ok = error < 1e-4
    print(f"onnxruntime vs torch on other shapes (batch 3, length 11): max |difference| {error:.2e} "
          f"-> {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1
