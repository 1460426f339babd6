// The weight-streaming kernel: a few rows of x (up to 32) against a large weight, as in one
// decoding step of a language model. Entry points for the dispatcher and the benchmarks.
#pragma once

#include <cstdint>
#include <string>

#include "core/problem.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda {

// Rows of x one launch serves: every block multiplies all of them by its rows of the weight.
inline constexpr std::int64_t kWeightStreamMaxRows = 32;
// Outputs per tile (the mma's 16 rows): one block, or one cluster, per tile.
inline constexpr std::int64_t kWeightStreamTileOutputs = 16;

// When the next kernel in the stream may launch: right after the wait for the previous one, or
// once the weight has been streamed; by_rows takes the measured choice for the row count.
enum class DependentLaunch { by_rows, early, late };

// How one launch divides the work and overlaps its neighbours; zero and by_rows take the defaults.
struct WeightStreamTuning {
  int warps = 0;  // warps per block (1 to 16), splitting the reduction between them
  // Programmatic launch only: prefetch the first steps into L2 before waiting for the previous kernel.
  bool prefetch = true;
  DependentLaunch dependents = DependentLaunch::by_rows;
  int splits = 0;  // blocks splitting each 16 outputs' reduction, as one cluster (1 to 8; sm_90 only)
};

std::string weight_stream_why_not(const Problem& p);
// float32 runs as TF32 under Fp32Precision::tf32, else as exact 3xTF32.
void run_weight_stream(const Problem& p, Fp32Precision precision, CudaStream stream, WeightStreamTuning tuning = {});

}  // namespace gather_linear::cuda
