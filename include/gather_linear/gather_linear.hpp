// gather-linear: y[b, k] = bias[k] + sum_r sum_h x[r, b, h] * W[k, r*H + h]
//
// That is nn.Linear(R*H, K)(cat([x[r] for r in range(R)], dim=-1)) without building the
// concatenation. Shapes: x (R, B, H) with any non-negative strides; weight (K, R*H) with unit
// inner stride and any row stride; bias (K) contiguous or absent; y (B, K) with unit inner
// stride. All tensors share one dtype and one device.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gather_linear/error.hpp"
#include "gather_linear/options.hpp"
#include "gather_linear/tensor_view.hpp"

// Same type as cudaStream_t, declared here so that this header needs no CUDA headers.
struct CUstream_st;

namespace gather_linear {

using CudaStream = CUstream_st*;

// Computes y. Validates everything first and throws gather_linear::Error without touching y
// when an argument is wrong. CUDA work is enqueued on `stream` (nullptr: the legacy default
// stream) and is not synchronised; it allocates nothing per call and is graph-capturable.
void forward(const TensorView& x, const TensorView& weight, const std::optional<TensorView>& bias,
             const TensorView& y, const Options& options = {}, CudaStream stream = nullptr);

// Validates x, weight and bias as forward() does (throwing the same Errors) and returns y's sizes
// (B, K): a caller that allocates y, such as a framework binding, does so only for valid inputs.
std::array<std::int64_t, 2> output_sizes(const TensorView& x, const TensorView& weight,
                                         const std::optional<TensorView>& bias);

// The kernel forward() would run for these arguments (validating them as forward does).
std::string_view select_kernel(const TensorView& x, const TensorView& weight,
                               const std::optional<TensorView>& bias, const TensorView& y,
                               const Options& options = {});

// Device scratch bytes the chosen kernel needs (0 for every fused kernel). Pass at least this
// much in Options::workspace to keep the library from using its own per-stream cache.
std::size_t workspace_bytes(const TensorView& x, const TensorView& weight,
                            const std::optional<TensorView>& bias, const TensorView& y,
                            const Options& options = {});

// Where backward() writes the gradients of forward()'s inputs; an absent one is not computed.
// They are overwritten, not accumulated into.
struct Gradients {
  std::optional<TensorView> x;       // (R, B, H): any non-negative strides that keep elements apart
  std::optional<TensorView> weight;  // (K, R*H): unit inner stride, rows apart (stride(0) >= R*H)
  std::optional<TensorView> bias;    // (K): contiguous
};

// Given grad_y = dL/dy, (B, K) with unit inner stride and stride(0) >= K, writes
//   gradients.x[r, b, h]          = sum_k grad_y[b, k] * W[k, r*H + h]
//   gradients.weight[k, r*H + h]  = sum_b grad_y[b, k] * x[r, b, h]
//   gradients.bias[k]             = sum_b grad_y[b, k]
// straight into x's and W's layouts (no concatenation of x is needed where x has a unit stride in
// h or b). x and weight are validated as forward() validates them, except that only
// gradients.weight reads x's elements and only gradients.x reads weight's: without that gradient
// the input may have a null data pointer (a caller that kept only what it needs, as autograd
// does). Every gradient must match its input's dtype, device and sizes and share no memory with
// an input or another gradient. On CUDA, gradients.x and gradients.weight need B, K and R*H below
// 2^31 (cuBLASLt's extents; ErrorCode::unsupported otherwise); gradients.bias alone has no such
// limit. Errors, streams, devices, precision (Options::fp32_precision), determinism and scratch
// (Options::workspace / workspace_allocator, or the library's per-stream cache) behave as in
// forward(); Options::kernel must be "auto". 16-bit inputs accumulate in float32.
void backward(const TensorView& grad_y, const TensorView& x, const TensorView& weight, const Gradients& gradients,
              const Options& options = {}, CudaStream stream = nullptr);

// Device scratch bytes backward() needs for these arguments (0 on the CPU), validating them as
// backward() does.
std::size_t backward_workspace_bytes(const TensorView& grad_y, const TensorView& x, const TensorView& weight,
                                     const Gradients& gradients, const Options& options = {});

struct KernelInfo {
  std::string_view name;
  DeviceType device;
  bool fused;  // false for the unfused baselines (concatenate, then one GEMM)
  std::string_view description;
};

// Every kernel compiled into this build, in the dispatcher's order of preference.
std::vector<KernelInfo> available_kernels();

// Number of CUDA devices usable by this build (0 without a driver, a GPU or CUDA support).
int cuda_device_count();

}  // namespace gather_linear
