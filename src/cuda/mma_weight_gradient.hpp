// Exact float32's gradients.weight on the tensor cores (3xTF32 on mma.sync), reading grad_y and x
// as they lie:
//
//   gradients.weight[k, r*H + h] = sum_b grad_y[b, k] * x[r, b, h]
//
// The reduction runs along b, which is neither operand's unit stride, so the forward's mma
// kernel (both operands along the reduction) would need both transposed first; this kernel
// instead copies k-tiles of rows b whole and reads its fragments across them.
#pragma once

#include <string>

#include "core/problem.hpp"
#include "cuda/mma_gemm_kernel.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda {

// Empty where the kernel can run the problem's gradients.weight, else why not (the layouts it
// needs: grad_y's rows and x's slices in 16-byte chunks).
std::string mma_weight_gradient_why_not(const BackwardProblem& p);
// Enqueues gradients.weight of a float32 problem with B >= 1 (mma_weight_gradient_why_not empty).
// The tile's rows are outputs k, its columns r*H + h: 128 x 64 or 64 x 64; `automatic` takes the
// larger where its grid still covers every multiprocessor.
void run_mma_weight_gradient(const BackwardProblem& p, CudaStream stream, MmaTile tile = MmaTile::automatic);

}  // namespace gather_linear::cuda
