#!/usr/bin/env bash
# One device-machine call (issue 40), after aot.package_compiler: the CUDA packages of every
# decoding layout (greedy LM, beam and greedy search, image sampler) against the eager step,
# built with the machine's own $CXX (the GPU image's /opt/gcc/bin/g++ has no shared libstdc++;
# attnlab must pick another compiler by itself and say so). Logs go to $OUT.
#   bash benchmarks/gpu_aot_tests.sh
. "$(dirname "$0")/gpu_common.sh"
echo "CXX=${CXX:-unset}" | tee -a "$OUT/device.txt"
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 3 -rP -m gpu tests/gpu/test_aot_cuda.py 2>&1 \
  | tee "$OUT/pytest-aot.log" | grep -E "passed|failed|error|attnlab:|Error" | head -40
