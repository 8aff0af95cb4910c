#!/usr/bin/env bash
# Installs what is missing, then builds and runs every test:
#   1. Release build: the whole GoogleTest suite (ctest) and the CLI smoke runs,
#   2. AddressSanitizer + UBSan build (clang): the whole suite with bounded case counts (ATTN_TEST_QUICK),
#   3. ThreadSanitizer build: the selector's concurrency tests,
#   4. libFuzzer harnesses (clang, ASan + UBSan): scripts/fuzz.sh, 30 s per harness,
#   5. the Python module (one wheel) and its pytest suite,
#   6. attn inside vLLM: vLLM's CPU build in a venv of its own (scripts/install_vllm.py), attn's
#      vLLM tests (python/tests_vllm) and vLLM's own attention-backend tests pointed at attn.
# Long sweeps: ATTN_TEST_LONG=1 scripts/test.sh runs the Backends/ConformanceLong.* sweeps (they skip
# themselves otherwise) in the Release run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
JOBS=$(nproc)
# Ninja (setup.sh installs it): a faster scheduler than make, and its .ninja_log says what took long.
export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
PYTHON=${PYTHON:-python3}

# Each step prints the minutes the run has taken so far: CI must stay well inside its time.
step() { echo; echo "=== $* === ($((SECONDS / 60)) min $((SECONDS % 60)) s so far)"; }

# ccache (setup.sh installs it): the wheel's libattn, built below by scikit-build-core, is the Release
# build's objects again. A cache key holds the compiler's name, the flags and paths relative to
# CCACHE_BASEDIR, so both trees name g++, pass -Werror and sit one folder deep (build/, build-wheel/).
# The sanitizer and fuzz trees use it too: a later run on the same machine (another clone) then
# compiles only what changed, where these trees took ~20 of CI's minutes. They build with line
# tables (-g1), for which ccache would hash the build folder's absolute path unless told not to
# (a cached object's debug info may then name the clone that compiled it).
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
LAUNCHER=-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
command -v ccache >/dev/null || LAUNCHER=

step "Release build"
# CUDA for one architecture (sm_90): nothing runs CUDA here, the build checks that it compiles.
CXX=g++ cmake -S . -B build $LAUNCHER -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_TESTS=ON -DATTN_SKIP_BACKENDS= -DATTN_BUILD_BENCH=ON -DATTN_BUILD_CLI=ON -DATTN_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build build -j"$JOBS"
step "Release tests"
ctest --test-dir build --output-on-failure --no-tests=error -j"$JOBS"
step "bench smoke (attn bench --quick)"
./build/attn bench --quick >/dev/null && echo "attn bench --quick: ok"

# Sanitizer builds at -O1 (what the sanitizers recommend) with line tables only (-g1): enough for
# the reports' stack traces, and much faster to compile than -O2 -g (the ASan build took 41 min).
# The ASan + UBSan tree is clang's: it compiles these sources in about half g++'s time, under
# -Werror like the Release tree (clang warns where g++ does not: unsequenced arguments). It is not
# the fuzz harnesses' tree: their coverage on every edge made the suite several times slower.
SANITIZER_OPT="-O1 -g1 -DNDEBUG"
step "AddressSanitizer + UBSan build (clang)"
CC=clang CXX=clang++ cmake -S . -B build-asan $LAUNCHER -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$SANITIZER_OPT" -DATTN_SANITIZE=address,undefined -DATTN_WERROR=ON -DATTN_BUILD_TESTS=ON -DATTN_SKIP_BACKENDS= -DATTN_BUILD_CLI=ON -DATTN_BUILD_BENCH=OFF -DATTN_WITH_CUDA=OFF >/dev/null
cmake --build build-asan -j"$JOBS"
step "AddressSanitizer + UBSan tests"
ATTN_TEST_QUICK=1 ATTN_TEST_LONG=0 ctest --test-dir build-asan --output-on-failure --no-tests=error -j"$JOBS"

step "ThreadSanitizer build (selector concurrency)"
cmake -S . -B build-tsan $LAUNCHER -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$SANITIZER_OPT" -DATTN_SANITIZE=thread -DATTN_BUILD_TESTS=ON -DATTN_SKIP_BACKENDS= -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_CLI=OFF -DATTN_WITH_CUDA=OFF >/dev/null
cmake --build build-tsan -j"$JOBS" --target attn_concurrency_tests
step "ThreadSanitizer tests"
ctest --test-dir build-tsan --output-on-failure --no-tests=error -R "^concurrency:"

step "Fuzzing (scripts/fuzz.sh, 30 s per harness)"
ATTN_FUZZ_LAUNCHER=$LAUNCHER scripts/fuzz.sh 30

step "Python module"
VLLM_VENV=${ATTN_VLLM_VENV:-build-vllm/venv}
CXX=g++ "$PYTHON" -m pip wheel -q --no-build-isolation --no-deps -C build-dir=build-wheel -C cmake.define.ATTN_WERROR=ON \
  ${LAUNCHER:+-C "cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache"} . -w build-py/dist
WHEEL=$(ls -t build-py/dist/attn-*.whl | head -1)
"$PYTHON" -m pip install -q --force-reinstall --no-deps "$WHEEL"
set +e
"$PYTHON" -m pytest -q python/tests
rc=$?
set -e
[[ $rc -eq 5 ]] && { echo "pytest collected no tests"; exit 1; }

step "attn inside vLLM (vLLM's CPU build, its attention-backend tests)"
"$PYTHON" scripts/install_vllm.py "$VLLM_VENV" build-vllm/vllm-src
"$VLLM_VENV/bin/python" -m pip install -q --force-reinstall --no-deps "$WHEEL"
set +e
PYTHONPATH=python/tests_vllm:build-vllm/vllm-src "$VLLM_VENV/bin/python" -m pytest -q -rs -p vllm_glue \
  python/tests_vllm build-vllm/vllm-src/tests/v1/attention/test_attention_backends.py
vrc=$?
set -e
[[ $vrc -eq 5 ]] && { echo "vLLM pytest collected no tests"; exit 1; }
echo "=== done in $((SECONDS / 60)) min $((SECONDS % 60)) s ==="
exit $(( rc != 0 ? rc : vrc ))
