#!/usr/bin/env bash
# Image captioning on the synthetic scenes (issue 15): a ViT-encoder captioner trained for
# at most an hour on 2 CPU cores, then BLEU-4, CIDEr and the grounding score on the test
# split (seen and unseen compositions apart) and attention overlays of 8 test images.
#
#   bash scripts/recipes/caption_scenes.sh                 # into runs/caption_scenes
#   bash scripts/recipes/caption_scenes.sh --resume        # continue an interrupted run
#
# Extra arguments go to `attnlab train caption`. Record the command, wall time, commit and
# the scores (OUT/evaluation/results.json) in docs/results.md; copy a figure to docs/figures/.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
OUT="${OUT:-runs/caption_scenes}"

start=$(date +%s)
# 8,000 training scenes (~33k captions); batches of 64 captions; AdamW, warm-up 300 then
# cosine to lr/100 over 7,000 updates (about 55 minutes at ~0.45 s an update on 2 cores);
# --max-minutes stops it at the hour in any case.
attnlab train caption --data scenes --preset captioner_scenes --batch-size 64 --max-steps 7000 --lr 1.5e-3 \
  --warmup 300 --label-smoothing 0.1 --val-every 500 --save-every 500 --max-minutes 57 --beam 3 \
  --out "$OUT" "$@"
attnlab evaluate-caption --model "$OUT/model" --split test --beam 3 --json "$OUT/evaluation/test.json" \
  --figures "$OUT/evaluation/figures" --figures-count 8
echo "wall time: $(( ($(date +%s) - start) / 60 )) min"
