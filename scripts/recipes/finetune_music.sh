#!/usr/bin/env bash
# Music fine-tuning with --init (issue 37): a performance-event model of music21's Bach chorales
# (--data bach, 500 updates) fine-tuned on a MIDI folder of another genre (music21's fiddle tunes,
# written by music21_midi_folder.py) vs the same folder from scratch at the same 150 updates;
# nats per event on the folder's held-out tunes. Results: docs/results.md, "Music".
#
#   bash scripts/recipes/finetune_music.sh                # into runs/finetune_music
#   OUT=DIR FOLDER=DIR bash scripts/recipes/finetune_music.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -n "${VIRTUAL_ENV:-}" ] || . .venv/bin/activate
OUT="${OUT:-runs/finetune_music}"
FOLDER="${FOLDER:-$OUT/fiddle}"
RUN=(--context 256 --batch-size 8 --threads 1 --no-progress)
[ -d "$FOLDER" ] || python scripts/recipes/music21_midi_folder.py ryansMammoth 150 "$FOLDER"
# 1. the start: Bach chorales as performance events, 500 updates
[ -e "$OUT/start/model/config.json" ] || attnlab train music --data bach "${RUN[@]}" --max-steps 500 --lr 1e-3 --warmup 50 \
  --val-every 250 --save-every 250 --seed 0 --out "$OUT/start"
for seed in 0 1; do
  # 2. fine-tuned on the fiddle tunes: the defaults the run prints
  attnlab train music --data "$FOLDER" --init "$OUT/start/model" "${RUN[@]}" --max-steps 150 \
    --val-every 150 --save-every 150 --seed "$seed" --out "$OUT/ft_$seed"
  # 3. from scratch, the same 150 updates
  attnlab train music --data "$FOLDER" "${RUN[@]}" --max-steps 150 --lr 1e-3 --warmup 15 \
    --val-every 150 --save-every 150 --seed "$seed" --out "$OUT/scratch_$seed"
done
# 4. fine-tuned at the scratch run's own learning rate (is it the weights or the rate?)
attnlab train music --data "$FOLDER" --init "$OUT/start/model" "${RUN[@]}" --max-steps 150 --lr 1e-3 --warmup 15 \
  --val-every 150 --save-every 150 --seed 0 --out "$OUT/ft_lr_0"
for model in ft_0 scratch_0 ft_1 scratch_1 ft_lr_0; do
  attnlab evaluate --model "$OUT/$model/model" --threads 1
done
