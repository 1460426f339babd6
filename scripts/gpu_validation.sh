#!/usr/bin/env bash
# One pass over everything that needs the GPU, for a lent GPU machine without this project's
# packages (carry .deps/googletest and .deps/cutlass along): build (scripts/build_gpu_host.sh), the
# C++ GPU suite, the PyTorch package and its tests, then the benchmarks. Logs and CSVs go to $1
# (default bench/results/gpu_run).
#   scripts/gpu_validation.sh <out-dir>
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/gpu_run}
mkdir -p "$out"
export PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1
status=0
step() { echo "== $*"; }

step build
{ scripts/build_gpu_host.sh build/gpu && python3 -m pip install --no-build-isolation --no-deps . ; } \
  > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }

step "C++ GPU tests"
timeout 300 build/gpu/tests/test_cuda_forward --gtest_brief=1 > "$out/test_cuda.log" 2>&1 || status=1
tail -2 "$out/test_cuda.log"

step "Python tests"
timeout 300 python3 -m pytest tests/python -q -p no:cacheprovider > "$out/pytest.log" 2>&1 || status=1
tail -3 "$out/pytest.log"

step "CLI: seed problem"
build/gpu/tools/gather-linear | tee "$out/cli_seed.txt" || status=1

step "latency-kernel variants"
timeout 150 build/gpu/bench/kernel_variants latency > "$out/latency_variants.csv" 2>&1 || status=1

step "float32 sweep"
timeout 300 bench/run_sweep.sh build/gpu/tools/gather-linear bench/shapes_sweep.txt "$out/sweep_fp32.csv" \
  2> /dev/null || status=1

step "bfloat16 sweep"
timeout 200 bench/run_sweep.sh build/gpu/tools/gather-linear bench/shapes_sweep.txt "$out/sweep_bf16.csv" \
  --dtype bf16 2> /dev/null || status=1

step "GETT on the largest shapes"
timeout 120 build/gpu/bench/kernel_variants gett_large > "$out/gett_large.csv" 2>&1 || status=1

step "op over library"
timeout 100 python3 bench/op_overhead.py --cli build/gpu/tools/gather-linear "$out/op_overhead.csv" || status=1

step "KernelBench protocol"
timeout 200 python3 bench/kernelbench_seed.py "$out/kernelbench_seed.csv" > "$out/kernelbench_seed.txt" 2>&1 || status=1
cat "$out/kernelbench_seed.txt"
exit $status
