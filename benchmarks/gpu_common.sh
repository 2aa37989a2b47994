# Sourced by the device-machine session scripts (gpu_session.sh, gpu_aot_session.sh): the
# repository root, the environment, $OUT for the logs (the device tool brings them back), and
# what machine and libraries this is, into $OUT/device.txt.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/device.txt"
