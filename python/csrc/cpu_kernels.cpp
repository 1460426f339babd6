// The CPU kernels of gather_linear::forward and gather_linear::backward: at::Tensors in, the
// library's CPU code does the rest (the SIMD gather-GEMM for float32/float64/16-bit, OpenMP
// threads shared with ATen).
#include <torch/library.h>

#include "tensor_views.hpp"

namespace gather_linear::torch_binding {
namespace {

at::Tensor forward_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  return translating_errors([&] {
    ForwardArguments args = prepare_forward(x, weight, bias);
    // Default options: the CPU has no TF32, and the library's CPU kernels are deterministic.
    gather_linear::forward(args.x_view, args.weight_view, args.bias_view, args.y_view);
    return args.y;
  });
}

std::vector<at::Tensor> backward_cpu(const at::Tensor& grad_y, const std::optional<at::Tensor>& x,
                                     const std::optional<at::Tensor>& weight, c10::SymIntArrayRef x_size,
                                     std::array<bool, 3> output_mask) {
  return translating_errors([&] {
    BackwardArguments args = prepare_backward(grad_y, x, weight, C10_AS_INTARRAYREF_SLOW(x_size), output_mask, {});
    gather_linear::backward(args.grad_y_view, args.x_view, args.weight_view, args.gradient_views);
    return std::move(args.gradients);
  });
}

}  // namespace
}  // namespace gather_linear::torch_binding

TORCH_LIBRARY_IMPL(gather_linear, CPU, m) {
  m.impl("forward", &gather_linear::torch_binding::forward_cpu);
  m.impl("backward", &gather_linear::torch_binding::backward_cpu);
}
