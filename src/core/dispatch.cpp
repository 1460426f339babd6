// forward(): validate, pick a kernel (or take the forced one), find its workspace, run it.
// backward(): validate, find its workspace, hand it to the backend.
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "core/kernel_registry.hpp"
#include "core/validate.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear {
namespace {

std::span<const KernelEntry> kernels_for(DeviceType device) {
  return device == DeviceType::cpu ? cpu::kernels() : cuda::kernels();
}

const KernelEntry* find_kernel(std::string_view name) {
  for (auto device : {DeviceType::cpu, DeviceType::cuda})
    for (const auto& k : kernels_for(device))
      if (k.info.name == name) return &k;
  return nullptr;
}

[[noreturn]] void fail_kernel(ErrorCode code, const std::string& message) {
  throw Error(code, "options.kernel", message);
}

struct Resolved {
  Problem problem;
  const KernelEntry* kernel;
};

Resolved resolve(const TensorView& x, const TensorView& weight, const std::optional<TensorView>& bias,
                 const TensorView& y, const Options& options) {
  Problem p = validate_forward_args(x, weight, bias, y);
  if (p.device.type == DeviceType::cuda) {
    if (options.device_pointers_verified)
      cuda::check_device(p);
    else
      cuda::check_device_arguments(p);
  }
  if (options.kernel.empty() || options.kernel == "auto") {
    const KernelEntry& chosen =
        p.device.type == DeviceType::cpu ? cpu::choose_kernel(p, options) : cuda::choose_kernel(p, options);
    return {p, &chosen};
  }
  const KernelEntry* kernel = find_kernel(options.kernel);
  if (kernel == nullptr) {
    std::string names;
    for (const auto& info : available_kernels()) names += (names.empty() ? "" : ", ") + std::string(info.name);
    fail_kernel(ErrorCode::invalid_argument,
                "unknown kernel '" + std::string(options.kernel) + "'; expected auto or one of: " + names);
  }
  if (kernel->info.device != p.device.type)
    fail_kernel(ErrorCode::unsupported, "kernel '" + std::string(kernel->info.name) + "' runs on " +
                                            (kernel->info.device == DeviceType::cpu ? "cpu" : "cuda") +
                                            ", but the tensors are on " + to_string(p.device));
  if (options.deterministic && !kernel->deterministic)
    fail_kernel(ErrorCode::unsupported, "kernel '" + std::string(kernel->info.name) +
                                            "' is not deterministic; set options.deterministic = false");
  if (std::string why = kernel->why_not(p, options); !why.empty())
    fail_kernel(ErrorCode::unsupported,
                "kernel '" + std::string(kernel->info.name) + "' cannot run this problem: " + why);
  return {p, kernel};
}

std::size_t needed_workspace(const Resolved& r) {
  return r.kernel->workspace_bytes ? r.kernel->workspace_bytes(r.problem) : 0;
}

// Scratch must start on a 256-byte boundary: the concatenation's 16-byte vector stores and
// cuBLASLt's own scratch, placed after it, rely on that.
void check_workspace_alignment(const void* data, const char* argument) {
  constexpr std::uintptr_t kAlignment = 256;
  const auto address = reinterpret_cast<std::uintptr_t>(data);
  if (address % kAlignment != 0)
    throw Error(ErrorCode::invalid_argument, argument,
                "expected a pointer aligned to 256 bytes, got one " + std::to_string(address % kAlignment) +
                    " bytes past a 256-byte boundary");
}

// The scratch a call needs: the caller's workspace, its allocator's, or the library's cache.
Workspace acquire_workspace(std::size_t need, const Options& options, int device, CudaStream stream,
                            std::string_view user) {
  if (options.workspace.data != nullptr) {
    if (options.workspace.bytes < need)
      throw Error(ErrorCode::invalid_argument, "options.workspace",
                  "expected at least " + std::to_string(need) + " bytes for " + std::string(user) + ", got " +
                      std::to_string(options.workspace.bytes));
    check_workspace_alignment(options.workspace.data, "options.workspace");
    return options.workspace;
  }
  if (options.workspace_allocator.allocate != nullptr) {
    const Workspace workspace{options.workspace_allocator.allocate(need, options.workspace_allocator.context), need};
    if (workspace.data == nullptr)
      throw Error(ErrorCode::invalid_argument, "options.workspace_allocator",
                  "returned null for " + std::to_string(need) + " bytes");
    check_workspace_alignment(workspace.data, "options.workspace_allocator");
    return workspace;
  }
  return cuda::cached_workspace(device, stream, need);
}

BackwardProblem resolve_backward(const TensorView& grad_y, const TensorView& x, const TensorView& weight,
                                 const Gradients& gradients, const Options& options) {
  if (!options.kernel.empty() && options.kernel != "auto")
    fail_kernel(ErrorCode::unsupported, "backward() chooses its own kernels: expected \"auto\", got '" +
                                            std::string(options.kernel) + "'");
  const BackwardProblem p = validate_backward_args(grad_y, x, weight, gradients);
  if (p.forward.device.type == DeviceType::cuda) {
    if (options.device_pointers_verified)
      cuda::check_device(p.forward);
    else
      cuda::check_device_arguments(p);
    cuda::check_backward_supported(p);
  }
  return p;
}

std::size_t needed_backward_workspace(const BackwardProblem& p, const Options& options) {
  return p.forward.device.type == DeviceType::cuda ? cuda::backward_workspace_bytes(p, options.fp32_precision) : 0;
}

}  // namespace

void forward(const TensorView& x, const TensorView& weight, const std::optional<TensorView>& bias,
             const TensorView& y, const Options& options, CudaStream stream) {
  const Resolved r = resolve(x, weight, bias, y, options);
  if (r.problem.B == 0 || r.problem.K == 0) return;  // an empty y: nothing to write
  std::optional<cuda::ScopedDevice> on_device;  // the tensors' device, whichever is current
  if (r.problem.device.type == DeviceType::cuda) on_device.emplace(r.problem.device.index);
  Workspace workspace{};
  if (const std::size_t need = needed_workspace(r); need > 0)
    workspace = acquire_workspace(need, options, r.problem.device.index, stream,
                                  "kernel '" + std::string(r.kernel->info.name) + "'");
  r.kernel->run(r.problem, options, workspace, stream);
}

void backward(const TensorView& grad_y, const TensorView& x, const TensorView& weight, const Gradients& gradients,
              const Options& options, CudaStream stream) {
  const BackwardProblem p = resolve_backward(grad_y, x, weight, gradients, options);
  if (p.grad_x == nullptr && p.grad_weight == nullptr && p.grad_bias == nullptr) return;  // nothing to write
  if (p.forward.device.type == DeviceType::cpu) {
    cpu::run_backward(p);
    return;
  }
  const cuda::ScopedDevice on_device(p.forward.device.index);
  Workspace workspace{};
  if (const std::size_t need = needed_backward_workspace(p, options); need > 0)
    workspace = acquire_workspace(need, options, p.forward.device.index, stream, "the backward");
  cuda::run_backward(p, options, workspace, stream);
}

std::size_t backward_workspace_bytes(const TensorView& grad_y, const TensorView& x, const TensorView& weight,
                                     const Gradients& gradients, const Options& options) {
  return needed_backward_workspace(resolve_backward(grad_y, x, weight, gradients, options), options);
}

std::array<std::int64_t, 2> output_sizes(const TensorView& x, const TensorView& weight,
                                         const std::optional<TensorView>& bias) {
  const Problem p = validate_inputs(x, weight, bias);
  return {p.B, p.K};
}

std::string_view select_kernel(const TensorView& x, const TensorView& weight, const std::optional<TensorView>& bias,
                               const TensorView& y, const Options& options) {
  return resolve(x, weight, bias, y, options).kernel->info.name;
}

std::size_t workspace_bytes(const TensorView& x, const TensorView& weight, const std::optional<TensorView>& bias,
                            const TensorView& y, const Options& options) {
  return needed_workspace(resolve(x, weight, bias, y, options));
}

std::vector<KernelInfo> available_kernels() {
  std::vector<KernelInfo> infos;
  for (auto device : {DeviceType::cpu, DeviceType::cuda})
    for (const auto& k : kernels_for(device)) infos.push_back(k.info);
  return infos;
}

int cuda_device_count() { return cuda::device_count(); }

}  // namespace gather_linear
