// The validated, normalised form of a forward call that every kernel receives.
#pragma once

#include <cstdint>

#include "gather_linear/tensor_view.hpp"

namespace gather_linear {

// A[b, r*H + h] = x[r*x_stride_r + b*x_stride_b + h*x_stride_h] is the gathered GEMM operand;
// y = A * W^T + bias. Strides are in elements. Once validated, every extent and every offset
// reachable through these strides fits in int64.
struct Problem {
  std::int64_t R = 0, B = 0, H = 0, K = 0;
  std::int64_t RH = 0;  // the GEMM's reduction length, R*H
  DType dtype = DType::float32;
  Device device{};

  const void* x = nullptr;
  std::int64_t x_stride_r = 0, x_stride_b = 0, x_stride_h = 0;
  const void* weight = nullptr;
  std::int64_t weight_stride_k = 0;
  const void* bias = nullptr;  // contiguous, or null for no bias
  void* y = nullptr;
  std::int64_t y_stride_b = 0;
  // Inner strides: 1 for every forward call (validation requires it). The CPU backward phrases
  // its GEMMs as problems of this form over transposed views, with other inner strides; only the
  // CPU engine and the reference accept those.
  std::int64_t weight_stride_c = 1, y_stride_k = 1;

  std::int64_t outputs() const { return B * K; }
  double flops() const { return 2.0 * static_cast<double>(B) * static_cast<double>(K) * static_cast<double>(RH); }
  // The weight's K x RH elements, in bytes (what a direct path streams once from memory).
  std::int64_t weight_bytes() const { return K * RH * static_cast<std::int64_t>(dtype_size(dtype)); }
};

// The validated form of a backward call. x, weight and the sizes are in `forward` (its bias and
// y unset). A gradient's pointer is null when it was not asked for or is empty: nothing to write.
struct BackwardProblem {
  Problem forward;
  const void* grad_y = nullptr;
  std::int64_t grad_y_stride_b = 0;  // the inner stride is 1
  void* grad_x = nullptr;
  std::int64_t grad_x_stride_r = 0, grad_x_stride_b = 0, grad_x_stride_h = 0;
  void* grad_weight = nullptr;
  std::int64_t grad_weight_stride_k = 0;  // the inner stride is 1
  void* grad_bias = nullptr;              // contiguous
};

}  // namespace gather_linear
