// The CUDA backend's entries for the dispatcher, and its choice among them.
#include <array>

#include "core/kernel_registry.hpp"
#include "cuda/latency_kernel.hpp"
#include "cuda/simt_gemm_kernel.hpp"
#include "cuda/unfused_cublaslt.hpp"

namespace gather_linear::cuda {
namespace {

std::string latency_why_not(const Problem& p, const Options&) { return latency_kernel_why_not(p); }
std::string simt_why_not(const Problem& p, const Options&) { return simt_gemm_why_not(p); }
std::string unfused_why_not_entry(const Problem& p, const Options&) { return unfused_why_not(p); }

void latency(const Problem& p, const Options&, Workspace, CudaStream s) { run_latency_kernel(p, s); }
void simt(const Problem& p, const Options&, Workspace, CudaStream s) { run_simt_gemm(p, s); }
void unfused(const Problem& p, const Options& o, Workspace w, CudaStream s) { run_unfused(p, o.fp32_precision, w, s); }

enum KernelIndex { kLatency, kSimt, kUnfused };

const std::array<KernelEntry, 3> kKernels{{
    {{"cuda_latency", DeviceType::cuda, true,
      "small problems: a warp per 2x2 output tile, 16-byte loads straight from x, shuffle reduction"},
     true, latency_why_not, nullptr, latency},
    {{"cuda_simt_tiled", DeviceType::cuda, true,
      "general exact-float32 GEMM on CUDA cores, gathering x's slices in place; any shape and stride"},
     true, simt_why_not, nullptr, simt},
    {{"cuda_unfused_cublaslt", DeviceType::cuda, false,
      "baseline: concatenation kernel, then one cuBLASLt GEMM with bias epilogue (needs a B*R*H workspace)"},
     true, unfused_why_not_entry, unfused_workspace_bytes, unfused},
}};

}  // namespace

std::span<const KernelEntry> kernels() { return kKernels; }

const KernelEntry& choose_kernel(const Problem& p, const Options& options) {
  if (std::string why = simt_gemm_why_not(p); !why.empty()) throw Error(ErrorCode::unsupported, "x", why);
  if (p.outputs() <= 4096) return kKernels[kLatency];
  const bool tensor_cores_win = p.dtype != DType::float32 || options.fp32_precision == Fp32Precision::tf32;
  return tensor_cores_win ? kKernels[kUnfused] : kKernels[kSimt];
}

}  // namespace gather_linear::cuda
