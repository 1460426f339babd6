// Autograd for gather_linear::forward, in C++. A Python formula (torch.library.register_autograd)
// costs tens of microseconds of interpreter time per call with gradients enabled, more than the
// whole forward of a small problem; this kernel costs about as much as an ATen op's autograd.
// Where it measured faster, the backward is the library's, through the gather_linear::backward
// op: one call for all the requested gradients (on the GPU each one cuBLASLt GEMM, with a copy of
// x or of dX where that measured faster; docs/PERFORMANCE.md). That is on the GPU always, and on
// the CPU by dtype and processor (cpu_backward_pays below) and for small problems
// (cpu_problem_is_small). Elsewhere it composes ATen ops:
//   dX[r, b, h] = sum_k dY[b, k] W[k, r*H + h]      dW = dY^T cat(x)      db = sum_b dY[b, :]
// and so does a double backward (create_graph=True: grad mode on inside the backward), which
// must differentiate the backward itself, as the op cannot.
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/FuncTorchTLS.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/dynamo/compiled_autograd.h>
#include <torch/library.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gather_linear/gather_linear.hpp"
#include "tensor_views.hpp"

namespace {

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

// A tensor subclass may refuse the reshapes between x's slices and the concatenation's columns:
// DTensor does where the slices are sharded unevenly over the ranks (R not a multiple of them, a
// rank holding part of a slice), and then the slices are split and joined instead, which it
// redistributes. Plain tensors never take the fallback.
template <class Reshape, class Fallback>
at::Tensor reshaped(const at::Tensor& t, Reshape&& reshape, Fallback&& fallback) {
  try {
    return reshape();
  } catch (const std::exception&) {
    if (!t.key_set().has(c10::DispatchKey::Python)) throw;
    return fallback();
  }
}

// The composed formulas, differentiable. dX as one GEMM, dY W (B, R*H), returned as its
// (R, B, H) view laid out (B, R, H) like the op's; dW on the concatenation (a view of a
// head-major x, a copy otherwise).
variable_list composed_gradients(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& weight,
                                 const c10::SymInt& R, const c10::SymInt& B, const c10::SymInt& H,
                                 std::array<bool, 3> wanted) {
  variable_list gradients(3);
  if (wanted[0]) {
    const at::Tensor product = grad_y.matmul(weight);
    gradients[0] = reshaped(
        product, [&] { return product.view_symint({B, R, H}).transpose(0, 1); },
        [&] { return at::stack(product.split_symint(H, 1)); });
  }
  if (wanted[1]) {
    const at::Tensor concatenated = reshaped(
        x, [&] { return x.transpose(0, 1).reshape_symint({B, R * H}); },
        [&] { return at::cat(x.split(1, 0), 2).squeeze(0); });
    gradients[1] = grad_y.t().matmul(concatenated);
  }
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
// (all three gradients, 2-core VMs; docs/performance/cpu.md, "The CPU backward by processor"):
// - bfloat16 where the library runs it on AMX tiles: 0.67-1.00x ATen's time (oneDNN on the same
//   tiles; backward_variants_op_cpu_amx_run5.csv, _run6.csv). On Intel's processors with
//   AVX512-BF16 but no AMX, whose cores issue VDPBF16PS at a quarter of their FMA rate (the
//   library's larger GEMMs there run on float32 FMAs): 0.51-0.69x (an Emerald Rapids VM,
//   backward_variants_op_cpu_emr.csv). On AVX512-BF16 dot products without AMX on AMD's (Zen 4)
//   it took 1.03-1.13x (backward_variants_op_cpu_zen4_run2.csv). Without AVX-512 (the engine at
//   AVX2, ATen's bfloat16 GEMMs with no dot-product instructions): 0.015x on a Zen 3
//   (backward_variants_cpu_zen3_partial.csv), 0.019-0.036x on a family-23 EPYC
//   (backward_variants_op_cpu_bf16_epyc_f23.csv).
// - float16 where the processor lacks AVX512-FP16: ATen's float16 GEMMs then took 41-96x the op's
//   time (Zen 4, backward_variants_op_cpu_zen4_run1.csv). With it (Intel Sapphire Rapids) the op
//   took 1.05-1.33x (backward_variants_op_cpu_amx_run9.csv, _run10.csv).
// - float32 on AMD's processors, where ATen's GEMM is MKL's off its Intel paths: 0.65-0.95x with
//   AVX-512 (Zen 4, _zen4_run1.csv); with the engine at AVX2, summed over eight cases 0.91x on a
//   Zen 3 (two cases 1.11-1.15x; backward_variants_cpu_zen3_partial.csv) and 0.93x and 0.87x in two
//   runs on a family-23 EPYC (one case 1.06x; backward_variants_op_cpu_epyc_f23_run{1,2}.csv). On
//   Intel's 0.98-1.22x (backward_variants_op_cpu_amx_run7.csv, _run8.csv).
// - float64 on AMD's processors likewise: on the family-23 EPYC 0.91x and 0.95x summed over eight
//   cases in two runs, (26, 512, 64, 1024) at 1.01-1.06x (backward_variants_op_cpu_f64_epyc_f23_run{1,2}.csv).
//   Intel's, whose ATen GEMM is MKL's own DGEMM, were not measured.
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
      return cpu_bfloat16_backward_on_amx() || !__builtin_cpu_supports("avx512f") ||
             (__builtin_cpu_is("intel") && __builtin_cpu_supports("avx512bf16"));
    case at::kHalf: {
      static const bool has_fp16 = has_avx512_fp16();
      return !has_fp16;
    }
    case at::kFloat:
    case at::kDouble: return __builtin_cpu_is("amd");
    default: return false;
  }
#else
  return dtype == at::kBFloat16 && cpu_bfloat16_backward_on_amx();
#endif
}

// Whether a CPU problem is small enough that dispatching ATen's four ops (two GEMMs, the copy
// that concatenates x, the bias sum) costs more than the arithmetic, so that one call of the
// library's backward wins whatever the dtype rule above says. Up to these sizes, in multiply-adds
// R*B*H*K, it took (all three gradients, backward_variants_small_cpu_emr.csv, one 2-core Emerald
// Rapids VM): float32 0.67-0.79x ATen's time up to 2^18 (1.08-1.19x at 2^19); float64 0.65-0.86x
// up to 2^17 (0.80-1.07x at 2^18); 16-bit up to 2^22, float16 0.19-0.83x and bfloat16
// 0.20-0.77x. Sizes that are symbolic (a torch.compile trace) keep the dtype rule, so the compiled
// graph does not guard on them.
bool cpu_problem_is_small(at::ScalarType dtype, const c10::SymInt& R, const c10::SymInt& B, const c10::SymInt& H,
                          const c10::SymInt& K) {
  const auto r = R.maybe_as_int(), b = B.maybe_as_int(), h = H.maybe_as_int(), k = K.maybe_as_int();
  if (!r || !b || !h || !k) return false;
  const int log2_limit = dtype == at::kFloat ? 18 : dtype == at::kDouble ? 17 : 22;
  const double multiply_adds = static_cast<double>(*r) * static_cast<double>(*b) * static_cast<double>(*h) *
                               static_cast<double>(*k);  // double: no overflow for any sizes
  return multiply_adds <= static_cast<double>(std::int64_t{1} << log2_limit);
}

bool library_backward_pays(const at::Tensor& grad_y, const c10::SymInt& R, const c10::SymInt& B,
                           const c10::SymInt& H) {
  if (grad_y.is_cuda()) return true;
  return grad_y.is_cpu() && (cpu_backward_pays(grad_y.scalar_type()) ||
                             cpu_problem_is_small(grad_y.scalar_type(), R, B, H, grad_y.sym_size(1)));
}

at::Tensor forward_below_autograd(const at::Tensor& x, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& bias) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return gather_linear::torch_binding::forward_operator().call(x, weight, bias);
}

// The gradients of one forward: the library's backward op where it pays, the composed formulas
// otherwise and under create_graph (grad mode on inside the backward), which must differentiate
// the backward itself, as the op cannot. No gradient reaching y means none for the inputs.
variable_list gradients_of(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& weight,
                           const c10::SymInt& R, const c10::SymInt& B, const c10::SymInt& H,
                           std::array<bool, 3> wanted) {
  if (!grad_y.defined()) return variable_list(3);
  if (at::GradMode::is_enabled() || !library_backward_pays(grad_y, R, B, H))
    return composed_gradients(grad_y, x, weight, R, B, H, wanted);
  const std::vector<at::Tensor> computed =
      backward_operator().call(grad_y, if_defined(x), if_defined(weight), {R, B, H}, wanted);
  variable_list gradients(3);
  auto next = computed.begin();
  for (std::size_t i = 0; i < 3; ++i)
    if (wanted[i]) gradients[i] = *next++;
  return gradients;
}

// gradients_of as compiled autograd calls it: y's gradient, then the arguments
// GatherLinearBackward::apply_with_saved packs.
variable_list gradients_from_packed(const variable_list& grads, const std::vector<c10::IValue>& arguments) {
  torch::dynamo::autograd::PackedArgs packed(arguments);
  const auto x = packed.unpack<at::Tensor>();
  const auto weight = packed.unpack<at::Tensor>();
  const auto R = packed.unpack<c10::SymInt>(), B = packed.unpack<c10::SymInt>(), H = packed.unpack<c10::SymInt>();
  return gradients_of(grads[0], x, weight, R, B, H, packed.unpack<std::array<bool, 3>>());
}

// The graph node of one forward, written as ATen's generated nodes are rather than as a
// torch::autograd::Function: that one's context (saved-data map, per-input metadata, output
// wrapping) cost 3.5-4.0 us per call on the seed problem against this node's 1.5-1.7 (H200 host,
// docs/PERFORMANCE.md), more than the forward's kernel takes. Its edges are x's, weight's and
// bias's (an absent bias an invalid edge, whose gradient is never wanted).
class GatherLinearBackward final : public torch::autograd::Node {
 public:
  // dX reads only W and dW only x: keep just what the requested gradients need. Symbolic sizes
  // under torch.compile: reading them as integers would specialise the graph to this call's shape.
  GatherLinearBackward(const at::Tensor& x, const at::Tensor& weight)
      : R_(x.sym_size(0)), B_(x.sym_size(1)), H_(x.sym_size(2)) {
    if (weight.requires_grad()) x_ = torch::autograd::SavedVariable(x, /*is_output=*/false);
    if (x.requires_grad()) weight_ = torch::autograd::SavedVariable(weight, /*is_output=*/false);
  }

  std::string name() const override { return "GatherLinearBackward"; }

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return gradients_of(grads[0], x_.unpack(), weight_.unpack(), R_, B_, H_, wanted());
  }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    x_.reset_data();
    weight_.reset_data();
  }

  // Compiled autograd (torch._dynamo.compiled_autograd) keys its cache on what compiled_args
  // collects and runs gradients_from_packed on the lifted values, opaque to its trace, as it does
  // a torch::autograd::Function's backward.
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override {
    args.collect(name());
    args.collect(x_, /*is_output=*/false);
    args.collect(weight_, /*is_output=*/false);
    args.collect(R_);
    args.collect(B_);
    args.collect(H_);
  }

  variable_list apply_with_saved(const variable_list& grads,
                                 torch::dynamo::autograd::SwapSavedVariables& saved) override {
    namespace ca = torch::dynamo::autograd;
    saved.before(x_);
    saved.before(weight_);
    saved.before(R_);
    saved.before(B_);
    saved.before(H_);
    ca::PackedArgs packed;
    packed.pack(x_.unpack());
    packed.pack(weight_.unpack());
    packed.pack(R_);
    packed.pack(B_);
    packed.pack(H_);
    packed.pack(wanted());
    const std::vector<c10::IValue> arguments = std::move(packed).vec();
    std::vector<at::TypePtr> schema;
    for (const c10::IValue& argument : arguments)
      schema.push_back(argument.isTensor() ? at::TensorType::get() : argument.type());
    const auto& compiler = ca::getPyCompilerInterface();
    const std::string function = compiler->bind_function(saved.get_py_compiler(), name(), gradients_from_packed,
                                                         schema, /*is_custom_function=*/true,
                                                         /*is_traceable=*/false);
    const auto output_metadata =
        ca::IValuePacker<std::vector<std::optional<torch::autograd::InputMetadata>>>::pack(
            ca::get_input_metadata(next_edges()));
    variable_list gradients = compiler->call_function(saved.get_py_compiler(), "apply_functional", function, grads,
                                                      arguments, output_metadata);
    saved.after(x_);
    saved.after(weight_);
    saved.after(R_);
    saved.after(B_);
    saved.after(H_);
    return gradients;
  }

 private:
  // The gradients this backward pass needs (torch.autograd.grad may ask for fewer than require them).
  std::array<bool, 3> wanted() const {
    return {task_should_compute_output(0), task_should_compute_output(1), task_should_compute_output(2)};
  }

  torch::autograd::SavedVariable x_, weight_;
  c10::SymInt R_, B_, H_;
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
  // torch.func's transforms (grad, vjp, jacrev, vmap of a function that takes gradients) compose
  // the formulas of a Python autograd.Function (python/gather_linear/ops.py: backward, jvp, and the
  // vmap rule derived from them; the backward op has no batching rule). gather_linear.forward and
  // the modules catch this error and run that Function; a direct call of the op gets the message.
  // (vmap without gradients needs no autograd: ops.py registers its batching rule.)
  if (const auto& functorch = at::functorch::functorchTLSAccessor()) {
    try {
      functorch->checkSupportsCppAutogradFunction();  // throws while a transform is active
    } catch (const c10::Error&) {
      C10_THROW_ERROR(NotImplementedError,
                      "gather_linear.forward: under torch.func transforms that take gradients (grad, vjp, "
                      "jacrev) call gather_linear.forward or the modules, not torch.ops.gather_linear.forward");
    }
  }
  at::Tensor y = forward_below_autograd(x, weight, bias);
  const std::shared_ptr<GatherLinearBackward> node(new GatherLinearBackward(x, weight), torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(x, weight, bias));
  torch::autograd::set_history(y, node);
  return y;
}

}  // namespace

TORCH_LIBRARY_IMPL(gather_linear, Autograd, m) { m.impl("forward", forward_autograd); }
