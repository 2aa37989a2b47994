#!/usr/bin/env bash
# Decoder-only text-to-image on the synthetic scenes (issue 15), within an hour on 2 CPU
# cores: the VQ-VAE (32x32 -> 8x8 tokens of a 512 codebook, ~8 min), the attribute reader
# that scores fidelity (on the 20,000-image reader split, ~6 min), then the TextToImage Transformer (--max-minutes 40), and the
# evaluation: VQ-VAE test PSNR and codebook use, fidelity of one sample per held-out prompt
# (400 prompts, half with unseen colour-shape pairs) against real test images (the ceiling),
# and a sample grid.
#
#   bash scripts/recipes/text_to_image_scenes.sh          # into runs/text_to_image_scenes
#
# Extra arguments go to `attnlab train text-to-image`. Record the command, wall time, commit
# and OUT/evaluation/results.json in docs/results.md; copy the grid to docs/figures/.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
OUT="${OUT:-runs/text_to_image_scenes}"

start=$(date +%s)
attnlab train text-to-image --data scenes --vqvae-steps 3000 --classifier-steps 2500 \
  --preset text_to_image_scenes --batch-size 64 --max-steps 6000 --lr 1e-3 --warmup 300 --label-smoothing 0.1 \
  --max-minutes 40 --eval-prompts 400 --temperature 1.0 --top-k 32 --out "$OUT" "$@"
attnlab imagine --model "$OUT/model" "a red circle above a green triangle" "a large blue square" \
  "a small yellow circle to the left of a large purple square" "a blue circle below a red square" \
  --n 8 --out "$OUT/evaluation/grid.png"
echo "wall time: $(( ($(date +%s) - start) / 60 )) min"
