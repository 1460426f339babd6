// Autograd for gather_linear::forward, in C++. A Python formula (torch.library.register_autograd)
// costs tens of microseconds of interpreter time per call with gradients enabled, more than the
// whole forward of a small problem; this kernel costs about as much as an ATen op's autograd.
// The backward is composed of ATen operations (GEMMs and a sum) until fused backward kernels exist:
//   dX[r, b, h] = sum_k dY[b, k] W[k, r*H + h]      dW = dY^T cat(x)      db = sum_b dY[b, :]
// The choices between ways of composing them were measured on an H200 (bench/backward_variants.py,
// docs/PERFORMANCE.md "Backward").
#include <ATen/core/grad_mode.h>
#include <ATen/FuncTorchTLS.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>

#include "tensor_views.hpp"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// dX as one GEMM, dY W (B, R*H), returned as its (R, B, H) view: laid out (B, R, H), whatever x's
// layout. Writing it in x's (R, B, H) order for a contiguous x cost 1.08-1.71x (a copy after the
// GEMM) or 0.99-2.15x (R batched GEMMs), so a consumer that needs that order pays for it itself.
at::Tensor input_gradient(const at::Tensor& grad_y, const at::Tensor& weight, const c10::SymInt& R,
                          const c10::SymInt& B, const c10::SymInt& H) {
  return grad_y.matmul(weight).view_symint({B, R, H}).transpose(0, 1);
}

// dW = dY^T cat(x). The concatenation is a view of x when x is laid out (B, R, H) (head-major),
// and a copy of x otherwise. On the GPU R GEMMs in one batched call, dW[:, r*H:(r+1)*H] = dY^T x[r]
// written straight into dW's columns, avoid that copy and took 0.55-0.95x its time (1.01x on one
// shape), except with narrow slices and a long output (H < 128 and K > 2048: 1.17-1.86x). On the
// CPU (2-core VM) the copy won.
// Writing into dW's columns is an out= call on a view, which neither differentiates (a double
// backward runs with grad mode on) nor survives functionalization (torch.compile traces tensor
// subclasses): those keep the concatenation.
at::Tensor weight_gradient(const at::Tensor& grad_y, const at::Tensor& x, const c10::SymInt& R, const c10::SymInt& B,
                           const c10::SymInt& H) {
  const c10::SymInt K = grad_y.sym_size(1);
  const bool concatenation_is_a_view = x.transpose(0, 1).is_contiguous_or_false();
  const bool traced_or_differentiated =
      at::GradMode::is_enabled() ||
      x.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::Functionalize}));
  if (concatenation_is_a_view || !x.is_cuda() || traced_or_differentiated || (H < 128 && K > 2048))
    return grad_y.t().matmul(x.transpose(0, 1).reshape_symint({B, R * H}));
  at::Tensor grad_weight = at::empty_symint({K, R * H}, grad_y.options());
  at::Tensor slices = grad_weight.view_symint({K, R, H}).transpose(0, 1);
  at::bmm_out(slices, grad_y.t().expand_symint({R, K, B}), x);
  return grad_weight;
}

at::Tensor forward_below_autograd(const at::Tensor& x, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& bias) {
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
    if (ctx->needs_input_grad(0)) grad_x = input_gradient(grad_y, weight, R, B, H);
    if (ctx->needs_input_grad(1)) grad_weight = weight_gradient(grad_y, x, R, B, H);
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) grad_bias = grad_y.sum(0);
    return {grad_x, grad_weight, grad_bias};
  }
};

at::Tensor forward_autograd(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias_in) {
  // PyTorch may pass an undefined tensor for an absent optional one.
  const std::optional<at::Tensor> bias = bias_in.has_value() && bias_in->defined() ? bias_in : std::nullopt;
  // Forward-mode AD (dual tensors) has no formula here: say so rather than return a result without
  // its tangent. gather_linear.forward and the modules catch this error and run a Python
  // autograd.Function that has one (python/gather_linear/ops.py).
  for (const at::Tensor* t : {&x, &weight, bias ? &*bias : nullptr})
    if (t != nullptr && t->_fw_grad(/*level=*/0).defined())
      C10_THROW_ERROR(NotImplementedError,
                      "gather_linear.forward: for forward-mode AD (dual tensors) call gather_linear.forward or the "
                      "modules, not torch.ops.gather_linear.forward");
  // Nothing to record (torch.no_grad(), or no input that requires grad): skip the graph node and
  // its saved state, as ATen's own ops do; on the seed problem they cost a noticeable share of
  // the call.
  const bool records = at::GradMode::is_enabled() &&
                       (x.requires_grad() || weight.requires_grad() || (bias.has_value() && bias->requires_grad()));
  if (!records) return forward_below_autograd(x, weight, bias);
  // torch.func's transforms (grad, vjp, jacrev, vmap of a function that takes gradients) cannot run
  // a C++ torch::autograd::Function. gather_linear.forward and the modules catch this error and run
  // a Python autograd.Function instead (python/gather_linear/ops.py); a direct call of the op gets
  // the message. (vmap without gradients needs no autograd: ops.py registers its batching rule.)
  if (const auto& functorch = at::functorch::functorchTLSAccessor()) {
    try {
      functorch->checkSupportsCppAutogradFunction();  // throws while a transform is active
    } catch (const c10::Error&) {
      C10_THROW_ERROR(NotImplementedError,
                      "gather_linear.forward: under torch.func transforms that take gradients (grad, vjp, "
                      "jacrev) call gather_linear.forward or the modules, not torch.ops.gather_linear.forward");
    }
  }
  return GatherLinearFunction::apply(x, weight, bias);
}

}  // namespace

TORCH_LIBRARY_IMPL(gather_linear, Autograd, m) { m.impl("forward", forward_autograd); }
