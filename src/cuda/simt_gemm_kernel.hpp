#pragma once

#include <string>

#include "core/problem.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda {

// Output tile per block; `automatic` takes the largest that still fills the GPU.
enum class SimtTile { automatic, rows128_cols128, rows128_cols64, rows64_cols64 };

std::string simt_gemm_why_not(const Problem& p);
void run_simt_gemm(const Problem& p, CudaStream stream, SimtTile tile = SimtTile::automatic);

}  // namespace gather_linear::cuda
