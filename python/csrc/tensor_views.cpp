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

// Row-major strides for the view's sizes.
void make_contiguous(TensorView& view) {
  std::int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.strides[static_cast<std::size_t>(d)] = stride;
    stride *= std::max<std::int64_t>(view.sizes[static_cast<std::size_t>(d)], 1);
  }
}

// The view of `t` as its contiguous copy will be (same data pointer): for validating before the
// copy is made, which only looks at sizes, strides, dtype, device and the pointer's alignment.
TensorView view_as_copied(const at::Tensor& t, const char* name) {
  TensorView view = input_view(t, name);
  make_contiguous(view);
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

BackwardArguments prepare_backward(const at::Tensor& grad_y, const std::optional<at::Tensor>& x,
                                   const std::optional<at::Tensor>& weight, at::IntArrayRef x_size,
                                   std::array<bool, 3> output_mask, const Options& options) {
  TORCH_CHECK_VALUE(x_size.size() == 3, "x_size: expected (R, B, H), got ", x_size.size(), " sizes");
  const std::int64_t R = x_size[0], B = x_size[1], H = x_size[2];
  const bool has_x = x.has_value() && x->defined(), has_weight = weight.has_value() && weight->defined();
  TORCH_CHECK_VALUE(has_x || !output_mask[1], "x: needed for the gradient of weight (output_mask[1]), got None");
  TORCH_CHECK_VALUE(has_weight || !output_mask[0], "weight: needed for the gradient of x (output_mask[0]), got None");
  BackwardArguments args;
  // grad_y as autograd hands it over may be expanded (the gradient of a sum) or transposed: the
  // library takes rows with unit inner stride that do not overlap.
  const bool grad_y_usable = grad_y.dim() != 2 || ((grad_y.size(1) <= 1 || grad_y.stride(1) == 1) &&
                                                   (grad_y.size(0) <= 1 || grad_y.stride(0) >= grad_y.size(1)));
  args.grad_y = grad_y_usable ? grad_y : grad_y.contiguous();
  args.grad_y_view = input_view(args.grad_y, "grad_y");
  // An absent input is described by its shape alone, with grad_y's dtype and device.
  const auto shape_only = [&](at::IntArrayRef sizes, const char* name) {
    TensorView view;  // data stays null
    view.dtype = to_dtype(args.grad_y.scalar_type(), name);
    view.device = to_device(args.grad_y.device(), name);
    view.rank = static_cast<int>(sizes.size());
    std::copy(sizes.begin(), sizes.end(), view.sizes.begin());
    make_contiguous(view);
    return view;
  };
  const std::int64_t K = args.grad_y.dim() == 2 ? args.grad_y.size(1) : 0;
  if (has_x) {
    args.x = *x;
    args.x_view = input_view(args.x, "x");
  } else {
    args.x_view = shape_only(x_size, "x");
  }
  if (has_weight) {
    args.weight = needs_unit_inner_stride(*weight) ? weight->contiguous() : *weight;
    args.weight_view = input_view(args.weight, "weight");
  } else {
    args.weight_view = shape_only({K, R * H}, "weight");
  }
  // Every argument checked (the inputs only: no gradient is requested) before anything is
  // allocated; backward() then checks the gradients as well.
  backward_workspace_bytes(args.grad_y_view, args.x_view, args.weight_view, Gradients{}, options);
  const at::TensorOptions like_grad_y = args.grad_y.options();
  if (output_mask[0]) {
    at::Tensor grad_x = at::empty({B, R, H}, like_grad_y).transpose(0, 1);
    args.gradient_views.x = view_of(grad_x, grad_x.mutable_data_ptr(), "gradients.x");
    args.gradients.push_back(std::move(grad_x));
  }
  if (output_mask[1]) {
    at::Tensor grad_weight = at::empty({K, R * H}, like_grad_y);
    args.gradient_views.weight = view_of(grad_weight, grad_weight.mutable_data_ptr(), "gradients.weight");
    args.gradients.push_back(std::move(grad_weight));
  }
  if (output_mask[2]) {
    at::Tensor grad_bias = at::empty({K}, like_grad_y);
    args.gradient_views.bias = view_of(grad_bias, grad_bias.mutable_data_ptr(), "gradients.bias");
    args.gradients.push_back(std::move(grad_bias));
  }
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
