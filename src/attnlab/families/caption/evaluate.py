"""``attnlab evaluate-caption --model DIR``: BLEU-4, CIDEr and grounding of a captioner.

    attnlab evaluate-caption --model runs/caption-scenes/model
    attnlab evaluate-caption --model runs/coco/model --data coco:path/to/coco --split valid
    attnlab evaluate-caption --model runs/caption-scenes/model --figures figs/ --figures-count 8

Captions the split (default: the test split of the data the model was trained on) by beam
search and scores them with pycocoevalcap's BLEU-4 and CIDEr-D; on scenes also the
grounding score (share of object words whose peak cross-attention falls in the object's
mask), and each again on the seen and unseen compositions; ``--meteor`` adds METEOR
(Java). SPICE is not offered: it downloads Stanford CoreNLP on first use. ``--figures DIR`` writes the
first N images' word-by-word attention PNGs; ``--json FILE`` the results.
"""

from __future__ import annotations

HELP = "score a captioner: BLEU-4, CIDEr (pycocoevalcap) and, on scenes, the grounding score"


def add_arguments(parser) -> None:
    from attnlab.families.caption.caption import MAX_BEAM
    from attnlab.cli.options import add_force_argument, add_runtime_arguments, bounded_int

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train caption")
    parser.add_argument("--data", help="scenes, scenes64, emoji[:DIR], coco:DIR or flickr:DIR (default: what the model was trained on)")
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"), help="(default: test)")
    from attnlab.cli.options import add_limit_argument

    add_limit_argument(parser, "images")
    parser.add_argument("--beam", type=bounded_int(1, MAX_BEAM), default=3, metavar="K",
                        help=f"beam size, 1 to {MAX_BEAM} (default: 3)")
    parser.add_argument("--figures", help="write attention PNGs of the first --figures-count images into this folder")
    parser.add_argument("--figures-count", type=bounded_int(1, 1000), default=8, metavar="N", help="(default: 8)")
    parser.add_argument("--json", help="write the results as JSON to this file")
    add_force_argument(parser, "--json and --figures files")
    parser.add_argument("--meteor", action="store_true", help="also METEOR 1.5 (pycocoevalcap's; needs Java)")
    add_runtime_arguments(parser)


def run(args) -> int:
    import sys
    from pathlib import Path

    from attnlab.cli.options import check_recorded_data, own_data_line, resolve_device
    from attnlab.families.caption.train import format_results
    from attnlab.files import atomic_write_json, check_output_file, check_output_files
    from attnlab.families.caption.task import CAPTION_FILE, evaluate_captioner, load_caption_split, load_captioner

    from attnlab.cli.options import require_packages

    require_packages("evaluate-caption", "pycocoevalcap")
    if args.json:
        check_output_file(args.json, force=args.force, flag="--json")
    figure_names = [f"image_{i:04d}" for i in range(args.figures_count)]
    if args.figures:
        check_output_files(args.figures, [f"{name}.png" for name in figure_names], force=args.force,
                           flag="--figures")
    model, tokenizer, info = load_captioner(args.model, resolve_device(args.device))
    spec = args.data or info.get("data")
    own = args.data is None  # the model's own held-out images, as caption.json records them
    if own:  # refused when caption.json does not say, or names a folder that is gone
        folder = spec.partition(":")[2] if spec else None
        check_recorded_data(args.model, CAPTION_FILE, folder or spec, "--data",
                            named=() if folder else (spec or "",))
    data = load_caption_split(spec, args.split, image_size=model.config.image_size)
    if own:
        print(own_data_line(args.model, f"{spec} {args.split}", len(data.images), "images"))
    if args.limit:
        data = _first(data, args.limit)
    results, captions = evaluate_captioner(model, tokenizer, data, beam_size=args.beam, meteor=args.meteor)
    if args.figures:
        from attnlab.families.caption.figures import write_caption_figures

        count = min(args.figures_count, len(data))
        Path(args.figures).mkdir(parents=True, exist_ok=True)
        write_caption_figures(model, tokenizer, data.images[:count], captions[:count], args.figures,
                              names=figure_names[:count])
    if args.json:
        atomic_write_json(args.json, results, indent=2)
    print(format_results(results))
    for example in results["examples"]:
        print(f"  {example['caption']!r}  (reference: {example['references'][0]!r})", file=sys.stderr)
    return 0


def _first(data, count: int):
    """The first ``count`` images of a scene or caption set (every per-image list cut alike)."""
    import dataclasses

    cut = {}
    for field in dataclasses.fields(data):
        value = getattr(data, field.name)
        cut[field.name] = value[:count] if hasattr(value, "__getitem__") and not isinstance(value, str) else value
    return type(data)(**cut)
