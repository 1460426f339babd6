// The CPU kernel of gather_linear::forward: at::Tensors in, the library's CPU dispatcher does the
// rest (the SIMD gather-GEMM for float32/float64/16-bit, OpenMP threads shared with ATen).
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

}  // namespace
}  // namespace gather_linear::torch_binding

TORCH_LIBRARY_IMPL(gather_linear, CPU, m) { m.impl("forward", &gather_linear::torch_binding::forward_cpu); }
