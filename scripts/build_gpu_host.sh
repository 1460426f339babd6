#!/usr/bin/env bash
# Configures and builds on a GPU machine that lacks this project's Debian packages (OpenBLAS,
# GoogleTest): no CPU BLAS baseline, GoogleTest from sources in .deps/googletest (a copy of
# Debian's /usr/src/googletest) and CUTLASS from .deps/cutlass (scripts/fetch_cutlass.sh), both
# carried along. Usage: scripts/build_gpu_host.sh [build-dir [extra cmake -D options...]]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/gpu}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGATHER_LINEAR_WITH_OPENBLAS=OFF \
  -DGATHER_LINEAR_GTEST_SOURCE_DIR="$PWD/.deps/googletest" "${@:2}"
cmake --build "$build" -j "$(nproc)"
