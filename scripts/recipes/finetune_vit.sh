#!/usr/bin/env bash
# The ViT paper's recipe in miniature (issue 37): train on Fashion-MNIST at 28x28, then --init
# it at 42x42 (images upsampled; the 4x4 grid of position embeddings resized to 6x6 in 2D) for
# a short fine-tuning; against the same total updates from scratch at 28 px.
#
#   bash scripts/recipes/finetune_vit.sh           # into runs/finetune_vit
#   SEED=1 OUT=runs/finetune_vit_s1 bash scripts/recipes/finetune_vit.sh   # the second seed
#
# Budgets in updates x batch (128 images): 1,000 at 28 px + 150 at 42 px, vs 1,150 at 28 px.
# Each run prints its test accuracy on the 10,000 test images at its end.
# Results and the commit they came from: docs/results.md, "Fine-tuning with --init".
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
OUT="${OUT:-runs/finetune_vit}"
SEED="${SEED:-0}"
COMMON=(--data fashion-mnist --batch-size 128 --weight-decay 0.05 --label-smoothing 0.1 --shift 2 --seed "$SEED"
        --threads 1 --no-progress)

# 1. pre-train at 28 px, 1,000 updates
attnlab train vit "${COMMON[@]}" --preset vit_tiny_patch7_28 --max-steps 1000 --lr 1e-3 --warmup 100 \
  --val-every 500 --save-every 500 --out "$OUT/start"
# 2. fine-tune at 42 px, 150 updates (fine-tuning defaults: a tenth of the peak lr, 5 % warm-up)
attnlab train vit "${COMMON[@]}" --init "$OUT/start/model" --image-size 42 --max-steps 150 \
  --val-every 150 --save-every 150 --out "$OUT/ft42"
# 3. scratch at 28 px, the same 1,150 updates
attnlab train vit "${COMMON[@]}" --preset vit_tiny_patch7_28 --max-steps 1150 --lr 1e-3 --warmup 100 \
  --val-every 575 --save-every 575 --out "$OUT/scratch"
# The extra row of docs/results.md (a 5x higher fine-tuning peak, one try):
#   attnlab train vit "${COMMON[@]}" --init "$OUT/start/model" --image-size 42 --max-steps 150 --lr 5e-4 \
#     --val-every 150 --save-every 150 --out "$OUT/ft42_lr5e-4"
