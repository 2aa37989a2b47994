#!/usr/bin/env bash
# One device-machine call (issue 40): where AOTInductor's package loader dies on the GPU machine.
# Every earlier load there, CPU packages included, ended in a segmentation fault while the runtime
# was built (docs/benchmarks.md). This call separates the package from the process that loads it:
#   1. the environment that could matter (compiler and loader variables, CPU flags, kernel);
#   2. a CPU package built on the 2-core CPU machine with the same torch (2.11.0+cu130), carried in
#      .carry/K-cpu.pt2, loaded here without CUDA: a crash means the loading process, not the build;
#   3. the same load with one OpenMP thread, and with no GPU visible;
#   4. a native backtrace of the crashing load under cuda-gdb (gdb is not installed there);
#   5. a CPU package built here, kept in $OUT to load on the CPU machine (the other direction);
#   6. the GPU tests (pytest -m gpu tests/gpu).
#   bash benchmarks/gpu_aot_backtrace.sh      (carry .carry, made first on the CPU machine:
#   PROBE_DEVICE=cpu python benchmarks/aot_cuda_probe.py --workdir .carry --child build cpu
#   && mv .carry/cpu.pt2 .carry/K-cpu.pt2; .carry/ in .git/info/exclude)
# Run once, 2026-11-28 (docs/benchmarks.md, "The crash found"): the carried package loaded.
. "$(dirname "$0")/gpu_common.sh"
{
  env | grep -E '^(CPATH|C_INCLUDE_PATH|CPLUS_INCLUDE_PATH|LD_|LIBRARY_PATH|TORCH|INDUCTOR|CC|CXX|CFLAGS|CXXFLAGS|LDFLAGS|OMP|MKL|KMP|MALLOC|GLIBC|PYTHON|CUDA)' | sort
  ulimit -a; nproc; uname -r; grep -m1 '^flags' /proc/cpuinfo; grep -m1 'model name' /proc/cpuinfo
  python3 -c "import torch; print(torch.__file__, 'cxx11abi', torch.compiled_with_cxx11_abi(), 'isa', torch.backends.cpu.get_cpu_capability())"
  ls -d /usr/include/torch /usr/local/include/torch /usr/local/lib/libtorch* 2>&1
  which g++ cuda-gdb; g++ --version | head -1; ld --version | head -1
} > "$OUT/env.txt" 2>&1
mkdir -p /tmp/p && (PROBE_DEVICE=cpu timeout 200 python3 benchmarks/aot_cuda_probe.py --workdir /tmp/p --child build cpu \
  > "$OUT/build-cpu.log" 2>&1; cp /tmp/p/cpu.pt2 "$OUT/cpu-built-on-gpu-machine.pt2") &
builder=$!
probe() {  # $1: a label; the rest: env assignments for the load of the carried package
  local label=$1; shift
  echo "== $label" >> "$OUT/loads.txt"
  env "$@" PROBE_DEVICE=cpu timeout 90 python3 -X faulthandler benchmarks/aot_cuda_probe.py --workdir .carry \
    --child load "K cpu package loader(-1)" >> "$OUT/loads.txt" 2>&1
  echo "rc $?" >> "$OUT/loads.txt"
}
probe "carried CPU package, no CUDA used"
probe "one OpenMP thread" OMP_NUM_THREADS=1
probe "no GPU visible" CUDA_VISIBLE_DEVICES=
timeout 150 cuda-gdb -batch -ex "set pagination off" -ex "handle SIGPIPE nostop noprint" -ex run -ex "bt 40" \
  -ex 'x/6i $pc' -ex "info registers rip rsp rdi rsi rax" --args env PROBE_DEVICE=cpu python3 \
  benchmarks/aot_cuda_probe.py --workdir .carry --child load "K cpu package loader(-1)" > "$OUT/gdb.log" 2>&1
echo "cuda-gdb rc $?" >> "$OUT/gdb.log"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu > "$OUT/pytest.log" 2>&1
echo "pytest rc $?" >> "$OUT/pytest.log"
wait $builder
if [ -f /tmp/p/cpu.pt2 ]; then
  cp /tmp/p/cpu.pt2 /tmp/p/K-cpu.pt2
  echo "== CPU package built here" >> "$OUT/loads.txt"
  PROBE_DEVICE=cpu timeout 90 python3 -X faulthandler benchmarks/aot_cuda_probe.py --workdir /tmp/p \
    --child load "K cpu package loader(-1)" >> "$OUT/loads.txt" 2>&1
  echo "rc $?" >> "$OUT/loads.txt"
fi
tail -n 5 "$OUT"/loads.txt "$OUT"/pytest.log; grep -A12 "SIGSEGV" "$OUT/gdb.log" | head -40
