#pragma once

#include <string>

#include "core/problem.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda {

std::string simt_gemm_why_not(const Problem& p);
void run_simt_gemm(const Problem& p, CudaStream stream);

}  // namespace gather_linear::cuda
