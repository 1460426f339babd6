// The CUDA kernel of gather_linear::forward. Everything PyTorch's own CUDA ops do is done here the
// same way, so the op composes with streams, the caching allocator and CUDA graphs:
// - x's device is made current (CUDAGuard) and the library launches on PyTorch's current stream;
// - y, and the workspace if the chosen kernel needs one, come from at::empty (the caching
//   allocator; the workspace through Options::workspace_allocator, so that finding its size
//   does not validate the arguments a third time: output_sizes() checked the inputs before y
//   was allocated, forward() checks everything);
// - float32 uses TF32 exactly when nn.Linear's cuBLAS matmul would;
// - the library skips its CUDA pointer queries (Options::device_pointers_verified);
// - the unfused fallback's cuBLASLt handle is created by the library on first use on a device
//   (its scratch is part of the workspace): warm up with one forward before capturing a graph
//   (as for any op).
#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "tensor_views.hpp"

namespace gather_linear::torch_binding {
namespace {

// Scratch for the kernels that need it (the unfused fallback), from the caching allocator. The
// tensor is released when the forward returns, which is safe: the caching allocator reuses a
// block only for work ordered after this launch on the same stream.
struct ScratchTensor {
  at::TensorOptions options;
  at::Tensor tensor;

  static void* allocate(std::size_t bytes, void* context) {
    auto* self = static_cast<ScratchTensor*>(context);
    self->tensor = at::empty({static_cast<std::int64_t>(bytes)}, self->options);
    return self->tensor.mutable_data_ptr();
  }
};

at::Tensor forward_cuda(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  // A CPU x reaches this kernel only beside a CUDA weight or bias; validation then reports the
  // device mismatch before anything touches a GPU.
  c10::cuda::OptionalCUDAGuard device_guard;
  if (x.is_cuda()) device_guard.set_device(x.device());
  return translating_errors([&] {
    ForwardArguments args = prepare_forward(x, weight, bias);
    Options options;
    // The setting ATen's cuBLAS matmuls read: torch.backends.cuda.matmul.fp32_precision, which
    // torch.backends.cuda.matmul.allow_tf32 and torch.set_float32_matmul_precision also set.
    // (Context::allowTF32CuBLAS() would throw where the legacy and the new API were mixed.)
    const auto precision = at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL);
    if (precision == at::Float32Precision::TF32) options.fp32_precision = Fp32Precision::tf32;
    ScratchTensor scratch{args.y.options().dtype(at::kByte), {}};
    options.workspace_allocator = {&ScratchTensor::allocate, &scratch};
    // A CUDA at::Tensor's memory is on its device: the runtime's pointer queries would only
    // repeat what prepare_forward() already checked through the tensors' devices.
    options.device_pointers_verified = true;
    gather_linear::forward(args.x_view, args.weight_view, args.bias_view, args.y_view, options,
                           c10::cuda::getCurrentCUDAStream().stream());
    return args.y;
  });
}

}  // namespace
}  // namespace gather_linear::torch_binding

TORCH_LIBRARY_IMPL(gather_linear, CUDA, m) { m.impl("forward", &gather_linear::torch_binding::forward_cuda); }
