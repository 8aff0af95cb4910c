#!/usr/bin/env bash
# Installs what is missing, builds attn (Release) and runs the main job: `attn run` on the
# built-in default model. Extra arguments go to `attn run`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_CLI=ON >/dev/null
cmake --build build -j"$(nproc)" --target attn_cli
./build/attn run "$@"
