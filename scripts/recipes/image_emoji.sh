#!/usr/bin/env bash
# Twemoji 32×32 RGB, class-conditional Image Transformer (issue 14): local 1D over the 3,072
# sub-pixels (imagetransformer_colour_small, the 10 emoji categories as classes), 55 minutes of
# updates, then the test split (378 emoji) in bits/dim and a sample grid with one row per category.
#
#   bash scripts/recipes/image_emoji.sh
#   MINUTES=20 OUT=runs/emoji_short bash scripts/recipes/image_emoji.sh
#
# The data: npm's emoji-datasource-twitter under $ATTNLAB_DATA/emoji-datasource-twitter (default
# here: ../shared/data); `python -c "import attnlab.data.emoji as e; print(e.HOW_TO_GET)"` says how
# to fetch it. Record the command, wall time, commit and the test bits/dim in docs/results.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
export ATTNLAB_DATA="${ATTNLAB_DATA:-$(cd .. && pwd)/shared/data}"
MINUTES="${MINUTES:-55}"
OUT="${OUT:-runs/image_emoji}"
start=$(date +%s)
attnlab train image --data emoji --classes --preset imagetransformer_colour_small --batch-size 8 --lr 1e-3 \
  --warmup 200 --max-steps 100000 --max-minutes "$MINUTES" --val-every 500 --val-images 128 --save-every 500 \
  --threads "${THREADS:-2}" --out "$OUT" "$@"
attnlab sample-images --model "$OUT/model" --n 6 --temperature 0.9 --out "$OUT/samples_by_category.png" --force
echo "commit $(git rev-parse --short HEAD), wall time $(( $(date +%s) - start )) s, test: $(cat "$OUT/evaluation/results.json")"
