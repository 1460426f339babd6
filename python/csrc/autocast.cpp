// Autocast for gather_linear::forward. Under torch.autocast, nn.Linear (a matmul, on autocast's
// lower-precision list) runs in the autocast dtype; so does this op: x, weight and bias are cast
// (through autocast's cache, as ATen's own kernels do) and the op runs below the autocast key.
// Without this kernel autocast would pass the op mixed dtypes (a bfloat16 activation beside a
// float32 weight), which the library refuses.
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <optional>

#include "tensor_views.hpp"

namespace {

template <c10::DeviceType kDevice, c10::DispatchKey kAutocastKey>
at::Tensor forward_autocast(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  c10::impl::ExcludeDispatchKeyGuard below_autocast(kAutocastKey);
  const at::ScalarType dtype = at::autocast::get_autocast_dtype(kDevice);
  return gather_linear::torch_binding::forward_operator().call(at::autocast::cached_cast(dtype, x, kDevice),
                                                               at::autocast::cached_cast(dtype, weight, kDevice),
                                                               at::autocast::cached_cast(dtype, bias, kDevice));
}

}  // namespace

TORCH_LIBRARY_IMPL(gather_linear, AutocastCPU, m) {
  m.impl("forward", forward_autocast<c10::DeviceType::CPU, c10::DispatchKey::AutocastCPU>);
}
TORCH_LIBRARY_IMPL(gather_linear, AutocastCUDA, m) {
  m.impl("forward", forward_autocast<c10::DeviceType::CUDA, c10::DispatchKey::AutocastCUDA>);
}
