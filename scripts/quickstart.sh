#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job: train a small German->English Transformer
# offline on Multi30k (the German-English text ships inside attnlab) for 6 minutes of updates
# (under 10 minutes in all on 2 CPU cores, set-up included; a GPU is used when there is one),
# print sacreBLEU on the 1,000 held-out test_2016_flickr sentences with the first five
# translations, and write an attention heatmap. Everything goes to runs/quickstart (the model:
# runs/quickstart/model). Extra arguments go to `attnlab train translation`; a second run
# resumes the training for up to 6 more minutes (at most 4,000 updates in all).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
attnlab train translation --data multi30k --src de --tgt en --preset multi30k --vocab-size 4000 \
    --max-tokens 1500 --max-steps 4000 --max-minutes 6 --warmup 200 --lr-scale 0.7 --val-every 250 \
    --save-every 250 --keep 2 \
    --out runs/quickstart --resume "$@" \
  && attnlab evaluate --model runs/quickstart/model --data multi30k --split test --show 5 --batch-size 100 \
  && exec attnlab attention --model runs/quickstart/model "Ein Hund rennt durch den Schnee." -o runs/quickstart/attention.png
