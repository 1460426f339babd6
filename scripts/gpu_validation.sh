#!/usr/bin/env bash
# Everything that needs the GPU, for a lent GPU machine without this project's packages (carry
# .deps/googletest and .deps/cutlass along). Logs and CSVs go to <out-dir>.
#   scripts/gpu_validation.sh <out-dir> [tests|bench|all|cpu]
# `tests`: build (scripts/build_gpu_host.sh) and install the PyTorch package, then the C++ GPU
# suites (forward, backward; sharded), compute-sanitizer (memcheck, racecheck) and pytest: about
# 12 minutes on an H200 after the build (the sum of those steps' times in the thirty-second session).
# `bench`: the CLI, the float32, bfloat16 and TF32 sweeps, the GETT on the largest shapes, the op
# against the library, the KernelBench protocol, the library's backward against GEMM-only, the
# backward's ATen compositions, the autograd node's cost and a training step, on the build `tests`
# left (run it right after, while the machine is still warm): about 9 minutes before the autograd
# node's step, which took about 50 s in the thirty-third session.
# `all` (default): both.
# `cpu`: the CPU suites and the CPU benchmarks (forward, backward op, training step against eager
# PyTorch and torch.compile) on this host's processor, which has more cores than the development
# machine; builds as `tests` does when there is no build yet: about 8 minutes with the build, before
# the small problems' backward was added (5.5 minutes on the 2-core development VM).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/gpu_run}
phase=${2:-all}
mkdir -p "$out"
export PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1
status=0
step() { echo "== $*"; }
BACKWARD_SANITIZE_FILTER='Sweep/CudaBackwardSweep.EveryGradient/R4_B12_H32_K56_*:Sweep/CudaBackwardSweep.EveryGradient/R2_B33_H13_K65_*'
BACKWARD_SANITIZE_FILTER+=':Sweep/CudaBackwardSweep.EveryGradient/R2_B257_H8_K65_*:Sweep/CudaBackwardSweep.EveryGradient/R3_B4_H8_K0_*'
BACKWARD_SANITIZE_FILTER+=':CudaBackwardTest.OverlappingWeightRows:CudaBackwardTest.GraphCaptureReplaysWithNewInputs'
BACKWARD_SANITIZE_FILTER+=':CudaBackwardTest.BiasGradientBitsDoNotDependOnAlignment'

# run_sharded <gtest binary> <shards> <filter> <log>: the shards in parallel, their logs joined.
run_sharded() {
  local binary=$1 shards=$2 filter=$3 log=$4 i pids=()
  for ((i = 0; i < shards; i++)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout 500 "$binary" --gtest_brief=1 \
      --gtest_filter="$filter" > "$log.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || status=1; done
  cat "$log".* > "$log"; rm -f "$log".*
}

build() {
  step build
  { scripts/build_gpu_host.sh build/gpu && python3 -m pip install --no-build-isolation --no-deps . ; } \
    > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
}

if [[ $phase == cpu ]]; then
  [[ -x build/gpu/tests/test_cpu_forward ]] || build
  step "CPU tests ($(nproc) cores)"
  for suite in test_cpu_forward test_cpu_backward test_cpu_engine_asan; do
    timeout 300 build/gpu/tests/$suite --gtest_brief=1 > "$out/$suite.log" 2>&1 || status=1
    tail -2 "$out/$suite.log"
  done
  step "CPU forward against PyTorch"
  timeout 300 python3 bench/cpu_comparison.py "$out/cpu_comparison.csv" || status=1
  step "CPU backward op against ATen"
  timeout 200 python3 bench/backward_variants.py --device cpu --gradients all --rounds 9 \
    "$out/backward_variants_op_cpu.csv" || status=1
  step "CPU backward op against ATen on small problems (the limits of autograd.cpp's cpu_problem_is_small)"
  timeout 400 python3 bench/backward_variants.py --device cpu --small --gradients all --rounds 9 \
    "$out/backward_variants_small_cpu.csv" || status=1
  step "CPU training step"
  timeout 300 python3 bench/training_step.py --device cpu "$out/training_step_cpu.csv" || status=1
  exit $status
fi

if [[ $phase == tests || $phase == all ]]; then
  build

  step "C++ GPU tests"
  # Sharded side by side: the forward suite's tests add up to about 3.5 minutes (17 before the
  # thirty-fourth session's faster references and fills); in ten shards the longest took 53 s
  # (with the backward suite's three shards running alongside). The two tests that read the
  # device's free memory, which other shards move, run alone afterwards.
  alone='*FusedKernelsAllocateNothingPerCall:*GettGraphDeterminismAndMemory'
  run_sharded build/gpu/tests/test_cuda_forward 10 "-$alone" "$out/test_cuda.log"
  timeout 60 build/gpu/tests/test_cuda_forward --gtest_brief=1 \
    --gtest_filter="$alone" >> "$out/test_cuda.log" 2>&1 || status=1
  run_sharded build/gpu/tests/test_cuda_backward 3 '*' "$out/test_cuda_backward.log"
  grep -E "PASSED|FAILED" "$out/test_cuda.log" "$out/test_cuda_backward.log"

  step "compute-sanitizer"
  SANITIZE_TOOLS="memcheck racecheck" timeout 400 scripts/sanitize_gpu.sh build/gpu/tests/test_cuda_forward \
    > "$out/sanitize.log" 2>&1 || status=1
  grep -E "^==|SUMMARY" "$out/sanitize.log"
  # The backward's GEMMs are cuBLAS's (racecheck flags cuBLAS's own 16-bit kernels): memcheck over
  # every form, racecheck over the bias gradient's sums alone.
  SANITIZE_TOOLS=memcheck timeout 200 scripts/sanitize_gpu.sh build/gpu/tests/test_cuda_backward \
    "$BACKWARD_SANITIZE_FILTER" > "$out/sanitize_backward.log" 2>&1 || status=1
  SANITIZE_TOOLS=racecheck timeout 100 scripts/sanitize_gpu.sh build/gpu/tests/test_cuda_backward \
    'CudaBackwardTest.BiasGradientAlone' >> "$out/sanitize_backward.log" 2>&1 || status=1
  grep -E "^==|SUMMARY" "$out/sanitize_backward.log"

  step "the installed CMake package, from a project of its own (examples/cpp_consumer, CUDA too)"
  timeout 120 ctest --test-dir build/gpu -R '^installed_package$' -V > "$out/installed_package.log" 2>&1 ||
    status=1
  grep -E "relative error|no GPU|tests passed|tests failed" "$out/installed_package.log"

  step "Python tests"
  timeout 300 python3 -m pytest tests/python -q -p no:cacheprovider > "$out/pytest.log" 2>&1 || status=1
  tail -3 "$out/pytest.log"
fi

if [[ $phase == bench || $phase == all ]]; then
  step "CLI: seed problem"
  build/gpu/tools/gather-linear | tee "$out/cli_seed.txt" || status=1

  step "float32 sweep"
  timeout 300 bench/run_sweep.sh build/gpu/tools/gather-linear bench/shapes_sweep.txt "$out/sweep_fp32.csv" \
    2> /dev/null || status=1

  step "bfloat16 sweep"
  timeout 200 bench/run_sweep.sh build/gpu/tools/gather-linear bench/shapes_sweep.txt "$out/sweep_bf16.csv" \
    --dtype bf16 2> /dev/null || status=1

  step "TF32 sweep"
  timeout 200 bench/run_sweep.sh build/gpu/tools/gather-linear bench/shapes_sweep.txt "$out/sweep_tf32.csv" \
    --tf32 2> /dev/null || status=1

  step "decode-sized bfloat16 sweep (a few rows against large weights)"
  timeout 120 bench/run_sweep.sh build/gpu/tools/gather-linear bench/shapes_decode.txt "$out/sweep_decode_bf16.csv" \
    --dtype bf16 2> /dev/null || status=1

  step "GETT on the largest shapes"
  timeout 120 build/gpu/bench/kernel_variants gett_large > "$out/gett_large.csv" 2>&1 || status=1

  step "host time per forward"
  timeout 60 build/gpu/bench/kernel_variants host > "$out/host_overhead.csv" 2>&1 || status=1
  cat "$out/host_overhead.csv"

  step "op over library"
  timeout 100 python3 bench/op_overhead.py --cli build/gpu/tools/gather-linear "$out/op_overhead.csv" || status=1

  step "KernelBench protocol"
  timeout 100 python3 bench/kernelbench_seed.py "$out/kernelbench_seed.csv" > "$out/kernelbench_seed.txt" 2>&1 ||
    status=1
  cat "$out/kernelbench_seed.txt"
  timeout 60 build/gpu/bench/kernel_variants latency_cold > "$out/latency_cold.csv" 2>&1 || status=1

  step "what recording the autograd graph adds"
  timeout 100 python3 bench/autograd_overhead.py "$out/autograd_overhead.csv" --rounds 11 || status=1

  step "backward variants"
  timeout 120 python3 bench/backward_variants.py "$out/backward_variants.csv" > "$out/backward_variants.txt" 2>&1 ||
    status=1

  step "backward against GEMM-only"
  timeout 200 build/gpu/bench/backward_timing > "$out/backward_timing.csv" 2>&1 || status=1
  cat "$out/backward_timing.csv"

  step "training step"
  timeout 240 python3 bench/training_step.py "$out/training_step.csv" > "$out/training_step.txt" 2>&1 || status=1
  grep -v -i warn "$out/training_step.txt"
fi
exit $status
