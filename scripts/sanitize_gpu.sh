#!/usr/bin/env bash
# Runs the GPU test suite's kernel coverage under compute-sanitizer: memcheck (out-of-bounds and
# misaligned accesses, leaks), racecheck (shared-memory races), synccheck and initcheck.
# The filter keeps sizes small (the tools slow kernels down 10-100x) but still reaches every
# kernel, dtype, layout and tile edge. Exit status is non-zero if any tool reports an error.
#   [SANITIZE_TOOLS="memcheck racecheck"] scripts/sanitize_gpu.sh <path/to/test_cuda_forward> [gtest filter]
# A filter given replaces the forward suite's (for another suite: test_cuda_backward).
set -uo pipefail
binary=${1:?usage: sanitize_gpu.sh <test_cuda_forward binary> [gtest filter]}
filter='Sweep/CudaForwardSweep.EveryKernel/R4_B12_H32_K56_*:Sweep/CudaForwardSweep.EveryKernel/R2_B33_H13_K65_*'
filter+=':Sweep/CudaForwardSweep.EveryKernel/R3_B191_H4_K66_*:Sweep/CudaForwardSweep.EveryKernel/R2_B127_H8_K129_*'
filter+=':Sweep/CudaForwardSweep.EveryKernel/R1_B129_H17_K127_*:Sweep/CudaForwardSweep.EveryKernel/R3_B4_H0_K5_*'
filter+=':CudaTest.GraphCaptureReplaysWithNewInputs:CudaTest.DeviceArgumentErrorsLeaveYUntouched'
# The GETT (16-bit and TF32, split reductions among them) without cuBLAS beside it (racecheck
# reports hazards inside cuBLAS's own 16-bit kernels).
filter+=':CudaTest.GettSchedulerTuningKeepsResults:CudaTest.GettTf32RoundsOperandsToNearest'
# The weight-streaming kernel with every division of the reduction between warps (no cuBLAS either).
filter+=':CudaTest.WeightStreamDeterministic'
filter=${2:-$filter}
status=0
for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
  echo "== compute-sanitizer --tool $tool"
  compute-sanitizer --tool "$tool" --error-exitcode 86 --print-limit 20 \
    "$binary" --gtest_filter="$filter" --gtest_brief=1 || status=1
done
exit $status
