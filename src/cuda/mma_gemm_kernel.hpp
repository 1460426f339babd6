// The tensor-core (mma.sync) fused kernel family: entry points for the dispatcher.
#pragma once

#include <string>

#include "core/problem.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda {

// Block tile (rows b x outputs k); `automatic` takes the largest that still fills the GPU.
enum class MmaTile { automatic, rows128_cols128, rows128_cols64, rows64_cols64 };

namespace mma {
// tf32x3: exact float32 from three tf32 products; tf32: TF32 allowed; f16/bf16: 16-bit inputs.
enum class Mode { tf32x3, tf32, f16, bf16 };
template <Mode M> void run_mode(const Problem& p, MmaTile tile, CudaStream stream);
}  // namespace mma

// The mode the problem's dtype and precision policy call for.
mma::Mode mma_mode_for(const Problem& p, Fp32Precision precision);

std::string mma_gemm_why_not(const Problem& p);
void run_mma_gemm(const Problem& p, Fp32Precision precision, CudaStream stream, MmaTile tile = MmaTile::automatic);

}  // namespace gather_linear::cuda
