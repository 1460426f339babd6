#pragma once

#include <cstdint>
#include <string>

#include "core/problem.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda {

// Up to this many outputs a lane group computes a 2x2 tile of y, beyond it a 4x4 tile.
inline constexpr std::int64_t kLatencySmallTileOutputs = 32768;

std::string latency_kernel_why_not(const Problem& p);
void run_latency_kernel(const Problem& p, CudaStream stream);

}  // namespace gather_linear::cuda
