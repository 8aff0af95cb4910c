#!/usr/bin/env bash
# The device check for cuda_flash, meant to run in one go on a machine with an NVIDIA GPU:
# builds the core and the CUDA module for this GPU, runs the GPU conformance tests (cuda_flash
# against the fp64 reference), then the decode / prefill benchmark, and prints its table last:
# decode bandwidth against measured D2D copy bandwidth, prefill FLOP/s against cuBLAS bf16 GEMM.
#   tools/gpu-check.sh [--quick]        BUILD_DIR=... CUDA_ARCHS=... JOBS=... to override
# Exit status: non-zero if the build or any conformance test failed (the table still prints).
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$here/build-gpu}"
archs="${CUDA_ARCHS:-native}"   # the GPU in this machine; CUDA_ARCHS="80;89;90" builds the release set
jobs="${JOBS:-$(nproc)}"
quick=""
[[ "${1:-}" == "--quick" ]] && quick="--quick"

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"

echo "== configure + build ($build, CUDA archs $archs, $jobs jobs)"
start=$(date +%s)
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DATTN_WITH_CUDA=ON -DATTN_BUILD_BENCH=OFF \
      -DATTN_BUILD_CLI=OFF -DCMAKE_CUDA_ARCHITECTURES="$archs" >"$build.configure.log" 2>&1 \
  || { tail -30 "$build.configure.log"; echo "gpu-check: configure failed"; exit 2; }
cmake --build "$build" -j"$jobs" --target attn_cuda attn_cuda_tests attn_cuda_bench 2>&1 | grep -E "error|Error" | head -40
[[ -x "$build/src/backends/cuda_flash/attn_cuda_tests" && -f "$build/libattn_cuda.so" ]] \
  || { echo "gpu-check: build failed"; exit 2; }
echo "   built in $(( $(date +%s) - start )) s"

echo "== conformance: cuda_flash vs the fp64 reference"
status=0
ATTN_LOG=error "$build/src/backends/cuda_flash/attn_cuda_tests" --gtest_brief=1 || status=1

echo "== benchmark"
table="$(ATTN_LOG=error "$build/src/backends/cuda_flash/attn_cuda_bench" $quick)" || status=1
echo "gpu-check: conformance $([[ $status == 0 ]] && echo passed || echo FAILED)"
echo "$table"
exit $status
