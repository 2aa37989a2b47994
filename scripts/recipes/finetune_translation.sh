#!/usr/bin/env bash
# Translation domain adaptation with --init (issue 37): a small Multi30k De->En model (the
# quickstart's settings, 300 updates) fine-tuned on trans-de-en (Debian's dictionary examples:
# apt-get install trans-de-en) vs trans-de-en from scratch at the same 80 updates; sacreBLEU on
# trans-de-en's 829 held-out test pairs, and on Multi30k test_2016_flickr before/after (forgetting).
#
#   bash scripts/recipes/finetune_translation.sh   # into runs/finetune_translation
#   START=runs/m30k/model STEPS=300 bash scripts/recipes/finetune_translation.sh
#       # from an existing Multi30k model (e.g. the README's 10-minute line), 300 updates each
#
# Budgets in updates x batch (batches of <= 1,500 tokens). Greedy decoding (--beam 1) to keep
# the evaluation short. Results: docs/results.md, "Fine-tuning with --init".
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -n "${VIRTUAL_ENV:-}" ] || . .venv/bin/activate
OUT="${OUT:-runs/finetune_translation}"
STEPS="${STEPS:-80}"
QUICK=(--src de --tgt en --max-tokens 1500 --threads 1 --no-progress)

# 1. the starting model: Multi30k, 300 updates (or START, an existing model directory)
if [ -n "${START:-}" ]; then
  if [ -e "$OUT/start/model" ] && [ ! -L "$OUT/start/model" ]; then
    echo "finetune_translation.sh: $OUT/start/model exists and is not this recipe's link to START: left alone" >&2
    exit 2
  fi
  mkdir -p "$OUT/start" && ln -sfn "$(cd "$START" && pwd)" "$OUT/start/model"
else
  attnlab train translation --data multi30k "${QUICK[@]}" --preset multi30k --vocab-size 4000 --max-steps 300 \
    --warmup 200 --lr-scale 0.7 --val-every 100 --save-every 100 --keep 2 --out "$OUT/start"
fi
# 2. fine-tuned on trans-de-en, STEPS updates (its vocabulary kept; fine-tuning defaults)
attnlab train translation --data trans-de-en "${QUICK[@]}" --init "$OUT/start/model" --max-steps "$STEPS" \
  --val-every "$STEPS" --save-every "$STEPS" --keep 1 --out "$OUT/ft"
# 3. trans-de-en from scratch, the same STEPS updates (the quickstart's settings, its own vocabulary)
attnlab train translation --data trans-de-en "${QUICK[@]}" --preset multi30k --vocab-size 4000 --max-steps "$STEPS" \
  --warmup 200 --lr-scale 0.7 --val-every "$STEPS" --save-every "$STEPS" --keep 1 --out "$OUT/scratch"

for model in start ft scratch; do
  attnlab evaluate --model "$OUT/$model/model" --data trans-de-en --split test --beam 1 --batch-size 100 --threads 1
done
for model in start ft; do
  attnlab evaluate --model "$OUT/$model/model" --data multi30k --split test --beam 1 --batch-size 100 --threads 1
done
# The extra row of docs/results.md: a real tenth of the start's peak learning rate (Noam keeps the peak
# of --warmup 400 when it shrinks the warm-up to fit: 0.1 * 256^-0.5 * 400^-0.5 = 3.1e-4):
#   attnlab train translation --data trans-de-en "${QUICK[@]}" --init "$OUT/start/model" --max-steps 80 \
#     --lr-scale 0.1 --warmup 400 --val-every 80 --save-every 80 --keep 1 --out "$OUT/ft_low"
