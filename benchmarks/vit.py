"""Vision Transformer throughput: attnlab vs timm at the same configuration and weights.

    python benchmarks/vit.py --threads 1 --repeats 5

One process; timm builds each model (random weights), ``attnlab.interop.from_timm_vit``
copies them, and the script checks the logits agree before timing. Measured, as medians
of interleaved repetitions (benchmarks/common.py):

* small: vit_tiny_patch4_28's shape (28x28 grey, 4x4 patches, 6 layers, d_model 128,
  4 heads, MLP 256, 10 classes), batch 128: inference images/s (eval, no_grad) and
  training images/s (forward + cross-entropy + backward + AdamW step);
* base: ViT-B/16 at 224x224, 1000 classes, batch 8: inference only.

timm is a test-only dependency, loaded as the tests do (tests/reference/timm_loader.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import interleaved_medians  # noqa: E402
from reference.timm_loader import import_timm  # noqa: E402

from attnlab.interop import from_timm_vit  # noqa: E402

SMALL = dict(img_size=28, patch_size=4, in_chans=1, num_classes=10, embed_dim=128, depth=6, num_heads=4,
             mlp_ratio=2.0)
BASE = dict(img_size=224, patch_size=16, in_chans=3, num_classes=1000, embed_dim=768, depth=12, num_heads=12)


def _pair(timm, settings):
    torch.manual_seed(0)
    theirs = timm.models.vision_transformer.VisionTransformer(**settings).eval()
    with torch.no_grad():  # timm zero-initialises the head: random values make the logit check mean something
        theirs.head.weight.normal_(0.0, 0.02)
    ours = from_timm_vit(theirs).eval()
    return theirs, ours


def _inference(model, images):
    def run():
        with torch.no_grad():
            model(images)
    return run


def _training(model, images, labels):
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def run():
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small-batch", type=int, default=128)
    parser.add_argument("--base-batch", type=int, default=8)
    parser.add_argument("--skip-base", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    timm = import_timm()
    if timm is None:
        sys.exit("timm is not installed: bash scripts/setup.sh test (installs it into .venv/timm-site)")
    print(f"torch {torch.__version__}, timm {timm.__version__}, {args.threads} thread(s), "
          f"medians of {args.repeats} interleaved runs")
    rows = []
    theirs, ours = _pair(timm, SMALL)
    images = torch.randn(args.small_batch, 1, 28, 28)
    labels = torch.randint(0, 10, (args.small_batch,))
    with torch.no_grad():
        difference = (theirs(images) - ours(images)).abs().max().item()
    times = interleaved_medians({"timm": _inference(theirs, images), "attnlab": _inference(ours, images)},
                                repeats=args.repeats)
    rows.append(("small", "inference", args.small_batch, times, difference))
    times = interleaved_medians({"timm": _training(theirs, images, labels),
                                 "attnlab": _training(ours, images, labels)}, repeats=args.repeats)
    rows.append(("small", "training", args.small_batch, times, difference))
    if not args.skip_base:
        theirs, ours = _pair(timm, BASE)
        images = torch.randn(args.base_batch, 3, 224, 224)
        with torch.no_grad():
            difference = (theirs(images) - ours(images)).abs().max().item()
        times = interleaved_medians({"timm": _inference(theirs, images), "attnlab": _inference(ours, images)},
                                    repeats=args.repeats)
        rows.append(("vit_base_patch16_224", "inference", args.base_batch, times, difference))
    print("| model | mode | batch | timm images/s | attnlab images/s | ratio | max logit difference |")
    print("|---|---|---|---|---|---|---|")
    for name, mode, batch, times, difference in rows:
        print(f"| {name} | {mode} | {batch} | {batch / times['timm']:.1f} | {batch / times['attnlab']:.1f} | "
              f"{times['timm'] / times['attnlab']:.2f}x | {difference:.1e} |")


if __name__ == "__main__":
    main()
