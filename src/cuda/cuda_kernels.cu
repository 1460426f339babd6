// The CUDA backend's entries for the dispatcher, and its choice among them.
#include <array>

#include "core/kernel_registry.hpp"
#include "cuda/device_info.hpp"
#include "cuda/gett_kernel.hpp"
#include "cuda/latency_kernel.hpp"
#include "cuda/mma_gemm_kernel.hpp"
#include "cuda/simt_gemm_kernel.hpp"
#include "cuda/unfused_cublaslt.hpp"
#include "cuda/weight_stream_kernel.hpp"

namespace gather_linear::cuda {
namespace {

std::string latency_why_not(const Problem& p, const Options&) { return latency_kernel_why_not(p); }
std::string simt_why_not(const Problem& p, const Options&) { return simt_gemm_why_not(p); }
std::string mma_why_not(const Problem& p, const Options&) { return mma_gemm_why_not(p); }
std::string gett_why_not_entry(const Problem& p, const Options& o) { return gett_why_not(p, o.fp32_precision); }
std::string unfused_why_not_entry(const Problem& p, const Options&) { return unfused_why_not(p); }
std::string weight_stream_why_not_entry(const Problem& p, const Options&) { return weight_stream_why_not(p); }

void latency(const Problem& p, const Options&, Workspace, CudaStream s) { run_latency_kernel(p, s); }
void simt(const Problem& p, const Options&, Workspace, CudaStream s) { run_simt_gemm(p, s); }
void mma(const Problem& p, const Options& o, Workspace, CudaStream s) { run_mma_gemm(p, o.fp32_precision, s); }
void gett(const Problem& p, const Options&, Workspace w, CudaStream s) { run_gett(p, w, s); }
void unfused(const Problem& p, const Options& o, Workspace w, CudaStream s) { run_unfused(p, o.fp32_precision, w, s); }
void weight_stream(const Problem& p, const Options& o, Workspace, CudaStream s) {
  run_weight_stream(p, o.fp32_precision, s);
}

enum KernelIndex { kLatency, kWeightStream, kMma, kGett, kSimt, kUnfused };

const std::array<KernelEntry, 6> kKernels{{
    {{"cuda_latency", DeviceType::cuda, true,
      "small problems: a warp per 2x2 output tile, 16-byte loads straight from x, shuffle reduction"},
     true, latency_why_not, nullptr, latency},
    {{"cuda_weight_stream", DeviceType::cuda, true,
      "up to 32 rows against a large weight (decoding): tensor cores (mma.sync) fed straight from memory, "
      "every SM streaming its rows of W once, the reduction split between warps; float16/bfloat16, "
      "float32 as 3xTF32 (TF32 when allowed); 16-byte chunks"},
     true, weight_stream_why_not_entry, nullptr, weight_stream},
    {{"cuda_tensor_core_mma", DeviceType::cuda, true,
      "tensor-core GEMM (mma.sync): exact float32 as 3xTF32, TF32 when allowed, float16/bfloat16; "
      "cp.async copies x's slices in place (needs 16-byte chunks)"},
     true, mma_why_not, nullptr, mma},
    {{"cuda_gett_sm90", DeviceType::cuda, true,
      "Hopper tensor-core GETT (CUTLASS: TMA reads x's slices in place, wgmma, bias epilogue): "
      "bfloat16, float16, float32 as TF32 (operands rounded to nearest by TMA); sm_90, 16-byte aligned slices"},
     true, gett_why_not_entry, gett_workspace_bytes, gett},
    {{"cuda_simt_tiled", DeviceType::cuda, true,
      "general GEMM on CUDA cores (exact float32, float64), gathering x's slices in place; any shape and stride"},
     true, simt_why_not, nullptr, simt},
    {{"cuda_unfused_cublaslt", DeviceType::cuda, false,
      "baseline: concatenation kernel, then one cuBLASLt GEMM with bias epilogue (needs a B*R*H workspace)"},
     true, unfused_why_not_entry, unfused_workspace_bytes, unfused},
}};

}  // namespace

std::span<const KernelEntry> kernels() { return kKernels; }

// float64 on the latency kernel: reductions up to this long, outputs up to this many. There it
// took 0.35-0.78x unfused's time (a DGEMM on cuBLAS's tensor cores, 5-6 us here); with
// R*H = 512 it took 1.26x at 4,096 outputs, with R*H = 128 1.76x at 131,072
// (bench/results/float64_h200.csv; docs/performance/gpu_forward.md, "float64 on CUDA").
constexpr std::int64_t kFloat64LatencyMaxReduction = 128;
constexpr std::int64_t kFloat64LatencyMaxOutputs = 32768;
// Where cuBLASLt cannot read the weight, float64's latency kernel took 0.09-0.45x the SIMT
// kernel's time up to 262,144 outputs (R*H up to 4,096), and 1.18x at 1,048,576
// (bench/results/float64_simt_h200.csv).
constexpr std::int64_t kFloat64FallbackLatencyMaxOutputs = 262144;

// Measured on an H200 (bench/kernel_variants.cu, docs/PERFORMANCE.md): problems of up to 16 rows
// against a weight of 1 to 64-72 MB (16-bit; to 72 MB with 17 to 24 rows while its blocks fit one
// round, else to 8 MB with 17 to 32 rows, to 16-20 MB where the weight has few rows; float32 by its
// own rule) go to the weight-streaming kernel; the latency kernel wins while the work is small;
// exact float32 beyond about a million outputs goes to the
// 3xTF32 tensor-core kernel; 16-bit problems beyond the latency kernel's reach and TF32 ones that
// fill the GPU go to the Hopper GETT where it wins (gett::outruns_unfused); elsewhere, and
// wherever cuBLAS outruns the fused kernels, the unfused baseline runs: never lose to it.
const KernelEntry& choose_kernel(const Problem& p, const Options& options) {
  if (std::string why = simt_gemm_why_not(p); !why.empty()) throw Error(ErrorCode::unsupported, "x", why);
  const bool exact_float32 = p.dtype == DType::float32 && options.fp32_precision == Fp32Precision::ieee;
  const bool tf32 = p.dtype == DType::float32 && !exact_float32;
  const double macs = static_cast<double>(p.outputs()) * static_cast<double>(p.RH);
  if (p.dtype == DType::float64) {
    // No tensor-core kernel of ours takes float64: the latency kernel while it beats cuBLAS's
    // DGEMM, then unfused; where cuBLASLt cannot read the weight, the faster of the two fused
    // CUDA-core kernels.
    const bool latency_fits = latency_kernel_why_not(p).empty();
    if (p.RH <= kFloat64LatencyMaxReduction && p.outputs() <= kFloat64LatencyMaxOutputs && latency_fits)
      return kKernels[kLatency];
    if (unfused_why_not(p).empty()) return kKernels[kUnfused];
    return p.outputs() <= kFloat64FallbackLatencyMaxOutputs && latency_fits ? kKernels[kLatency] : kKernels[kSimt];
  }
  // Multiply-adds up to which the latency kernel beats cuBLAS: its 2x2 tiles (small outputs)
  // sustain less than its 4x4 tiles, and cuBLAS's tensor cores (16-bit, TF32) catch up sooner.
  const bool small_tiles = p.outputs() <= kLatencySmallTileOutputs;
  const double latency_limit = exact_float32 ? (small_tiles ? 20e6 : 40e6) : tf32 ? 16e6 : 12e6;
  // In 16-bit its time grows with the outputs whatever the reduction: from 65536 outputs it took
  // 4.1-7.4 us against 3.8-4.0 for unfused and 3.3-3.5 for the GETT (4-8 M multiply-adds).
  const bool sixteen_bit = p.dtype == DType::float16 || p.dtype == DType::bfloat16;
  const bool latency_outputs = !sixteen_bit || p.outputs() < 65536;
  // Up to 16 rows against 16-bit weights from 1 MB: read once by every SM, faster than unfused
  // and than the latency kernel; at 128 MB cuBLAS streams faster (0.90-0.93x). Up to 8 rows to
  // 72 MB; with 9 to 16 to 64 MB (at 72 MB, 1.04x unfused's time as a programmatic launch); with
  // 17 to 32 to 8 MB (0.65-0.97x unfused's time; from 32 MB 1.07-1.59x), and to 16 MB where the
  // weight's rows are too few for the GETT with them as M (0.93-0.97x). With 17 to 28 rows to
  // 20 MB where the kernel's tiles make one nearly full round of blocks (0.9 of the SMs or more)
  // and the GETT's 64-row tiles are fewer than a quarter of the SMs (K = 1,889-2,048 on the H200):
  // at 10-20 MB 0.87-1.005x the GETT's time with 32 of its tiles (32 rows 0.97-1.03x; from 64
  // tiles 1.02-1.50x), 0.92-0.96x unfused's with 30-31; with fewer tiles 0.97-1.15x unfused's
  // from 16 MB. bench/results/: weight_stream_variants_h200.csv, weight_stream_pdl_h200.csv,
  // weight_stream_rows_h200.csv, gett_weight_rows_tiles_h200.csv, weight_stream_rows_20mb_h200.csv.
  // With 17 to 24 rows (three n8 groups a warp) to 72 MB while its tiles fit one round of blocks
  // (three of 8 warps an SM; K up to 6,144 on 132 SMs) and the weight has tiles enough for the
  // GETT: 0.63-0.97x unfused's time and 0.69-1.00x the GETT's on an H200 (9 shapes), 0.76-0.95x and
  // 0.80-0.94x on an H100 (15), where the GETT had lost to unfused around 32 MB. Beyond: 80-128 MB
  // at K = 4,096-6,144 0.90-0.98x unfused's time on the H100 (not measured on the H200); at K =
  // 8,192 (blocks in two rounds) 1.08-1.37x on both (weight_stream_three_groups_*_session53.csv).
  // Where the GETT splits its reduction (17 rows or more against 8 MB or more where its tiles are
  // too few; gett::takes_split_reduction), that wins instead: 0.46-0.99x this kernel's time
  // (bench/results/gett_split_reduction_h200.csv).
  const double weight_bytes = static_cast<double>(p.weight_bytes()), MiB = 0x1p20;
  const bool gett_splits = !exact_float32 && gett::takes_split_reduction(p) &&
                           gett_why_not(p, options.fp32_precision).empty();
  const bool streamable = p.B <= kWeightStreamMaxRows && weight_bytes >= MiB && !gett_splits &&
                          weight_stream_why_not(p).empty();
  const double stream_tiles = static_cast<double>((p.K + kWeightStreamTileOutputs - 1) / kWeightStreamTileOutputs);
  const double sms = multiprocessor_count(p.device.index);
  const bool few_weight_tiles = gett::too_few_weight_tiles(p);
  const bool one_full_round = stream_tiles >= 0.9 * sms && gett::weight_tiles_per_sm(p) < 0.25;
  const bool three_groups_fit = p.B <= 24 && stream_tiles <= 3 * sms && !few_weight_tiles;
  const double many_rows_limit = three_groups_fit              ? 72
                                 : p.B <= 28 && one_full_round ? 20
                                 : few_weight_tiles            ? 16
                                                               : 8;
  const double sixteen_bit_limit = (p.B <= 8 ? 72 : p.B <= 16 ? 64 : many_rows_limit) * MiB;
  if (streamable && sixteen_bit && weight_bytes <= sixteen_bit_limit) return kKernels[kWeightStream];
  // float32 (exact as 3xTF32, or TF32), measured against the better of the latency kernel and
  // unfused (bench/results/weight_stream_pdl_h200.csv): up to 8 rows against 2-128 MB, 0.67-1.01x
  // the time (from 2 MB: at 2.2 MB it beat the latency kernel by only 5-7%, and nothing smaller
  // was measured). With 9 to 16 rows its tensor cores work harder: exact 0.43-0.91x unfused's time
  // where the latency kernel declines; TF32 0.84-0.97x up to 36 MB, but 1.13x at 144 MB. With 17
  // to 32 rows (bench/results/weight_stream_rows_h200.csv): exact at 2-256 MB, 0.51-0.88x
  // unfused's time, and 0.77x the latency kernel's where that takes the problem; TF32 up to 8 MB,
  // 0.62-0.82x (from 16 MB 1.02-1.49x); with 17 to 24 rows (three n8 groups) up to 16 MB,
  // 0.65-0.78x unfused's time and 0.87-0.95x the GETT's on an H200 and an H100 (from 32 MB
  // 0.86-1.54x unfused's; weight_stream_three_groups_*_session53.csv). With 512 outputs these lost
  // (1.14-1.63x) until the kernel split short-K tiles between blocks; the cases the output counts
  // had excluded now take 0.55-0.97x the time of the better of unfused and the latency kernel
  // (bench/results/weight_stream_blocks_h200.csv).
  const bool latency_takes = macs <= latency_limit && latency_outputs && latency_kernel_why_not(p).empty();
  const bool float32_streams = p.B <= 8    ? weight_bytes <= 144 * MiB
                               : p.B <= 16 ? weight_bytes <= 144 * MiB &&
                                                 ((tf32 && weight_bytes <= 36 * MiB) ||
                                                  (exact_float32 && !latency_takes))
                               : exact_float32 || weight_bytes <= (p.B <= 24 ? 16 : 8) * MiB;
  if (streamable && p.dtype == DType::float32 && weight_bytes >= 2 * MiB && float32_streams)
    return kKernels[kWeightStream];
  if (latency_takes) return kKernels[kLatency];
  if (exact_float32 && p.outputs() >= 786432 && mma_gemm_why_not(p).empty()) return kKernels[kMma];
  if (!exact_float32 && gett::outruns_unfused(p) && gett_why_not(p, options.fp32_precision).empty())
    return kKernels[kGett];
  if (unfused_why_not(p).empty()) return kKernels[kUnfused];
  // cuBLASLt cannot read the weight (its rows overlap): the tensor-core GEMM reads it through its
  // row stride, in 0.13-0.26x the SIMT kernel's time in 16-bit, 0.25-0.43x in TF32 and 0.38-0.47x
  // in exact float32 (bench/results/overlap_fallback_mma_vs_simt_h200.csv).
  if (mma_gemm_why_not(p).empty()) return kKernels[kMma];
  return kKernels[kSimt];
}

}  // namespace gather_linear::cuda
