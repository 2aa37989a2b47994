"""``attnlab evaluate-text-to-image --model DIR``: VQ-VAE PSNR and fidelity of a text-to-image model.

    attnlab evaluate-text-to-image --model runs/t2i/model
    attnlab evaluate-text-to-image --model runs/t2i/model --classifier runs/reader/model --prompts 400 --json r.json

Samples one image for each held-out prompt (the first caption of test scenes, half with
colour-shape pairs never seen in training) and reads it with the attribute reader
(``--classifier``, default ``DIR/../attributes/model``, the one ``train text-to-image``
wrote): the share of the prompt's objects, colours, shapes and relations found, next to the
same reading of the real test images (the ceiling); and the VQ-VAE's test PSNR and codebook
use. ``--grid FILE.png`` also draws the first 8 prompts' samples above their real images.
"""

from __future__ import annotations

HELP = "score a text-to-image model: VQ-VAE PSNR and fidelity on held-out prompts (scenes)"


def add_arguments(parser) -> None:
    from attnlab.cli.options import SEED, TEMPERATURE, add_force_argument, add_runtime_arguments, bounded_int

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train text-to-image")
    parser.add_argument("--classifier", help="the attribute reader (default: DIR/../attributes/model)")
    parser.add_argument("--prompts", "--limit", dest="prompts", type=bounded_int(2, 10_000), default=400, metavar="N",
                        help="held-out prompts scored, half unseen, 2 to 10,000 (--limit: the same, as every "
                             "evaluator names its subset; default: 400)")
    parser.add_argument("--temperature", type=TEMPERATURE, default=1.0, metavar="T", help="(default: 1.0)")
    parser.add_argument("--top-k", type=bounded_int(0), default=32, metavar="K",
                        help="(default: 32; 0: the whole codebook)")
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--json", help="write the results as JSON to this file")
    parser.add_argument("--grid", help="write a PNG: samples of 8 unseen-composition prompts (top) and real images")
    add_force_argument(parser, "--json and --grid files")
    add_runtime_arguments(parser)


def run(args) -> int:
    from pathlib import Path

    import torch

    from attnlab.cli.options import own_data_line, resolve_device
    from attnlab.families.text_to_image.train import report
    from attnlab.data.scenes import load_scenes
    from attnlab.files import atomic_write_json, check_output_file
    from attnlab.models.registry import load_model, require_model_directory
    from attnlab.models.scene_attributes import SceneAttributeClassifier
    from attnlab.families.text_to_image.task import evaluate_text_to_image, imagine, load_text_to_image, save_grid

    if args.json:
        check_output_file(args.json, force=args.force, flag="--json")
    if args.grid:
        check_output_file(args.grid, force=args.force, flag="--grid", suffixes=(".png",))
    device = resolve_device(args.device)
    model, vqvae, tokenizer = load_text_to_image(args.model, device)
    classifier_dir = Path(args.classifier) if args.classifier else Path(args.model).resolve().parent / "attributes" / "model"
    if not args.classifier and not classifier_dir.is_dir():
        raise ValueError(f"no attribute reader at {classifier_dir} (where train text-to-image writes it); "
                         "pass --classifier DIR")
    if args.classifier:
        require_model_directory(classifier_dir, "--classifier")
    classifier = load_model(classifier_dir, device=device)
    if not isinstance(classifier, SceneAttributeClassifier):
        raise ValueError(f"--classifier {classifier_dir}: holds a {classifier.config.family} model, "
                         "not an attribute reader (train text-to-image writes one to OUT/attributes/model)")
    test = load_scenes("test")
    print(own_data_line(args.model, "the held-out prompts of scenes test (the first caption of each scene, half "
                                    "with colour-shape pairs never seen in training)",
                        min(args.prompts, len(test.captions)), "prompts"))
    results = evaluate_text_to_image(model, vqvae, tokenizer, classifier, test, prompts=args.prompts,
                                     temperature=args.temperature, top_k=args.top_k or None, seed=args.seed)
    if args.json:
        atomic_write_json(args.json, results, indent=2)
    if args.grid:
        chosen = [i for i, u in enumerate(test.unseen) if u][:8]
        prompts = [test.captions[i][0] for i in chosen]
        drawn = imagine(model, vqvae, tokenizer, prompts, temperature=args.temperature, top_k=args.top_k or None,
                        seed=args.seed)
        save_grid(torch.cat([drawn, test.images[chosen]]), args.grid, columns=len(chosen))
        print("\n".join(f"column {k + 1}: {p}" for k, p in enumerate(prompts)))
    print(report(results))
    return 0
