#!/usr/bin/env bash
# One device-machine call: the GPU tests, a Multi30k model trained for a minute on the GPU, then
# benchmarks/gpu.py's sections. Each stage has its own time limit so one slow stage cannot eat
# the call; logs go to $OUT (the device tool brings them back).
#   bash benchmarks/gpu_session.sh [GPU.PY ARGS...]
. "$(dirname "$0")/gpu_common.sh"
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu 2>&1 | tail -25 | tee "$OUT/pytest.log"
timeout 130 python3 -c "import sys; from attnlab.cli.main import main; sys.exit(main(['train', 'translation', '--data', 'multi30k', '--src', 'de', '--tgt', 'en', '--preset', 'multi30k', '--out', '/tmp/m30k', '--max-minutes', '1.5', '--no-progress']))" > "$OUT/train.log" 2>&1
tail -12 "$OUT/train.log"
timeout "${GPU_BENCH_SECONDS:-280}" python3 benchmarks/gpu.py --translation-model /tmp/m30k/model "$@" 2>&1 | tee "$OUT/gpu.log"
