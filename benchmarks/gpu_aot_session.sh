#!/usr/bin/env bash
# One device-machine call for the ahead-of-time CUDA step (issue 40): which packaging and loading
# works (benchmarks/aot_cuda_probe.py, every variant in its own process, so a crash is a line, not
# the end), then GPT-2-small greedy through the package against attnlab's CUDA graphs and HF's
# static cache (benchmarks/gpu.py --only aot) when attnlab's own path (variant F) works; a native
# backtrace of the package loader under gdb where gdb is installed; the GPU tests with
# GPU_TESTS=1. Logs go to $OUT.
#   [AOT_DTYPES=fp32,bf16] [GPU_TESTS=1] bash benchmarks/gpu_aot_session.sh
. "$(dirname "$0")/gpu_common.sh"
which g++ gcc c++ 2>&1 | tee -a "$OUT/device.txt"
timeout 240 python3 benchmarks/aot_cuda_probe.py --workdir /tmp/aot-probe --seconds 170 2>&1 | tee "$OUT/probe.log"
for f in /tmp/aot-probe/logs/*; do echo "== $f"; tail -40 "$f"; done > "$OUT/probe-logs.txt" 2>&1
which gdb >/dev/null 2>&1 && timeout 60 gdb -batch -ex run -ex bt --args python3 benchmarks/aot_cuda_probe.py \
  --workdir /tmp/aot-probe --child load "A in-so public" > "$OUT/gdb.log" 2>&1
if grep -E "^F " "$OUT/probe.log" | grep -q ": ok:"; then
  timeout "${AOT_BENCH_SECONDS:-230}" python3 -X faulthandler benchmarks/gpu.py --only aot --quick \
    --aot-dtypes "${AOT_DTYPES:-fp32}" 2>&1 | tee "$OUT/gpu-aot.log"
else
  echo "attnlab's own path (F) did not run: no GPT-2 rows" | tee "$OUT/gpu-aot.log"
fi
if [ -n "${GPU_TESTS:-}" ]; then
  timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu 2>&1 | tail -25 | tee "$OUT/pytest.log"
fi
