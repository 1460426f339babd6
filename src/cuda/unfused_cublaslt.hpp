// The unfused baseline (concatenate + cuBLASLt GEMM with bias) and its two halves, which the
// CLI and benchmarks time separately (GEMM-only on an input concatenated beforehand).
#pragma once

#include <cstddef>
#include <string>

#include "core/problem.hpp"
#include "cuda/cublaslt_matmul.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda {

// Writes cat(x[0..R), dim=-1) as a row-major (B, R*H) matrix to `out` (B*R*H elements).
void concatenate(const Problem& p, void* out, CudaStream stream);

// y = concatenated * W^T + bias through cuBLASLt (TF32 for float32 when allowed). The bias, if
// any, must start on a 16-byte boundary (run_unfused copies one that does not).
void gemm_on_concatenated(const Problem& p, const void* concatenated, Fp32Precision precision, void* gemm_workspace,
                          CudaStream stream);

// The concatenation buffer, an aligned copy of a misaligned bias, and the GEMM's scratch (none
// when R*H = 0: y is the bias).
std::size_t unfused_workspace_bytes(const Problem& p);
std::string unfused_why_not(const Problem& p);
void run_unfused(const Problem& p, Fp32Precision precision, Workspace workspace, CudaStream stream);

}  // namespace gather_linear::cuda
