// The glue between at::Tensor and the framework-free library: tensors become TensorViews with
// their sizes and strides as they are (a permuted head-major x goes in without a copy), and the
// library's errors become the exceptions PyTorch users expect.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <array>
#include <optional>
#include <utility>
#include <vector>

#include "gather_linear/gather_linear.hpp"

namespace gather_linear::torch_binding {

// The views of one forward call, and the tensors that must outlive it.
struct ForwardArguments {
  at::Tensor y;       // the output, (B, K), allocated like x by the PyTorch allocator
  at::Tensor weight;  // weight itself, or a copy with unit inner stride
  at::Tensor bias;    // bias made contiguous; undefined when absent
  TensorView x_view, weight_view, y_view;
  std::optional<TensorView> bias_view;
};

// Views x, weight and bias as they are (bias made contiguous, weight given a unit inner stride
// if it lacks one), validates them (gather_linear::output_sizes, the library's own checks and
// messages) and allocates y.
ForwardArguments prepare_forward(const at::Tensor& x, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias);

// The views of one backward call (gather_linear::backward, the op) and the gradients it returns.
struct BackwardArguments {
  std::vector<at::Tensor> gradients;  // the requested ones, in the order x, weight, bias
  at::Tensor grad_y, x, weight;       // what the views point into (grad_y and weight as the library needs them)
  TensorView grad_y_view, x_view, weight_view;
  Gradients gradient_views;
};

// Views grad_y, x and weight (an absent x or weight, which no requested gradient reads, as a
// shape without data; grad_y and weight copied where their strides are not ones the library
// takes), validates them (the library's checks and messages, under `options`) and allocates the
// requested gradients: x's laid out (B, R, H), the layout one GEMM writes, whatever x's.
BackwardArguments prepare_backward(const at::Tensor& grad_y, const std::optional<at::Tensor>& x,
                                   const std::optional<at::Tensor>& weight, at::IntArrayRef x_size,
                                   std::array<bool, 3> output_mask, const Options& options);

// gather_linear::forward as registered, for the kernels that call it again below their own
// dispatch key (autograd, autocast).
using ForwardSignature = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&);
const c10::TypedOperatorHandle<ForwardSignature>& forward_operator();

// gather_linear::Error surfaces in Python as ValueError (invalid_argument), NotImplementedError
// (unsupported) or RuntimeError (cuda_error), with the library's "<argument>: <message>" text.
[[noreturn]] void throw_as_torch_error(const Error& error);

// Runs `body`, translating gather_linear::Error as above.
template <typename Body>
decltype(auto) translating_errors(Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (const Error& error) {
    throw_as_torch_error(error);
  }
}

}  // namespace gather_linear::torch_binding
