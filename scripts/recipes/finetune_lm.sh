#!/usr/bin/env bash
# Fine-tuning a language model with --init (issue 37): a small Shakespeare character model,
# then Multi30k's English captions, against the same updates from scratch on the captions.
#
#   bash scripts/recipes/finetune_lm.sh            # into runs/finetune_lm
#
# Budgets are in updates x batch (16 windows x 128 characters), the same for the fine-tuned
# and the scratch row. On the shared 2-core machine under load ~10 with --threads 1, about
# 1 s an update. Held-out figure: evaluate-lm on the captions' val split (never trained on).
# Results and the commit they came from: docs/results.md, "Fine-tuning with --init".
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
OUT="${OUT:-runs/finetune_lm}"
SEEDS="${SEEDS:-0 1}"
SHRINK=(--set num_layers=3 --set d_model=128 --set num_heads=4 --set d_ff=512 --set dropout=0.0)
mkdir -p "$OUT"
python scripts/recipes/multi30k_captions_text.py "$OUT/text"

# 1. the starting model: Shakespeare (train lm's default text), 600 updates
attnlab train lm --out "$OUT/start" "${SHRINK[@]}" --context 128 --batch-size 16 --max-steps 600 \
  --warmup 30 --lr 3e-3 --val-every 200 --save-every 200 --val-batches 20 --seed 0 --threads 1 --no-progress
attnlab evaluate-lm --model "$OUT/start/model" --text "$OUT/text/captions_val.txt" --threads 1

for seed in $SEEDS; do
  # 2. fine-tuned: --init the Shakespeare model, 200 updates on the captions (fine-tuning defaults)
  attnlab train lm --init "$OUT/start/model" --out "$OUT/ft_s$seed" --text "$OUT/text/captions_train.txt" \
    --valid-text "$OUT/text/captions_val.txt" --context 128 --batch-size 16 --max-steps 200 \
    --val-every 100 --save-every 100 --val-batches 31 --seed "$seed" --threads 1 --no-progress
  attnlab evaluate-lm --model "$OUT/ft_s$seed/model" --text "$OUT/text/captions_val.txt" --threads 1
  # 3. scratch: the same model shape, 200 updates on the captions
  attnlab train lm --out "$OUT/scratch_s$seed" "${SHRINK[@]}" --text "$OUT/text/captions_train.txt" \
    --valid-text "$OUT/text/captions_val.txt" --context 128 --batch-size 16 --max-steps 200 --warmup 30 \
    --lr 3e-3 --val-every 100 --save-every 100 --val-batches 31 --seed "$seed" --threads 1 --no-progress
  attnlab evaluate-lm --model "$OUT/scratch_s$seed/model" --text "$OUT/text/captions_val.txt" --threads 1
done
