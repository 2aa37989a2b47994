#!/usr/bin/env bash
# Multi30k German->English with the `multi30k` preset: the quality-bar recipe of issue 3
# (goal: BLEU >= 38 lower-cased tokenized on test_2016_flickr, in <= 2 hours on 2 CPU cores).
#
#   bash scripts/recipes/multi30k_de_en.sh                      # De->En into runs/multi30k_de_en
#   SRC=en TGT=de bash scripts/recipes/multi30k_de_en.sh        # En->De into runs/multi30k_en_de
#   bash scripts/recipes/multi30k_de_en.sh --resume             # continue an interrupted run
#
# Extra arguments go to `attnlab train translation`. Multi30k is read from
# $ATTNLAB_DATA/multi30k (default here: ../shared/data, the project's offline copy); see
# `python -c "from attnlab.data import download_multi30k; download_multi30k()"` to fetch it.
# Record the command, wall time, commit and both scores in docs/results.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
export ATTNLAB_DATA="${ATTNLAB_DATA:-$(cd .. && pwd)/shared/data}"
SRC="${SRC:-de}"
TGT="${TGT:-en}"
OUT="${OUT:-runs/multi30k_${SRC}_${TGT}}"

start=$(date +%s)
# Batches of <= 3,072 padded tokens (~2,600 target tokens, ~160 updates an epoch); Noam schedule
# peaking at 2.0e-3 (d_model 256, warm-up 1,000); dropout 0.2 against over-fitting 29k pairs;
# training stops after 108 minutes of updates (--max-minutes), and the final model averages the
# last 5 checkpoints, 250 updates apart (section 6.1 of the paper).
attnlab train translation --data multi30k --src "$SRC" --tgt "$TGT" --preset multi30k --set dropout=0.2 \
  --vocab-size 8000 --max-tokens 3072 --max-steps 100000 --max-minutes 108 --warmup 1000 --lr-scale 1.0 \
  --label-smoothing 0.1 --val-every 250 --save-every 250 --keep 5 --average-last 5 \
  --out "$OUT" "$@"
attnlab evaluate --model "$OUT/model" --data multi30k --split test --beam 4 --alpha 0.6 \
  --output "$OUT/test_2016_flickr.$TGT" --json "$OUT/test_scores.json" --show 3
echo "commit $(git rev-parse --short HEAD), wall time $(( $(date +%s) - start )) s"
