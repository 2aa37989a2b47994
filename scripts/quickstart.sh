#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job: train a small German->English Transformer
# offline on Debian's trans-de-en example sentences (about 10 minutes on 2 CPU cores), print
# sacreBLEU on the held-out test split with a few translations, and write an attention
# heatmap. Everything goes to runs/quickstart (the model: runs/quickstart/model). Extra
# arguments go to `attnlab train translation`; a second run reuses the finished training.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
attnlab train translation --data trans-de-en --src de --tgt en --preset multi30k --vocab-size 4000 \
    --max-tokens 1500 --max-steps 800 --warmup 200 --lr-scale 0.7 --val-every 200 --save-every 200 --keep 2 \
    --out runs/quickstart --resume "$@" \
  && attnlab evaluate --model runs/quickstart/model --data trans-de-en --split test --show 5 --batch-size 64 \
  && exec attnlab attention --model runs/quickstart/model "Ich habe heute leider keine Zeit." -o runs/quickstart/attention.png
