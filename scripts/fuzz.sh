#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, clang with ASan + UBSan) in build-fuzz/ and runs
# each for the given seconds (default 60), starting from its seed corpus. ATTN_FUZZ_BUILD_DIR names
# a tree already configured with clang and -DATTN_FUZZ=ON to use instead (such a tree may build
# the GoogleTest suite too); ATTN_FUZZ_LAUNCHER, cmake flags for a compiler launcher (ccache).
# Prints executions per
# harness; fails on any crash, leak, timeout or sanitizer report (the input is saved as
# <build>/crashes/<harness>/crash-*: add it to tests/fuzz/regressions/<harness>/).
#   scripts/fuzz.sh [seconds] [harness ...]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
HARNESSES=("$@")
((${#HARNESSES[@]})) || HARNESSES=(model_config metadata_forward names constructors differential plugin_descriptor tuning_file)
JOBS=${JOBS:-$(nproc)}

BUILD=${ATTN_FUZZ_BUILD_DIR:-build-fuzz}
if [[ -z ${ATTN_FUZZ_BUILD_DIR:-} ]]; then
  # Backends the harnesses never reach are left out: the fuzz build compiles everything with
  # coverage and two sanitizers, which is slow.
  CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S . -B "$BUILD" ${ATTN_FUZZ_LAUNCHER:-} -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DATTN_FUZZ=ON \
    -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_CLI=OFF -DATTN_WITH_CUDA=OFF \
    "-DATTN_SKIP_BACKENDS=cuda_flash;cpu_mla;cpu_sparse;cpu_blocksparse" >/dev/null
fi
targets=()
for h in "${HARNESSES[@]}"; do targets+=("fuzz_$h"); done
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"

export ATTN_LOG=error
# Leaks: the registry and its plugins live for the whole process on purpose.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for h in "${HARNESSES[@]}"; do
  work=$BUILD/corpus/$h          # grows as the fuzzer finds new coverage; seeds stay untouched
  crashes=$BUILD/crashes/$h
  mkdir -p "$work" "$crashes"
  log=$BUILD/fuzz_$h.log
  set +e
  "$BUILD/fuzz/fuzz_$h" "$work" "tests/fuzz/corpus/$h" -max_total_time="$SECONDS_EACH" -timeout=10 \
    -rss_limit_mb=4096 -malloc_limit_mb=512 -max_len=65536 -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}')
  if [[ $rc -ne 0 ]]; then
    echo "fuzz_$h: FAILED after ${execs:-?} executions (exit $rc); input in $crashes/, log $log:"
    grep -m1 -E 'ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error|uncaught exception|deadly signal' "$log" || tail -5 "$log"
    failed+=("$h")
  else
    echo "fuzz_$h: ok, ${execs:-?} executions in ${SECONDS_EACH}s"
  fi
done
if ((${#failed[@]})); then
  echo "fuzzing found crashes in: ${failed[*]}"
  exit 1
fi
