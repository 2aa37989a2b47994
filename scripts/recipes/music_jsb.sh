#!/usr/bin/env bash
# JSB Chorales with the Music Transformer: relative attention vs absolute positions at the
# same budget (issue 13; the paper's Table 2: baseline 0.417, relative 0.357 nats/token;
# goal: relative <= 0.357 and below our own baseline), then length generalisation: each
# model is trained on windows of L = 256 tokens and scored on the validation chorales in
# chunks of L and 2L, and a Bach-primed continuation is generated at 2x the trained length.
#
#   bash scripts/recipes/music_jsb.sh                    # both runs, <= 2 h of updates each
#   MINUTES=25 bash scripts/recipes/music_jsb.sh         # a shorter budget for each
#   ONLY=relative bash scripts/recipes/music_jsb.sh      # one of them (relative | absolute)
#
# JSB is read from $ATTNLAB_DATA/jsb_chorales (default here: ../shared/data). One thread per
# run (the 2-core machine): run this alone. Record the commands, wall times, commit and the
# scores (OUT/eval.json) in docs/results.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
export ATTNLAB_DATA="${ATTNLAB_DATA:-$(cd .. && pwd)/shared/data}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
MINUTES="${MINUTES:-115}"
ROOT="${ROOT:-runs/music_jsb}"
CONTEXT=256

run() {  # name preset
  local name=$1 preset=$2 out="$ROOT/$1" start
  start=$(date +%s)
  # Windows of 256 tokens (64 time steps = 4 bars of 16ths), 16 per update; cosine schedule
  # from 1e-3; dropout 0.2 against over-fitting 221k training tokens; checkpoints every 250.
  attnlab train music --data jsb --preset "$preset" --context $CONTEXT --batch-size 16 --lr 1e-3 --warmup 200 \
    --max-steps 20000 --max-minutes "$MINUTES" --set dropout=0.2 --val-every 250 --save-every 250 \
    --threads 1 --no-progress --out "$out" "${@:3}"
  attnlab evaluate-music --model "$out/model" --data jsb --context $CONTEXT $((2 * CONTEXT)) --threads 1 \
    --json "$out/eval.json"
  attnlab generate-music --model "$out/model" --primer jsb-valid:0 --primer-steps 16 --length $((2 * CONTEXT)) \
    --top-k 8 --seed 1 --threads 1 --force --out "$out/bach_primed_2x.mid"
  echo "$name: commit $(git rev-parse --short HEAD), wall time $(( $(date +%s) - start )) s"
}

if [ "${ONLY:-relative}" = relative ]; then run relative music_jsb_relative "$@"; fi
if [ "${ONLY:-absolute}" = absolute ]; then run absolute music_jsb_baseline "$@"; fi
