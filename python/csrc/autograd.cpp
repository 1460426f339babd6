// Autograd for gather_linear::forward, in C++. A Python formula (torch.library.register_autograd)
// costs tens of microseconds of interpreter time per call with gradients enabled, more than the
// whole forward of a small problem; this kernel costs about as much as an ATen op's autograd.
// The backward is composed of ATen operations (GEMMs and a sum) until fused backward kernels exist:
//   dX[r, b, h] = sum_k dY[b, k] W[k, r*H + h]      dW = dY^T cat(x)      db = sum_b dY[b, :]
#include <ATen/core/grad_mode.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>

#include "tensor_views.hpp"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor forward_below_autograd(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return gather_linear::torch_binding::forward_operator().call(x, weight, bias);
}

class GatherLinearFunction : public torch::autograd::Function<GatherLinearFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias) {
    at::Tensor y = forward_below_autograd(x, weight, bias);
    // dX reads only W and dW only x: keep just what the requested gradients need.
    ctx->save_for_backward({weight.requires_grad() ? x : at::Tensor(), x.requires_grad() ? weight : at::Tensor()});
    // Symbolic sizes under torch.compile: reading them as integers would specialise the compiled
    // graph to this call's shape.
    ctx->saved_data["R"] = x.sym_size(0);
    ctx->saved_data["B"] = x.sym_size(1);
    ctx->saved_data["H"] = x.sym_size(2);
    ctx->saved_data["has_bias"] = bias.has_value();  // an absent bias is no autograd input at all
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& grad_y = grad_outputs[0];
    const c10::SymInt R = ctx->saved_data["R"].toSymInt(), B = ctx->saved_data["B"].toSymInt(),
                      H = ctx->saved_data["H"].toSymInt();
    at::Tensor grad_x, grad_weight, grad_bias;
    // One GEMM gives dX as (B, R*H) = (B, R, H); its (R, B, H) view is the gradient, no copy.
    if (ctx->needs_input_grad(0)) grad_x = grad_y.matmul(weight).view_symint({B, R, H}).transpose(0, 1);
    // The concatenation dW needs is x read as (B, R*H).
    if (ctx->needs_input_grad(1)) grad_weight = grad_y.t().matmul(x.transpose(0, 1).reshape_symint({B, R * H}));
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) grad_bias = grad_y.sum(0);
    return {grad_x, grad_weight, grad_bias};
  }
};

at::Tensor forward_autograd(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias_in) {
  // PyTorch may pass an undefined tensor for an absent optional one.
  const std::optional<at::Tensor> bias = bias_in.has_value() && bias_in->defined() ? bias_in : std::nullopt;
  // Forward-mode AD (dual tensors, torch.func.jvp) has no formula here: say so rather than
  // return a result without its tangent.
  for (const at::Tensor* t : {&x, &weight, bias ? &*bias : nullptr})
    if (t != nullptr && t->_fw_grad(/*level=*/0).defined())
      C10_THROW_ERROR(NotImplementedError,
                      "gather_linear.forward: forward-mode AD (dual tensors, jvp) is not supported");
  // Nothing to record (torch.no_grad(), or no input that requires grad): skip the graph node and
  // its saved state, as ATen's own ops do; on the seed problem they cost a noticeable share of
  // the call.
  const bool records = at::GradMode::is_enabled() &&
                       (x.requires_grad() || weight.requires_grad() || (bias.has_value() && bias->requires_grad()));
  if (!records) return forward_below_autograd(x, weight, bias);
  return GatherLinearFunction::apply(x, weight, bias);
}

}  // namespace

TORCH_LIBRARY_IMPL(gather_linear, Autograd, m) { m.impl("forward", forward_autograd); }
