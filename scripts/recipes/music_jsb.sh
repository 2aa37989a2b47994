#!/usr/bin/env bash
# JSB Chorales with the Music Transformer: relative attention vs absolute positions at the
# same budget (issue 13; the paper's Table 2: baseline 0.417, relative 0.357 nats/token;
# goal: relative <= 0.357 and below our own baseline), then length generalisation: each
# model is trained on windows of L = 256 tokens and scored on the validation chorales in
# chunks of L and 2L, and a Bach-primed continuation is generated at 2x the trained length.
#
#   bash scripts/recipes/music_jsb.sh                    # both runs side by side, <= 2 h each
#   MINUTES=25 RELATIVE_STEPS=250 ABSOLUTE_STEPS=700 bash scripts/recipes/music_jsb.sh   # shorter
#   ONLY=relative bash scripts/recipes/music_jsb.sh      # one of them (relative | absolute)
#   ROOT=runs/music_jsb_t3 bash scripts/recipes/music_jsb.sh --transpose 3 --set dropout=0.3
#                                                        # extra arguments go to both `train music` runs
#
# JSB is read from $ATTNLAB_DATA/jsb_chorales (default here: ../shared/data). The two runs go
# side by side, one thread each (the 2-core machine: run nothing else), logs in ROOT/NAME.log.
# The learning rate follows a cosine over each run's update count, so the counts are what
# the budget buys on this CPU with both runs going (measured: ~700 tokens/s = 5.8 s per update
# for the relative model, ~1,950 tokens/s = 2.1 s for the baseline); the budget stops a run
# that is slower. Record the commands, wall times, commit and the scores (OUT/eval.json) in
# docs/results.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
export ATTNLAB_DATA="${ATTNLAB_DATA:-$(cd .. && pwd)/shared/data}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
MINUTES="${MINUTES:-115}"
RELATIVE_STEPS="${RELATIVE_STEPS:-1100}"
ABSOLUTE_STEPS="${ABSOLUTE_STEPS:-3000}"
ROOT="${ROOT:-runs/music_jsb}"
CONTEXT=256

run() {  # name preset steps
  local name=$1 preset=$2 steps=$3 out="$ROOT/$1" start
  start=$(date +%s)
  # Windows of 256 tokens (64 time steps = 4 bars of 16ths), 16 per update; cosine schedule
  # from 1e-3; dropout 0.2 against over-fitting 221k training tokens; checkpoints every 250.
  attnlab train music --data jsb --preset "$preset" --context $CONTEXT --batch-size 16 --lr 1e-3 --warmup 200 \
    --max-steps "$steps" --max-minutes "$MINUTES" --set dropout=0.2 --val-every 250 --save-every 250 \
    --threads 1 --no-progress --out "$out" "${@:4}"
  attnlab evaluate-music --model "$out/model" --data jsb --context $CONTEXT $((2 * CONTEXT)) --threads 1 \
    --json "$out/eval.json"
  attnlab generate-music --model "$out/model" --primer jsb-valid:0 --primer-steps 16 --length $((2 * CONTEXT)) \
    --top-k 8 --seed 1 --threads 1 --force --out "$out/bach_primed_2x.mid"
  echo "$name: commit $(git rev-parse --short HEAD), wall time $(( $(date +%s) - start )) s"
}

mkdir -p "$ROOT"
if [ "${ONLY:-relative}" = relative ]; then
  run relative music_jsb_relative "$RELATIVE_STEPS" "$@" > "$ROOT/relative.log" 2>&1 &
fi
if [ "${ONLY:-absolute}" = absolute ]; then
  run absolute music_jsb_baseline "$ABSOLUTE_STEPS" "$@" > "$ROOT/absolute.log" 2>&1 &
fi
status=0
for job in $(jobs -p); do wait "$job" || status=1; done
tail -n 3 "$ROOT"/*.log
exit $status
