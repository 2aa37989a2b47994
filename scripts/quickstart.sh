#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job: train a small German->English Transformer
# offline on Debian's trans-de-en example sentences for 6 minutes of updates (under 10 minutes
# in all on 2 CPU cores), print sacreBLEU on the held-out test split with a few translations,
# and write an attention heatmap. Everything goes to runs/quickstart (the model:
# runs/quickstart/model). Extra arguments go to `attnlab train translation`; a second run
# resumes the training for up to 6 more minutes (at most 2,000 updates in all).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
attnlab train translation --data trans-de-en --src de --tgt en --preset multi30k --vocab-size 4000 \
    --max-tokens 1500 --max-steps 2000 --max-minutes 6 --warmup 200 --lr-scale 0.7 --val-every 250 \
    --save-every 250 --keep 2 \
    --out runs/quickstart --resume "$@" \
  && attnlab evaluate --model runs/quickstart/model --data trans-de-en --split test --show 5 --batch-size 64 \
  && exec attnlab attention --model runs/quickstart/model "Ich habe heute leider keine Zeit." -o runs/quickstart/attention.png
