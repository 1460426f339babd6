// The CUDA kernels of gather_linear::forward and gather_linear::backward. Everything PyTorch's own
// CUDA ops do is done here the same way, so the ops compose with streams, the caching allocator
// and CUDA graphs:
// - x's (grad_y's) device is made current (CUDAGuard) and the library launches on PyTorch's
//   current stream;
// - y (the gradients), and the workspace if the work needs one, come from at::empty (the caching
//   allocator; the workspace through Options::workspace_allocator, so that finding its size
//   does not validate the arguments again: the inputs were checked before the outputs were
//   allocated, and the library's call checks everything);
// - float32 uses TF32 exactly when nn.Linear's cuBLAS matmul would;
// - the library skips its CUDA pointer queries (Options::device_pointers_verified);
// - the cuBLASLt handle (the unfused fallback's, the backward's) is created by the library on
//   first use on a device (its scratch is part of the workspace): warm up with one call before
//   capturing a graph (as for any op).
#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "tensor_views.hpp"

namespace gather_linear::torch_binding {
namespace {

// Scratch for the work that needs it (the unfused fallback, the backward's GEMMs), from the
// caching allocator. The tensor is released when the op returns, which is safe: the caching
// allocator reuses a block only for work ordered after this launch on the same stream.
struct ScratchTensor {
  at::TensorOptions options;
  at::Tensor tensor;

  static void* allocate(std::size_t bytes, void* context) {
    auto* self = static_cast<ScratchTensor*>(context);
    self->tensor = at::empty({static_cast<std::int64_t>(bytes)}, self->options);
    return self->tensor.mutable_data_ptr();
  }
};

// The options both ops run under; `scratch` must outlive the call.
Options options_for(ScratchTensor& scratch) {
  Options options;
  // The setting ATen's cuBLAS matmuls read: torch.backends.cuda.matmul.fp32_precision, which
  // torch.backends.cuda.matmul.allow_tf32 and torch.set_float32_matmul_precision also set.
  // (Context::allowTF32CuBLAS() would throw where the legacy and the new API were mixed.)
  const auto precision = at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL);
  if (precision == at::Float32Precision::TF32) options.fp32_precision = Fp32Precision::tf32;
  options.workspace_allocator = {&ScratchTensor::allocate, &scratch};
  // A CUDA at::Tensor's memory is on its device: the runtime's pointer queries would only
  // repeat what the preparation already checked through the tensors' devices.
  options.device_pointers_verified = true;
  return options;
}

at::Tensor forward_cuda(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  // A CPU x reaches this kernel only beside a CUDA weight or bias; validation then reports the
  // device mismatch before anything touches a GPU.
  c10::cuda::OptionalCUDAGuard device_guard;
  if (x.is_cuda()) device_guard.set_device(x.device());
  return translating_errors([&] {
    ForwardArguments args = prepare_forward(x, weight, bias);
    ScratchTensor scratch{args.y.options().dtype(at::kByte), {}};
    gather_linear::forward(args.x_view, args.weight_view, args.bias_view, args.y_view, options_for(scratch),
                           c10::cuda::getCurrentCUDAStream().stream());
    return args.y;
  });
}

std::vector<at::Tensor> backward_cuda(const at::Tensor& grad_y, const std::optional<at::Tensor>& x,
                                      const std::optional<at::Tensor>& weight, c10::SymIntArrayRef x_size,
                                      std::array<bool, 3> output_mask) {
  c10::cuda::OptionalCUDAGuard device_guard;
  if (grad_y.is_cuda()) device_guard.set_device(grad_y.device());
  return translating_errors([&] {
    ScratchTensor scratch{grad_y.options().dtype(at::kByte), {}};
    const Options options = options_for(scratch);
    BackwardArguments args =
        prepare_backward(grad_y, x, weight, C10_AS_INTARRAYREF_SLOW(x_size), output_mask, options);
    gather_linear::backward(args.grad_y_view, args.x_view, args.weight_view, args.gradient_views, options,
                            c10::cuda::getCurrentCUDAStream().stream());
    return std::move(args.gradients);
  });
}

}  // namespace
}  // namespace gather_linear::torch_binding

TORCH_LIBRARY_IMPL(gather_linear, CUDA, m) {
  m.impl("forward", &gather_linear::torch_binding::forward_cuda);
  m.impl("backward", &gather_linear::torch_binding::backward_cuda);
}
