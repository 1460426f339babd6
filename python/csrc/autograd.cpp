// Autograd for gather_linear::forward, in C++. A Python formula (torch.library.register_autograd)
// costs tens of microseconds of interpreter time per call with gradients enabled, more than the
// whole forward of a small problem; this kernel costs about as much as an ATen op's autograd.
// Where it measured faster, the backward is the library's, through the gather_linear::backward
// op: one call for all the requested gradients (on the GPU each one cuBLASLt GEMM, with a copy of
// x or of dX where that measured faster; docs/PERFORMANCE.md). That is on the GPU always, and on
// the CPU by dtype and processor (cpu_backward_pays below). Elsewhere it composes ATen ops:
//   dX[r, b, h] = sum_k dY[b, k] W[k, r*H + h]      dW = dY^T cat(x)      db = sum_b dY[b, :]
// and so does a double backward (create_graph=True: grad mode on inside the backward), which
// must differentiate the backward itself, as the op cannot.
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/FuncTorchTLS.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "gather_linear/gather_linear.hpp"
#include "tensor_views.hpp"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using BackwardSignature = std::vector<at::Tensor>(const at::Tensor&, const std::optional<at::Tensor>&,
                                                  const std::optional<at::Tensor>&, c10::SymIntArrayRef,
                                                  std::array<bool, 3>);

const c10::TypedOperatorHandle<BackwardSignature>& backward_operator() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("gather_linear::backward", "").typed<BackwardSignature>();
  return op;
}

std::optional<at::Tensor> if_defined(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// The composed formulas, differentiable. dX as one GEMM, dY W (B, R*H), returned as its
// (R, B, H) view laid out (B, R, H) like the op's; dW on the concatenation (a view of a
// head-major x, a copy otherwise).
variable_list composed_gradients(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& weight,
                                 const c10::SymInt& R, const c10::SymInt& B, const c10::SymInt& H,
                                 std::array<bool, 3> wanted) {
  variable_list gradients(3);
  if (wanted[0]) gradients[0] = grad_y.matmul(weight).view_symint({B, R, H}).transpose(0, 1);
  if (wanted[1]) gradients[1] = grad_y.t().matmul(x.transpose(0, 1).reshape_symint({B, R * H}));
  if (wanted[2]) gradients[2] = grad_y.sum(0);
  return gradients;
}

// Whether the library's CPU backward in bfloat16 runs on AMX tiles: where the forward's
// dispatcher picks its AMX kernel (asked once, of a 1 x 64 x 1 problem: up to 4 rows go to the
// AVX512-BF16 dot kernel even where AMX is there).
bool cpu_bfloat16_backward_on_amx() {
  static const bool on_amx = [] {
    constexpr std::int64_t kRows = 64;
    static std::uint16_t x[kRows], weight[1], y[kRows];  // distinct: validation refuses an output over an input
    namespace gl = gather_linear;
    const auto view = [](const std::uint16_t* data, std::initializer_list<std::int64_t> sizes) {
      return gl::TensorView::contiguous(data, gl::DType::bfloat16, gl::Device::cpu(), sizes);
    };
    return gl::select_kernel(view(x, {1, kRows, 1}), view(weight, {1, 1}), std::nullopt, view(y, {kRows, 1})) ==
           "cpu_amx_bf16";
  }();
  return on_amx;
}

// Whether the library's CPU backward beats ATen's composition in this dtype on this processor
// (all three gradients, 2-core VMs; docs/PERFORMANCE.md, "The CPU backward by processor"):
// - bfloat16 where the library runs it on AMX tiles: 0.67-1.00x ATen's time (oneDNN on the same
//   tiles; backward_variants_op_cpu_amx_run5.csv, _run6.csv). On Intel's processors with
//   AVX512-BF16 but no AMX, whose cores issue VDPBF16PS at a quarter of their FMA rate (the
//   library's larger GEMMs there run on float32 FMAs): 0.51-0.69x (an Emerald Rapids VM,
//   backward_variants_op_cpu_emr.csv). On AVX512-BF16 dot products without AMX on AMD's (Zen 4)
//   it took 1.03-1.13x (backward_variants_op_cpu_zen4_run2.csv).
// - float16 where the processor lacks AVX512-FP16: ATen's float16 GEMMs then took 41-96x the op's
//   time (Zen 4, backward_variants_op_cpu_zen4_run1.csv). With it (Intel Sapphire Rapids) the op
//   took 1.05-1.33x (backward_variants_op_cpu_amx_run9.csv, _run10.csv).
// - float32 on AMD's processors with AVX-512, where ATen's GEMM is MKL's off its Intel paths:
//   0.65-0.95x (Zen 4, _zen4_run1.csv). On Intel's 0.98-1.22x (backward_variants_op_cpu_amx_run7.csv,
//   _run8.csv). AMD's without AVX-512 (the engine at AVX2) were not measured.
bool cpu_backward_pays(at::ScalarType dtype) {
#if defined(__x86_64__) && defined(__GNUC__)
  // AVX512-FP16 is CPUID leaf 7's EDX bit 23, read directly: not every compiler's
  // __builtin_cpu_supports knows it.
  const auto has_avx512_fp16 = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 &&
           ((edx >> 23) & 1u) != 0;
  };
  switch (dtype) {
    case at::kBFloat16:
      return cpu_bfloat16_backward_on_amx() ||
             (__builtin_cpu_is("intel") && __builtin_cpu_supports("avx512bf16"));
    case at::kHalf: {
      static const bool has_fp16 = has_avx512_fp16();
      return !has_fp16;
    }
    case at::kFloat: return __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512f");
    default: return false;
  }
#else
  return dtype == at::kBFloat16 && cpu_bfloat16_backward_on_amx();
#endif
}

bool library_backward_pays(const at::Tensor& grad_y) {
  return grad_y.is_cuda() || (grad_y.is_cpu() && cpu_backward_pays(grad_y.scalar_type()));
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
    const std::array<bool, 3> wanted = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                        ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)};
    if (at::GradMode::is_enabled() || !library_backward_pays(grad_y))
      return composed_gradients(grad_y, x, weight, R, B, H, wanted);
    const std::vector<at::Tensor> computed =
        backward_operator().call(grad_y, if_defined(x), if_defined(weight), {R, B, H}, wanted);
    variable_list gradients(3);
    auto next = computed.begin();
    for (std::size_t i = 0; i < 3; ++i)
      if (wanted[i]) gradients[i] = *next++;
    return gradients;
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
