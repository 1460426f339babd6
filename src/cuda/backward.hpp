// The CUDA backward's plan: one launch of our own kernel for small problems, else which form
// each gradient GEMM takes and where its scratch goes. run_backward() (core/kernel_registry.hpp)
// plans and runs; `backward_timing --forms` and `--one-launch` run plans whose forms they force,
// to measure where one form beats another.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/problem.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda {

// How gradients.x is written:
//   side_by_side   its slices side by side (the gradient of a head-major x): one GEMM in place;
//   slices_h_unit  R GEMMs in one batched call, each writing a slice with unit stride in h;
//   slices_b_unit  the same, each writing a slice with unit stride in b;
//   split          one GEMM into a (B, R*H) scratch, then split into place;
//   tensor_cores   exact float32 only: the weight transposed into scratch, then the 3xTF32
//                  tensor-core GEMM (the forward's mma kernel) into gradients.x where its slices
//                  sit side by side, else into a (B, R*H) scratch split into place.
enum class InputGradientForm { zero, side_by_side, slices_h_unit, slices_b_unit, split, tensor_cores };
// How gradients.weight reads x: in place (side_by_side, or batched slices with a unit stride in h
// or b), or from a concatenation of x made in scratch first; tensor_cores (exact float32 only):
// the 3xTF32 kernel of mma_weight_gradient.hpp, which reads grad_y and x in place.
enum class WeightGradientForm { zero, side_by_side, concatenated, slices_h_unit, slices_b_unit, tensor_cores };

// Exact float32's gradients.weight takes the tensor-core form from this many multiply-adds
// B*K*R*H, where x and grad_y lie in 16-byte chunks (weight_takes_tensor_cores in backward.cu
// gives the measurements).
constexpr std::int64_t kWeightTensorCoreMultiplyAdds = std::int64_t{1} << 27;

struct BackwardForms {
  InputGradientForm input = InputGradientForm::zero;    // only meaningful where gradients.x is requested
  WeightGradientForm weight = WeightGradientForm::zero;  // only where gradients.weight is
  // Small problems: every requested gradient in one launch of our own kernel (no cuBLAS, no
  // scratch) instead of the forms above, which choose_forms still fills in.
  bool one_launch = false;
};

// Offsets into the scratch: cuBLASLt's, then x's concatenation, then gradients.x as one
// (B, R*H) matrix before its split, then the weight's copy (contiguous rows for cuBLAS where its
// rows overlap, or transposed for the tensor-core form), then the partial column sums, then the
// tensor-core gradients.weight's partial sums where its reduction splits, each on a 256-byte
// boundary; only the parts the forms use.
struct ScratchLayout {
  std::size_t concatenation = 0, unsplit = 0, weight_copy = 0, partial = 0, weight_partial_sums = 0, total = 0;
};

struct BackwardPlan {
  BackwardForms forms;
  ScratchLayout scratch;
};

// The forms the library chooses for these arguments under this precision policy.
BackwardForms choose_forms(const BackwardProblem& p, Fp32Precision precision);
// The plan for the given forms, which must suit the problem's layouts (choose_forms' do); a
// tensor-core form the problem cannot take throws Error(unsupported).
BackwardPlan plan_backward(const BackwardProblem& p, const BackwardForms& forms);

// Enqueues the requested gradients on `stream`; `workspace` holds plan.scratch.total bytes.
void run_backward(const BackwardProblem& p, const BackwardPlan& plan, const Options& options, Workspace workspace,
                  CudaStream stream);

}  // namespace gather_linear::cuda
