#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test attn: compilers and libraries
# from apt, Python packages from PyPI. Safe to re-run: it installs only what is missing.
set -euo pipefail

# clang, libclang-rt-14-dev (libFuzzer, ASan and UBSan runtimes) and libomp-dev (clang's OpenMP)
# build the sanitizer suite and the fuzz harnesses (scripts/test.sh, scripts/fuzz.sh); ninja-build
# schedules the builds; ccache lets the Python wheel reuse the Release build's objects.
APT_PACKAGES=(cmake g++ make ninja-build ccache pkg-config libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
              clang libclang-rt-14-dev libomp-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] apt-get install ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
# import name → PyPI name
declare -A PY_PACKAGES=([numpy]=numpy [nanobind]=nanobind [scikit_build_core]=scikit-build-core [pytest]=pytest
                        [hypothesis]=hypothesis [ml_dtypes]=ml_dtypes [matplotlib]=matplotlib
                        [transformers]=transformers)
pip_missing=()
for mod in "${!PY_PACKAGES[@]}"; do
  "$PYTHON" -c "import $mod" >/dev/null 2>&1 || pip_missing+=("${PY_PACKAGES[$mod]}")
done
if ((${#pip_missing[@]})); then
  echo "[setup] pip install ${pip_missing[*]}"
  "$PYTHON" -m pip install -q "${pip_missing[@]}"
fi
# PyTorch (CPU use) for the interop tests: the smallest install PyPI allows, see the script.
"$PYTHON" -c "import torch" >/dev/null 2>&1 || "$PYTHON" "$(dirname "$0")/install_torch.py"
echo "[setup] dependencies present"
