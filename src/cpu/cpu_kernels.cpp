// The CPU backend's entries for the dispatcher.
#include "core/kernel_registry.hpp"
#include "cpu/cpu_kernels.hpp"

namespace gather_linear::cpu {
namespace {

std::string runs_anything(const Problem&, const Options&) { return {}; }
void gather_gemm(const Problem& p, const Options&, Workspace, CudaStream) { run_gather_gemm(p); }
std::string amx_why_not(const Problem& p, const Options&) { return amx_bf16_why_not(p); }
void amx(const Problem& p, const Options&, Workspace, CudaStream) { run_amx_bf16(p); }
std::string dot_why_not(const Problem& p, const Options&) { return bf16_dot_why_not(p); }
void dot(const Problem& p, const Options&, Workspace, CudaStream) { run_bf16_dot(p); }
void reference(const Problem& p, const Options&, Workspace, CudaStream) { run_reference(p); }

#ifdef GATHER_LINEAR_HAVE_OPENBLAS
std::string unfused_why_not(const Problem& p, const Options&) { return unfused_blas_why_not(p); }
void unfused(const Problem& p, const Options&, Workspace, CudaStream) { run_unfused_blas(p); }
#endif

const KernelEntry kKernels[] = {
    {{"cpu_amx_bf16", DeviceType::cpu, true,
      "bfloat16 on AMX tiles, gathering x's rows while packing, and float16 as three bfloat16 products a term; "
      "OpenMP threads (needs AMX-BF16)"},
     true, amx_why_not, nullptr, amx},
    {{"cpu_bf16_dot", DeviceType::cpu, true,
      "bfloat16 on AVX512-BF16 pair dot products, gathering x's rows while packing; OpenMP threads (needs "
      "AVX512-BF16)"},
     true, dot_why_not, nullptr, dot},
    {{"cpu_gather_gemm", DeviceType::cpu, true,
      "SIMD GEMM (AVX-512, AVX2 or SSE2) that gathers x's rows while packing; OpenMP threads"},
     true, runs_anything, nullptr, gather_gemm},
    {{"cpu_reference", DeviceType::cpu, true, "exact reference: double accumulation, one thread"},
     true, runs_anything, nullptr, reference},
#ifdef GATHER_LINEAR_HAVE_OPENBLAS
    {{"cpu_unfused_blas", DeviceType::cpu, false, "baseline: concatenate, then one OpenBLAS GEMM with bias"},
     true, unfused_why_not, nullptr, unfused},
#endif
};

}  // namespace

std::span<const KernelEntry> kernels() { return kKernels; }

// bfloat16: AMX where the processor has it (it won from the seed problem up, and reads the weight
// in place for short batches; measured in docs/PERFORMANCE.md), but for up to 4 rows, which
// stream the weight faster on AVX512-BF16 dot products (bf16_dot_beats_amx) unless their reduction
// is at most 256 long, and for reductions of up to 16, up to 8 outputs, short reductions with few
// outputs, or those few rows with a reduction that short, where the engine wins
// (engine_beats_amx); float16 on AMX where its split into
// bfloat16 parts beats the engine (amx_split_beats_engine). Else, but for reductions of up to 16,
// of up to 256 on a single row, and past 16 rows up to 16 outputs (64 with an odd H's reduction
// of up to 64), where the engine wins (engine_beats_dot), AVX512-BF16 dot
// products for short batches (the weight in place, x gathered once), and, on processors where they
// outrun the float32 engine (bf16_dot_packed_beats_engine), where its packing has a fast path for
// both operands: x's slices along a unit stride, or its rows side by side (the backward's
// grad_y^T), and the weight's rows, or its columns (the backward's transposed views), along a unit
// stride. Else the SIMD engine.
const KernelEntry& choose_kernel(const Problem& p, const Options&) {
  if (p.dtype == DType::float16) return amx_split_beats_engine(p) ? kKernels[0] : kKernels[2];
  const bool dot = bf16_dot_why_not(p).empty();
  if (amx_bf16_why_not(p).empty()) {
    if (dot && bf16_dot_beats_amx(p)) return kKernels[1];
    return engine_beats_amx(p) ? kKernels[2] : kKernels[0];
  }
  const bool x_packs_fast = p.x_stride_h == 1 || p.x_stride_b == 1;
  const bool weight_packs_fast = p.weight_stride_c == 1 || p.weight_stride_k == 1;
  if (dot && !engine_beats_dot(p) &&
      (bf16_dot_reads_weight_in_place(p) ||
       (bf16_dot_packed_beats_engine(p) && x_packs_fast && weight_packs_fast)))
    return kKernels[1];
  return kKernels[2];
}

}  // namespace gather_linear::cpu
