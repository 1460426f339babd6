#include "tensor_views.hpp"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>

namespace gather_linear::torch_binding {
namespace {

// int32/int64/uint8 are passed through so that the library rejects them with its own message
// ("x: unsupported dtype int32; ..." or "weight: expected dtype float32 (the dtype of x), ...").
DType to_dtype(at::ScalarType type, const char* name) {
  switch (type) {
    case at::kFloat: return DType::float32;
    case at::kHalf: return DType::float16;
    case at::kBFloat16: return DType::bfloat16;
    case at::kDouble: return DType::float64;
    case at::kInt: return DType::int32;
    case at::kLong: return DType::int64;
    case at::kByte: return DType::uint8;
    default:
      throw Error(ErrorCode::unsupported, name,
                  std::string("unsupported dtype ") + c10::toString(type) +
                      "; expected float32, float16, bfloat16 or float64");
  }
}

Device to_device(const at::Device& device, const char* name) {
  if (device.is_cpu()) return Device::cpu();
  if (device.is_cuda()) return Device::cuda(device.index());
  throw Error(ErrorCode::unsupported, name, "unsupported device " + device.str() + "; expected cpu or cuda");
}

TensorView view_of(const at::Tensor& t, void* data, const char* name) {
  if (t.dim() > kMaxRank)
    throw Error(ErrorCode::invalid_argument, name,
                "expected rank at most " + std::to_string(kMaxRank) + ", got rank " + std::to_string(t.dim()));
  TensorView view;
  view.data = data;
  view.dtype = to_dtype(t.scalar_type(), name);
  view.device = to_device(t.device(), name);
  view.rank = static_cast<int>(t.dim());
  for (int d = 0; d < view.rank; ++d) {
    view.sizes[static_cast<std::size_t>(d)] = t.size(d);
    view.strides[static_cast<std::size_t>(d)] = t.stride(d);
  }
  return view;
}

// const_data_ptr(), unlike data_ptr(), does not materialise a copy-on-write tensor; the library
// never writes through an input's view.
TensorView input_view(const at::Tensor& t, const char* name) {
  return view_of(t, const_cast<void*>(t.const_data_ptr()), name);
}

// The library needs unit inner stride in weight (any row stride) and a contiguous bias: a
// transposed weight or a strided bias is copied.
bool needs_unit_inner_stride(const at::Tensor& t) {
  return t.dim() >= 1 && t.dim() <= 2 && t.size(-1) > 1 && t.stride(-1) != 1;
}

// The view of `t` as its contiguous copy will be (same data pointer): for validating before the
// copy is made, which only looks at sizes, strides, dtype, device and the pointer's alignment.
TensorView view_as_copied(const at::Tensor& t, const char* name) {
  TensorView view = input_view(t, name);
  std::int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.strides[static_cast<std::size_t>(d)] = stride;
    stride *= std::max<std::int64_t>(view.sizes[static_cast<std::size_t>(d)], 1);
  }
  return view;
}

}  // namespace

ForwardArguments prepare_forward(const at::Tensor& x, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias) {
  ForwardArguments args;
  args.x_view = input_view(x, "x");
  const bool has_bias = bias.has_value() && bias->defined();  // PyTorch may pass an absent bias as undefined
  const bool copy_weight = needs_unit_inner_stride(weight), copy_bias = has_bias && needs_unit_inner_stride(*bias);
  // The inputs are validated before anything is allocated (copies of weight or bias, and y): a
  // wrong call with a huge expanded tensor reports its argument, not an out-of-memory error.
  args.weight_view = copy_weight ? view_as_copied(weight, "weight") : input_view(weight, "weight");
  if (has_bias) args.bias_view = copy_bias ? view_as_copied(*bias, "bias") : input_view(*bias, "bias");
  const auto [B, K] = output_sizes(args.x_view, args.weight_view, args.bias_view);
  // Only now the copies, whose views then point at them.
  args.weight = copy_weight ? weight.contiguous() : weight;
  if (copy_weight) args.weight_view = input_view(args.weight, "weight");
  if (has_bias) args.bias = copy_bias ? bias->contiguous() : *bias;
  if (copy_bias) args.bias_view = input_view(args.bias, "bias");
  args.y = at::empty({B, K}, x.options());
  args.y_view = view_of(args.y, args.y.mutable_data_ptr(), "y");
  return args;
}

const c10::TypedOperatorHandle<ForwardSignature>& forward_operator() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("gather_linear::forward", "").typed<ForwardSignature>();
  return op;
}

void throw_as_torch_error(const Error& error) {
  switch (error.code()) {
    case ErrorCode::invalid_argument: C10_THROW_ERROR(ValueError, error.what());
    case ErrorCode::unsupported: C10_THROW_ERROR(NotImplementedError, error.what());
    case ErrorCode::cuda_error: C10_THROW_ERROR(Error, error.what());
  }
  C10_THROW_ERROR(Error, error.what());
}

}  // namespace gather_linear::torch_binding
