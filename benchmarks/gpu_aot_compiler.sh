#!/usr/bin/env bash
# One device-machine call (issue 40), after gpu_aot_backtrace.sh found that a CPU package built on
# the CPU machine loads on the GPU machine while one built there crashes: the build is the cause.
# That image sets CXX=/opt/gcc/bin/g++, which inductor compiles with, and its libraries carry
# libstdc++ linked statically (no libstdc++.so.6 among their needed libraries). Here:
#   1. what /opt/gcc/bin/g++ and the system g++ link (compiler.txt);
#   2. a native backtrace of loading the package /opt/gcc built (carried in .carry/gb) under cuda-gdb;
#   3. with CXX=/usr/bin/g++: a CPU package built and loaded, and attnlab's own CUDA path
#      (generate(compile="aot") on lm_tiny against the eager tokens);
#   4. if that ran: benchmarks/gpu.py --only aot (GPT-2 small greedy b1 against HF's static cache).
#   bash benchmarks/gpu_aot_compiler.sh      (carry .carry: .carry/gb/K-cpu.pt2 is the
#   cpu-built-on-gpu-machine.pt2 that gpu_aot_backtrace.sh brings back)
# Run once, 2026-11-28, before attnlab chose the compiler itself (aot.package_compiler).
. "$(dirname "$0")/gpu_common.sh"
{
  ls -la /opt/gcc/bin/g++ /opt/gcc/bin/gcc; /opt/gcc/bin/g++ -v 2>&1 | tail -2; ls /opt/gcc /opt/gcc/lib* 2>&1 | head -40
  for c in /opt/gcc/bin/g++ /usr/bin/g++; do
    echo "$c: libstdc++.so=$($c -print-file-name=libstdc++.so) libstdc++.a=$($c -print-file-name=libstdc++.a)" \
      "libgomp.so=$($c -print-file-name=libgomp.so)"; $c -dumpspecs | grep -A1 -E '^\*(link|startfile|lib):' | head -12
  done
} > "$OUT/compiler.txt" 2>&1
timeout 120 cuda-gdb -batch -ex "set pagination off" -ex "handle SIGPIPE nostop noprint" -ex run -ex "bt 40" \
  -ex 'x/6i $pc' --args env PROBE_DEVICE=cpu python3 benchmarks/aot_cuda_probe.py --workdir .carry/gb \
  --child load "K cpu package loader(-1)" > "$OUT/gdb.log" 2>&1 &
mkdir -p /tmp/q /tmp/r
(export CXX=/usr/bin/g++ PROBE_DEVICE=cpu
 timeout 150 python3 benchmarks/aot_cuda_probe.py --workdir /tmp/q --child build cpu && cp /tmp/q/cpu.pt2 /tmp/q/K-cpu.pt2 \
 && timeout 60 python3 -X faulthandler benchmarks/aot_cuda_probe.py --workdir /tmp/q --child load "K cpu package loader(-1)"
 echo "rc $?") > "$OUT/sysgxx-cpu.log" 2>&1 &
CXX=/usr/bin/g++ timeout 200 python3 -X faulthandler benchmarks/aot_cuda_probe.py --workdir /tmp/r --child lm - \
  > "$OUT/sysgxx-lm.log" 2>&1
echo "rc $?" >> "$OUT/sysgxx-lm.log"
wait
for f in /tmp/q/K-cpu.pt2; do [ -f $f ] && python3 -m zipfile -e $f /tmp/q/x && readelf -d /tmp/q/x/*/data/aotinductor/model/*.so \
  | grep NEEDED >> "$OUT/sysgxx-cpu.log"; done
tail -n 3 "$OUT/sysgxx-cpu.log" "$OUT/sysgxx-lm.log"
if grep -q '"ok": true' "$OUT/sysgxx-lm.log"; then
  CXX=/usr/bin/g++ timeout "${AOT_BENCH_SECONDS:-330}" python3 -X faulthandler benchmarks/gpu.py --only aot --quick \
    --aot-dtypes "${AOT_DTYPES:-fp32,bf16}" 2>&1 | tee "$OUT/gpu-aot.log"
fi
