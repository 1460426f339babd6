// Exact float32's gradients.weight on the tensor cores (3xTF32 on mma.sync), reading grad_y and x
// as they lie:
//
//   gradients.weight[k, r*H + h] = sum_b grad_y[b, k] * x[r, b, h]
//
// The reduction runs along b, which is neither operand's unit stride, so the forward's mma
// kernel (both operands along the reduction) would need both transposed first; this kernel
// instead copies k-tiles of rows b whole and reads its fragments across them.
#pragma once

#include <cstddef>
#include <string>

#include "core/problem.hpp"
#include "cuda/mma_gemm_kernel.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda {

// Empty where the kernel can run the problem's gradients.weight, else why not (the layouts it
// needs: grad_y's rows and x's slices in 16-byte chunks).
std::string mma_weight_gradient_why_not(const BackwardProblem& p);
// How the kernel runs: its tile (rows: outputs k, columns: r*H + h; 128 x 64 or 64 x 64) and
// how many parts the reduction over b splits into (1: none), each part's sums written to scratch
// and then added in order (deterministic).
constexpr int kMaxWeightGradientParts = 16;
struct WeightGradientLaunch {
  MmaTile tile = MmaTile::rows128_cols64;
  int parts = 1;
};
// The library's choice: the larger tile where its grid covers every multiprocessor, and the
// reduction split where the tiles are fewer than two a multiprocessor.
WeightGradientLaunch mma_weight_gradient_launch(const BackwardProblem& p);
std::size_t mma_weight_gradient_scratch_bytes(const BackwardProblem& p, const WeightGradientLaunch& launch);

// Enqueues gradients.weight of a float32 problem with B >= 1 (mma_weight_gradient_why_not empty);
// `scratch` holds mma_weight_gradient_scratch_bytes on a 16-byte boundary.
void run_mma_weight_gradient(const BackwardProblem& p, const WeightGradientLaunch& launch, void* scratch,
                             CudaStream stream);

}  // namespace gather_linear::cuda
