// Measures the design choices inside the CUDA kernels, one CSV row per (shape, variant):
//   - the latency kernel's outputs per warp (TB x TK) on small problems, against an empty
//     kernel (the launch floor), the dispatched choice and the unfused baseline;
//   - the tensor-core kernel's block tile (exact float32 as 3xTF32, TF32, bfloat16) and the SIMT
//     kernel on larger problems, against cuBLASLt GEMM-only and the unfused baseline;
//   - the weight-streaming kernel's configurations (steps in flight; as a programmatic launch
//     with or without its L2 prefetch, letting the next kernel launch early or late; a plain
//     launch) on decode-sized problems, bfloat16 and float32 (exact, TF32), against cuBLASLt
//     GEMM-only, the unfused baseline and the latency kernel; `stream_rows`: with 17 to 32 rows;
//     `stream_blocks`: warps per block, and blocks per tile splitting the reduction as a cluster;
//   - the Hopper GETT configurations (the library's and the unshipped candidates, see
//     bench/CMakeLists.txt) and the tile scheduler's swizzle and raster order, bfloat16 and TF32,
//     each in a pair with the dispatched configuration, after cuBLASLt GEMM-only on the
//     pre-concatenated input, unfused and the dispatched one on their own; `gett_weight_rows`: the
//     configurations with the weight's rows as M on 16 to 128 rows of x, those that split the
//     reduction at their own part count (`_s<n>`) and at every other up to two waves of blocks.
// Each variant is checked against the unfused baseline's result before it is timed.
// Times: median per forward over CUDA-graph replays, rotating input sets past L2.
//
//   kernel_variants [latency|gemm|gemm_exact|stream|stream_rows|stream_blocks|gett|gett_large|gett_weight_rows|all]
//                                                        > variants.csv
//   kernel_variants gett_large R,B,H,K[,bf16|f16|tf32]  > variants.csv   (that shape only, by default bfloat16)
//   kernel_variants gett_weight_rows R,B,H,K[,bf16|f16|tf32]              (that shape; without a dtype,
//                                                        bfloat16 and TF32, and float16 at K = 4096)
//   kernel_variants host                                 > host.csv
//   kernel_variants latency_cold                         > cold.csv   (KernelBench's flush before each launch)
#include <cuda_runtime.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "core/kernel_registry.hpp"
#include "core/validate.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_info.hpp"
#include "cuda/gett_kernel.hpp"
#include "cuda/latency_kernel.cuh"
#include "cuda/latency_kernel.hpp"
#include "cuda/mma_gemm_kernel.hpp"
#include "cuda/simt_gemm_kernel.hpp"
#include "cuda/unfused_cublaslt.hpp"
#include "cuda/weight_stream_kernel.cuh"
#include "device_values.cuh"
#include "gett_candidates.hpp"
#include "timing.hpp"

namespace gather_linear::bench {

std::vector<cuda::gett::Variant>& gett_candidates() {
  static std::vector<cuda::gett::Variant> candidates;
  return candidates;
}
bool register_gett_candidate(const cuda::gett::Variant& variant) {
  gett_candidates().push_back(variant);
  return true;
}

namespace {

using cuda::check;

__global__ void empty_kernel() {}

struct Shape {
  std::int64_t R, B, H, K;
};

// Input sets on the device (x contiguous), enough of them to span twice the L2.
struct Inputs {
  DType dtype;
  std::size_t element;
  std::vector<void*> allocations;
  std::vector<Problem> sets;
  void* y = nullptr;
  void* concatenated = nullptr;
  void* gemm_workspace = nullptr;  // cuBLASLt's scratch for the GEMM-only and unfused comparators
  Inputs(const Shape& s, DType dtype_, cudaStream_t stream) : dtype(dtype_), element(dtype_size(dtype_)) {
    const std::size_t nx = s.R * s.B * s.H, nw = s.K * s.R * s.H, bytes = element * (nx + nw + s.K);
    const int count = timing::rotating_sets(bytes, 0);
    y = alloc(s.B * s.K);
    concatenated = alloc(nx);
    gemm_workspace = alloc((cuda::kGemmWorkspaceBytes + element - 1) / element);
    for (int i = 0; i < count; ++i) {
      void *x = alloc(nx), *w = alloc(nw), *b = alloc(s.K);
      fill_uniform(x, nx, dtype, 3 * i + 1, stream);
      fill_uniform(w, nw, dtype, 3 * i + 2, stream);
      fill_uniform(b, s.K, dtype, 3 * i + 3, stream);
      const auto dev = Device::cuda(0);
      sets.push_back(validate_forward_args(TensorView::contiguous(x, dtype, dev, {s.R, s.B, s.H}),
                                           TensorView::contiguous(w, dtype, dev, {s.K, s.R * s.H}),
                                           TensorView::contiguous(b, dtype, dev, {s.K}),
                                           TensorView::contiguous(y, dtype, dev, {s.B, s.K})));
    }
    check(cudaStreamSynchronize(stream), "fill");
  }
  ~Inputs() {
    for (void* p : allocations) cudaFree(p);
  }
  void* alloc(std::size_t n) {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<std::size_t>(n, 1) * element), "cudaMalloc");
    allocations.push_back(p);
    return p;
  }
  std::vector<float> download_y(std::size_t n) const { return download_as_float(y, n, dtype); }
};

using Run = std::function<void(const Problem&, cudaStream_t)>;

// Runs `variant` and `reference_run` on set 0 and returns max |difference| / max |reference|.
double disagreement(Inputs& in, const Run& variant, const Run& reference_run, cudaStream_t stream) {
  const Problem& p = in.sets[0];
  const std::size_t n = p.B * p.K;
  reference_run(p, stream);
  check(cudaStreamSynchronize(stream), "reference run");
  const std::vector<float> want = in.download_y(n);
  check(cudaMemsetAsync(in.y, 0xff, n * in.element, stream), "poison");
  variant(p, stream);
  check(cudaStreamSynchronize(stream), "variant run");
  const std::vector<float> got = in.download_y(n);
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    err = std::isnan(got[i]) ? INFINITY : std::max(err, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return scale > 0 ? err / scale : err;
}

// One CSV row: shape, dtype, variant, graph-replay and launch times, TFLOP/s, disagreement.
void print_row(const Shape& s, DType dtype, const std::string& variant, const timing::GpuTiming& t, double err) {
  const double flops = 2.0 * s.B * s.K * s.R * s.H;
  std::printf("%lld,%lld,%lld,%lld,%s,%s,%.3f,%.3f,%.2f,%.1e\n", (long long)s.R, (long long)s.B, (long long)s.H,
              (long long)s.K, std::string(dtype_name(dtype)).c_str(), variant.c_str(), t.graph_us, t.event_us,
              flops / t.graph_us / 1e6, err);
  std::fflush(stdout);
}

void row(const Shape& s, const std::string& variant, Inputs& in, const Run& run, const Run& reference_run,
         cudaStream_t stream, bool check_result = true, int max_sets = 64) {
  const double err = check_result ? disagreement(in, run, reference_run, stream) : 0.0;
  const double flops = 2.0 * s.B * s.K * s.R * s.H;
  const int repeats = static_cast<int>(std::clamp(2e10 / flops, 10.0, 200.0));
  const int sets = std::min(static_cast<int>(in.sets.size()), max_sets);
  const auto t = timing::time_gpu([&](int i) { run(in.sets[i], stream); }, sets, repeats, stream);
  print_row(s, in.dtype, variant, t, err);
}

template <int TB, int TK, int SPLIT, int UNROLL = 1, int WARPS = cuda::latency::kWarpsPerBlock>
Run latency_variant() {
  return [](const Problem& p, cudaStream_t s) { cuda::latency::launch<float, 4, TB, TK, SPLIT, UNROLL, WARPS>(p, s); };
}

// Floors for the latency kernel: the same grid writing y with no loads, and with one load.
__global__ void store_only_kernel(float* y, std::uint32_t n) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 1.f;
}
__global__ void one_load_kernel(const float* __restrict__ x, std::uint32_t nx, float* y, std::uint32_t n) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __ldg(x + i % nx);
}

Run unfused_run(Inputs& in, Fp32Precision precision) {
  return [&in, precision](const Problem& p, cudaStream_t st) {
    cuda::concatenate(p, in.concatenated, st);
    cuda::gemm_on_concatenated(p, in.concatenated, precision, in.gemm_workspace, st);
  };
}

Run mma_run(Fp32Precision precision, cuda::MmaTile tile) {
  return [=](const Problem& p, cudaStream_t st) { cuda::run_mma_gemm(p, precision, st, tile); };
}

void latency_sweep(cudaStream_t stream) {
  const Shape shapes[] = {{4, 12, 32, 56}, {4, 12, 32, 112}, {4, 24, 32, 56}, {8, 32, 64, 128},
                          {4, 64, 32, 256}, {8, 64, 128, 256}, {8, 256, 64, 256}, {8, 256, 64, 512}};
  for (const Shape& s : shapes) {
    Inputs in(s, DType::float32, stream);
    const Run unfused = unfused_run(in, Fp32Precision::ieee);
    row(s, "empty_kernel", in, [](const Problem&, cudaStream_t st) { empty_kernel<<<1, 32, 0, st>>>(); }, unfused,
        stream, false);
    const auto outputs = static_cast<std::uint32_t>(s.B * s.K);
    row(s, "store_only", in,
        [=](const Problem& p, cudaStream_t st) {
          store_only_kernel<<<(outputs + 127) / 128, 128, 0, st>>>(static_cast<float*>(p.y), outputs);
        },
        unfused, stream, false);
    row(s, "one_load", in,
        [=](const Problem& p, cudaStream_t st) {
          one_load_kernel<<<(outputs + 127) / 128, 128, 0, st>>>(
              static_cast<const float*>(p.x), static_cast<std::uint32_t>(p.R * p.B * p.H), static_cast<float*>(p.y), outputs);
        },
        unfused, stream, false);
    row(s, "latency_1x1_s32", in, latency_variant<1, 1, 32>(), unfused, stream);
    row(s, "latency_2x2_s32", in, latency_variant<2, 2, 32>(), unfused, stream);
    row(s, "latency_2x2_s32_oneset", in, latency_variant<2, 2, 32>(), unfused, stream, true, 1);
    row(s, "latency_2x2_s32_no_pdl", in,
        [](const Problem& p, cudaStream_t st) { cuda::latency::launch<float, 4, 2, 2, 32, 1>(p, st, false); }, unfused,
        stream);
    row(s, "latency_2x2_s32_1warp", in, latency_variant<2, 2, 32, 1, 1>(), unfused, stream);
    row(s, "latency_2x2_s32_2warps", in, latency_variant<2, 2, 32, 1, 2>(), unfused, stream);
    row(s, "latency_2x2_s32_8warps", in, latency_variant<2, 2, 32, 1, 8>(), unfused, stream);
    row(s, "latency_2x4_s32", in, latency_variant<2, 4, 32>(), unfused, stream);
    row(s, "latency_4x4_s32", in, latency_variant<4, 4, 32>(), unfused, stream);
    row(s, "latency_1x1_s16_u2", in, latency_variant<1, 1, 16, 2>(), unfused, stream);
    row(s, "latency_2x2_s16_u2", in, latency_variant<2, 2, 16, 2>(), unfused, stream);
    row(s, "latency_1x2_s16_u2", in, latency_variant<1, 2, 16, 2>(), unfused, stream);
    row(s, "latency_2x4_s16_u2", in, latency_variant<2, 4, 16, 2>(), unfused, stream);
    row(s, "latency_4x4_s16_u2", in, latency_variant<4, 4, 16, 2>(), unfused, stream);
    row(s, "latency_1x1_s8_u4", in, latency_variant<1, 1, 8, 4>(), unfused, stream);
    row(s, "latency_2x2_s8_u4", in, latency_variant<2, 2, 8, 4>(), unfused, stream);
    row(s, "latency_2x4_s8_u4", in, latency_variant<2, 4, 8, 4>(), unfused, stream);
    row(s, "dispatched", in, [](const Problem& p, cudaStream_t st) { cuda::run_latency_kernel(p, st); }, unfused,
        stream);
    row(s, "mma_tf32x3_64x64", in, mma_run(Fp32Precision::ieee, cuda::MmaTile::rows64_cols64), unfused, stream);
    row(s, "unfused_cublaslt", in, unfused, unfused, stream, false);
    row(s, "unfused_cublaslt_tf32", in, unfused_run(in, Fp32Precision::tf32), unfused, stream, false);
    Inputs in16(s, DType::bfloat16, stream);
    const Run unfused16 = unfused_run(in16, Fp32Precision::ieee);
    row(s, "dispatched", in16, [](const Problem& p, cudaStream_t st) { cuda::run_latency_kernel(p, st); }, unfused16,
        stream);
    row(s, "mma_bf16_64x64", in16, mma_run(Fp32Precision::ieee, cuda::MmaTile::rows64_cols64), unfused16, stream);
    row(s, "unfused_cublaslt", in16, unfused16, unfused16, stream, false);
  }
}

// The latency kernel's candidates as the KernelBench protocol times a forward: each trial
// synchronizes, writes a 256 MB buffer (which evicts the L2 and leaves it full of dirty lines),
// then times one launch between an event pair; candidates take turns trial by trial. Floors: an
// empty kernel, the dispatched grid storing y without loads, and a single thread loading one
// element the flush evicted. Mean, median and minimum of the trials, in µs.
void latency_cold_sweep(cudaStream_t stream) {
  std::printf("R,B,H,K,dtype,variant,cold_mean_us,cold_median_us,cold_min_us,rel_diff\n");
  constexpr std::size_t kFlushBytes = std::size_t{256} << 20;
  constexpr int kTrials = 300;
  void* flush = nullptr;
  check(cudaMalloc(&flush, kFlushBytes), "cudaMalloc(flush)");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (const Shape& s : {Shape{4, 12, 32, 56}, Shape{4, 12, 32, 112}, Shape{4, 24, 32, 56}}) {
    Inputs in(s, DType::float32, stream);
    const Run unfused = unfused_run(in, Fp32Precision::ieee);
    const auto outputs = static_cast<std::uint32_t>(s.B * s.K);
    struct Candidate {
      std::string name;
      Run run;
      bool check_result;
      std::vector<double> us{};
    };
    std::vector<Candidate> candidates = {
        {"empty_kernel", [](const Problem&, cudaStream_t st) { empty_kernel<<<1, 32, 0, st>>>(); }, false},
        {"store_only",
         [=](const Problem& p, cudaStream_t st) {
           store_only_kernel<<<(outputs + 127) / 128, 128, 0, st>>>(static_cast<float*>(p.y), outputs);
         },
         false},
        {"one_load_one_thread",
         [](const Problem& p, cudaStream_t st) {
           one_load_kernel<<<1, 1, 0, st>>>(static_cast<const float*>(p.weight), 1, static_cast<float*>(p.y), 1);
         },
         false},
        {"dispatched", [](const Problem& p, cudaStream_t st) { cuda::run_latency_kernel(p, st); }, true},
        {"latency_2x2_s32_no_pdl",
         [](const Problem& p, cudaStream_t st) { cuda::latency::launch<float, 4, 2, 2, 32, 1>(p, st, false); }, true},
        {"latency_1x1_s32", latency_variant<1, 1, 32>(), true},
        {"latency_2x4_s32", latency_variant<2, 4, 32>(), true},
        {"latency_4x4_s32", latency_variant<4, 4, 32>(), true},
        {"latency_2x2_s32_1warp", latency_variant<2, 2, 32, 1, 1>(), true},
        {"latency_2x2_s32_8warps", latency_variant<2, 2, 32, 1, 8>(), true},
        {"latency_2x2_s16_u2", latency_variant<2, 2, 16, 2>(), true},
        {"latency_2x2_s8_u4", latency_variant<2, 2, 8, 4>(), true},
        {"unfused_cublaslt", unfused, false},
    };
    std::vector<double> errors;
    for (Candidate& c : candidates) errors.push_back(c.check_result ? disagreement(in, c.run, unfused, stream) : 0.0);
    for (int trial = 0; trial < kTrials; ++trial)
      for (Candidate& c : candidates) {
        check(cudaStreamSynchronize(stream), "synchronize");
        check(cudaMemsetAsync(flush, trial & 0xff, kFlushBytes, stream), "flush");
        check(cudaEventRecord(start, stream), "cudaEventRecord");
        c.run(in.sets[0], stream);
        check(cudaEventRecord(stop, stream), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        if (trial > 0) c.us.push_back(ms * 1e3);  // the first trial loads modules
      }
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      std::vector<double>& us = candidates[i].us;
      std::sort(us.begin(), us.end());
      double mean = 0;
      for (double t : us) mean += t / us.size();
      std::printf("%lld,%lld,%lld,%lld,float32,%s,%.3f,%.3f,%.3f,%.1e\n", (long long)s.R, (long long)s.B,
                  (long long)s.H, (long long)s.K, candidates[i].name.c_str(), mean, us[us.size() / 2], us.front(),
                  errors[i]);
    }
    std::fflush(stdout);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(flush);
}

// Tensor-core tiles and SIMT against cuBLASLt, for exact float32, TF32 and bfloat16.
void gemm_sweep(cudaStream_t stream, bool exact_float32_only) {
  const Shape shapes[] = {{8, 256, 64, 512},    {8, 512, 128, 512},    {8, 1024, 128, 1024}, {32, 2048, 64, 1024},
                          {4, 4096, 32, 2048},  {16, 4096, 128, 2048}, {12, 4096, 64, 768},  {8, 8192, 128, 1024},
                          {8, 4096, 512, 4096}, {32, 8192, 128, 4096}};
  using cuda::MmaTile;
  const std::pair<const char*, MmaTile> tiles[] = {{"128x128", MmaTile::rows128_cols128},
                                                   {"128x64", MmaTile::rows128_cols64},
                                                   {"64x64", MmaTile::rows64_cols64},
                                                   {"auto", MmaTile::automatic}};
  for (const Shape& s : shapes) {
    for (DType dtype : {DType::float32, DType::bfloat16}) {
      if (exact_float32_only && dtype != DType::float32) continue;
      Inputs in(s, dtype, stream);
      const std::vector<Fp32Precision> precisions =
          exact_float32_only         ? std::vector{Fp32Precision::ieee}
          : dtype == DType::float32 ? std::vector{Fp32Precision::ieee, Fp32Precision::tf32}
                                    : std::vector{Fp32Precision::ieee};
      for (Fp32Precision precision : precisions) {
        const std::string mode = dtype == DType::bfloat16 ? "bf16" : precision == Fp32Precision::tf32 ? "tf32" : "tf32x3";
        const Run unfused = unfused_run(in, precision);
        cuda::concatenate(in.sets[0], in.concatenated, stream);
        for (const auto& [name, tile] : tiles)
          row(s, "mma_" + mode + "_" + name, in, mma_run(precision, tile), unfused, stream);
        if (mode == "tf32x3")
          row(s, "simt_auto", in, [](const Problem& p, cudaStream_t st) { cuda::run_simt_gemm(p, st); }, unfused, stream);
        row(s, "cublaslt_gemm_only_" + mode, in,
            [&in, precision](const Problem& p, cudaStream_t st) {
              cuda::gemm_on_concatenated(p, in.concatenated, precision, in.gemm_workspace, st);
            },
            unfused, stream, false);
        row(s, "unfused_cublaslt_" + mode, in, unfused, unfused, stream, false);
      }
    }
  }
}

Run gett_run(const cuda::gett::Variant& variant, cuda::gett::Tuning tuning) {
  return [&variant, tuning](const Problem& p, cudaStream_t st) { variant.run(p, {}, st, tuning); };
}

struct Candidate {
  std::string name;
  Run run;
  bool check_result;
};

// The GETT family's own choice of configuration for p (gett::choose) and its scheduler settings,
// where that configuration runs p without a workspace.
void add_gett_choice(std::vector<Candidate>& candidates, const Problem& p) {
  const cuda::gett::Choice chosen = cuda::gett::choose(p);
  if (chosen.variant->why_not(p).empty() && chosen.variant->workspace_bytes(p) == 0)
    candidates.push_back(
        {std::string("gett_dispatched_") + chosen.variant->name, gett_run(*chosen.variant, chosen.tuning), true});
}

// Checks each candidate against `reference_run`, then times them all interleaved (same clocks for
// every candidate) and prints a row each.
void compare(const Shape& s, Inputs& in, const std::vector<Candidate>& candidates, const Run& reference_run,
             cudaStream_t stream) {
  std::vector<double> errors;
  std::vector<std::function<void(int)>> launches;
  for (const Candidate& c : candidates) {
    errors.push_back(c.check_result ? disagreement(in, c.run, reference_run, stream) : 0.0);
    launches.push_back([&in, &c, stream](int i) { c.run(in.sets[i], stream); });
  }
  const double flops = 2.0 * s.B * s.K * s.R * s.H;
  const int repeats = static_cast<int>(std::clamp(4e11 / flops, 10.0, 100.0));
  const auto timings = timing::time_gpu_interleaved(launches, static_cast<int>(in.sets.size()), repeats, stream);
  for (std::size_t i = 0; i < candidates.size(); ++i) print_row(s, in.dtype, candidates[i].name, timings[i], errors[i]);
}

// cuBLASLt GEMM-only on the pre-concatenated input, the unfused baseline, and the latency and
// weight-streaming kernels as dispatched, in one precision (`mode` ends each name). Beyond the
// weight-streaming kernel's rows neither of those two is compared (the latency kernel would
// take many times unfused's time there).
std::vector<Candidate> decode_comparators(Inputs& in, const Run& unfused, Fp32Precision precision,
                                          const std::string& mode) {
  std::vector<Candidate> candidates = {{"cublaslt_gemm_only_" + mode,
                                        [&in, precision](const Problem& p, cudaStream_t st) {
                                          cuda::gemm_on_concatenated(p, in.concatenated, precision,
                                                                     in.gemm_workspace, st);
                                        },
                                        false},
                                       {"unfused_cublaslt_" + mode, unfused, false}};
  if (in.sets[0].B > cuda::kWeightStreamMaxRows) return candidates;
  candidates.push_back({"latency_dispatched_" + mode,
                        [](const Problem& p, cudaStream_t st) { cuda::run_latency_kernel(p, st); }, true});
  candidates.push_back({"stream_dispatched_" + mode,
                        [precision](const Problem& p, cudaStream_t st) { cuda::run_weight_stream(p, precision, st); },
                        true});
  return candidates;
}

template <int NG, int U, cuda::mma::Mode M = cuda::mma::Mode::bf16>
Run stream_variant(cuda::WeightStreamTuning tuning = {}, bool programmatic = true) {
  return [=](const Problem& p, cudaStream_t st) { cuda::weight_stream::launch<M, NG, U>(p, st, tuning, programmatic); };
}

// The weight-streaming kernel on decode-sized problems (up to 16 rows, weights of 0.1 to 128 MB):
// its configurations in bfloat16 (steps in flight; as a programmatic launch with or without the
// L2 prefetch, letting the next kernel launch early or late; a plain launch), and its float32
// modes (exact, TF32), interleaved with cuBLASLt GEMM-only on the pre-concatenated input, the
// unfused baseline and the latency kernel.
void stream_sweep(cudaStream_t stream, const std::optional<Shape>& only) {
  std::vector<Shape> shapes = {{32, 1, 128, 4096},  {32, 4, 128, 4096},  {32, 8, 128, 4096}, {32, 16, 128, 4096},
                               {64, 1, 128, 8192},  {64, 16, 128, 8192}, {48, 4, 128, 6144}, {48, 16, 128, 6144},
                               {40, 8, 128, 5120},  {24, 16, 128, 3072}, {16, 1, 128, 2048}, {16, 16, 128, 2048},
                               {8, 16, 128, 1024},  {8, 1, 128, 1024},   {8, 8, 512, 4096},  {12, 8, 64, 768},
                               {26, 16, 128, 512},  {4, 12, 32, 56}};
  if (only) shapes = {*only};
  using cuda::DependentLaunch;
  const cuda::WeightStreamTuning early{0, true, DependentLaunch::early}, late{0, true, DependentLaunch::late},
      early_no_prefetch{0, false, DependentLaunch::early}, late_no_prefetch{0, false, DependentLaunch::late};
  for (const Shape& s : shapes) {
    Inputs in(s, DType::bfloat16, stream);
    const Run unfused = unfused_run(in, Fp32Precision::ieee);
    cuda::concatenate(in.sets[0], in.concatenated, stream);
    std::vector<Candidate> candidates = {
        {"cublaslt_gemm_only_bf16",
         [&in](const Problem& p, cudaStream_t st) {
           cuda::gemm_on_concatenated(p, in.concatenated, Fp32Precision::ieee, in.gemm_workspace, st);
         },
         false},
        {"unfused_cublaslt_bf16", unfused, false},
        {"latency_dispatched", [](const Problem& p, cudaStream_t st) { cuda::run_latency_kernel(p, st); }, true},
        {"stream_dispatched",
         [](const Problem& p, cudaStream_t st) { cuda::run_weight_stream(p, Fp32Precision::ieee, st); }, true}};
    const auto add = [&](const std::string& name, Run run) { candidates.push_back({name, std::move(run), true}); };
    if (s.B <= 8) {
      add("stream_ng1_u2", stream_variant<1, 2>(early));
      add("stream_ng1_u2_late", stream_variant<1, 2>(late));
      add("stream_ng1_u4", stream_variant<1, 4>(early));
      add("stream_ng1_u4_late", stream_variant<1, 4>(late));
      add("stream_ng1_u4_no_prefetch", stream_variant<1, 4>(early_no_prefetch));
      add("stream_ng1_u4_late_no_prefetch", stream_variant<1, 4>(late_no_prefetch));
      add("stream_ng1_u4_no_pdl", stream_variant<1, 4>({}, false));
      add("stream_ng1_u8_late", stream_variant<1, 8>(late));
    } else {
      add("stream_ng2_u2", stream_variant<2, 2>(early));
      add("stream_ng2_u2_late", stream_variant<2, 2>(late));
      add("stream_ng2_u2_no_pdl", stream_variant<2, 2>({}, false));
      add("stream_ng2_u4", stream_variant<2, 4>(early));
      add("stream_ng2_u4_late", stream_variant<2, 4>(late));
      add("stream_ng2_u4_no_prefetch", stream_variant<2, 4>(early_no_prefetch));
      add("stream_ng2_u4_late_no_prefetch", stream_variant<2, 4>(late_no_prefetch));
      add("stream_ng2_u4_no_pdl", stream_variant<2, 4>({}, false));
    }
    compare(s, in, candidates, unfused, stream);
  }
  // float32, exact (3xTF32 against SGEMM) and TF32: the kernel's configuration per row count,
  // against cuBLASLt GEMM-only, unfused and the latency kernel in the same precision.
  const Shape float32_shapes[] = {{32, 1, 128, 4096}, {32, 8, 128, 4096},  {32, 16, 128, 4096}, {16, 1, 128, 2048},
                                  {16, 16, 128, 2048}, {8, 16, 128, 1024}, {12, 8, 64, 768},   {32, 4, 128, 8192},
                                  {48, 16, 128, 6144}, {24, 16, 128, 3072}, {26, 16, 128, 512}, {8, 1, 128, 1024},
                                  {32, 4, 128, 4096},  {4, 12, 32, 56}};
  for (const Shape& s : float32_shapes) {
    if (only && !(s.R == only->R && s.B == only->B && s.H == only->H && s.K == only->K)) continue;
    Inputs in(s, DType::float32, stream);
    for (Fp32Precision precision : {Fp32Precision::ieee, Fp32Precision::tf32}) {
      const std::string mode = precision == Fp32Precision::tf32 ? "tf32" : "f32";
      const Run unfused = unfused_run(in, precision);
      cuda::concatenate(in.sets[0], in.concatenated, stream);
      std::vector<Candidate> candidates = decode_comparators(in, unfused, precision, mode);
      candidates.push_back(
          {"stream_early_" + mode,
           [precision, early](const Problem& p, cudaStream_t st) { cuda::run_weight_stream(p, precision, st, early); },
           true});
      candidates.push_back(
          {"stream_late_" + mode,
           [precision, late](const Problem& p, cudaStream_t st) { cuda::run_weight_stream(p, precision, st, late); },
           true});
      compare(s, in, candidates, unfused, stream);
    }
  }
}

// A dtype and, for float32, exact or TF32; named bf16, f16, f32 or tf32 in the candidates' names.
struct DecodeMode {
  DType dtype;
  Fp32Precision precision = Fp32Precision::ieee;
  std::string name() const {
    return dtype == DType::bfloat16  ? "bf16"
           : dtype == DType::float16 ? "f16"
           : precision == Fp32Precision::tf32 ? "tf32"
                                              : "f32";
  }
};
constexpr DecodeMode kBf16{DType::bfloat16}, kF16{DType::float16}, kExact{DType::float32},
    kTf32{DType::float32, Fp32Precision::tf32};

// One shape in each mode (by default bfloat16, exact float32 and TF32): cuBLASLt GEMM-only, the
// unfused baseline and the latency and weight-streaming kernels as dispatched, plus what
// add_candidates(candidates, problem, precision, mode name) appends, compared against unfused in
// that precision.
template <class AddCandidates>
void compare_decode_modes(const Shape& s, cudaStream_t stream, const AddCandidates& add_candidates,
                          std::initializer_list<DecodeMode> modes = {kBf16, kExact, kTf32}) {
  std::optional<Inputs> in;
  for (const DecodeMode& m : modes) {
    if (!in || in->dtype != m.dtype) {
      in.reset();
      in.emplace(s, m.dtype, stream);
    }
    const Run unfused = unfused_run(*in, m.precision);
    cuda::concatenate(in->sets[0], in->concatenated, stream);
    std::vector<Candidate> candidates = decode_comparators(*in, unfused, m.precision, m.name());
    add_candidates(candidates, in->sets[0], m.precision, m.name());
    compare(s, *in, candidates, unfused, stream);
  }
}

// The weight-streaming kernel with 17 to 32 rows over weights of 2 to 256 MB: four n8 groups per
// warp (two or four steps in flight, the next kernel launched early or late) and, for up to 24
// rows, three (two or four steps); bfloat16, exact float32 and TF32, against cuBLASLt GEMM-only on
// the pre-concatenated input, the unfused baseline, the latency kernel and the GETT as dispatched
// in the same precision.
void stream_rows_sweep(cudaStream_t stream, const std::optional<Shape>& only) {
  std::vector<Shape> shapes = {{12, 32, 64, 768},   {8, 32, 128, 1024},  {4, 32, 128, 2048},  {8, 24, 128, 2048},
                               {26, 32, 128, 512},  {16, 20, 128, 2048}, {16, 32, 128, 2048}, {32, 17, 128, 4096},
                               {32, 20, 128, 4096}, {32, 24, 128, 4096}, {32, 32, 128, 4096}, {16, 24, 128, 4096},
                               {48, 24, 128, 4096}, {24, 24, 128, 3072}, {8, 32, 512, 4096},  {48, 32, 128, 6144},
                               {48, 24, 128, 6144}, {64, 24, 128, 8192}, {64, 32, 128, 8192}};
  if (only) shapes = {*only};
  using cuda::DependentLaunch;
  using cuda::mma::Mode;
  const cuda::WeightStreamTuning early{0, true, DependentLaunch::early}, late{0, true, DependentLaunch::late};
  const auto add_modes = [&]<Mode M>(std::vector<Candidate>& candidates, const Problem& p, const std::string& mode) {
    const auto add = [&](const std::string& name, Run run) { candidates.push_back({name, std::move(run), true}); };
    add("stream_ng4_u2_" + mode, stream_variant<4, 2, M>(early));
    add("stream_ng4_u4_late_" + mode, stream_variant<4, 4, M>(late));
    if (p.B <= 24) {
      add("stream_ng3_u2_" + mode, stream_variant<3, 2, M>(early));
      add("stream_ng3_u4_" + mode, stream_variant<3, 4, M>(early));
    }
  };
  for (const Shape& s : shapes)
    compare_decode_modes(s, stream, [&](std::vector<Candidate>& candidates, const Problem& p, Fp32Precision,
                                        const std::string& mode) {
      if (mode != "f32" && cuda::gett_why_not(p, mode == "tf32" ? Fp32Precision::tf32 : Fp32Precision::ieee).empty())
        add_gett_choice(candidates, p);
      if (mode == "bf16")
        add_modes.operator()<Mode::bf16>(candidates, p, mode);
      else if (mode == "tf32")
        add_modes.operator()<Mode::tf32>(candidates, p, mode);
      else
        add_modes.operator()<Mode::tf32x3>(candidates, p, mode);
    });
}

// How many warps and blocks share each 16 outputs' reduction: 8, 12 or 16 warps per block with
// no split, and a cluster of 2, 4 or 8 blocks (of 8 or 16 warps) splitting it, where the tiles
// (one per 16 outputs) are too few to fill the GPU. bfloat16, exact float32 and TF32, 1 to 32
// rows, against cuBLASLt GEMM-only, the unfused baseline and the latency kernel.
void stream_blocks_sweep(cudaStream_t stream, const std::optional<Shape>& only) {
  std::vector<Shape> bases = {{64, 1, 128, 256},  {26, 1, 128, 512}, {52, 1, 128, 512},  {12, 1, 64, 768},
                              {8, 1, 128, 1024},  {32, 1, 128, 1024}, {16, 1, 128, 2048}, {24, 1, 128, 3072},
                              {20, 1, 128, 2560}, {32, 1, 128, 4096}, {40, 1, 128, 5120}};
  std::vector<Shape> shapes;
  for (const Shape& base : bases)
    for (std::int64_t rows : {1, 4, 16, 32}) shapes.push_back({base.R, rows, base.H, base.K});
  if (only) shapes = {*only};
  const int sms = cuda::multiprocessor_count(0);
  for (const Shape& s : shapes) {
    const std::int64_t tiles = (s.K + 15) / 16;
    const auto add_divisions = [&](std::vector<Candidate>& candidates, const Problem&, Fp32Precision precision,
                                   const std::string& mode) {
      const auto add = [&](int warps, int splits) {
        const cuda::WeightStreamTuning tuning{.warps = warps, .splits = splits};
        candidates.push_back(
            {"stream_" + std::to_string(warps) + "w_s" + std::to_string(splits) + "_" + mode,
             [precision, tuning](const Problem& p, cudaStream_t st) {
               cuda::run_weight_stream(p, precision, st, tuning);
             },
             true});
      };
      for (int warps : {8, 12, 16}) add(warps, 1);
      for (int splits : {2, 4, 8})
        if (tiles * splits <= 2 * sms) {
          add(8, splits);
          if (tiles * splits <= sms) add(16, splits);
        }
    };
    compare_decode_modes(s, stream, add_divisions);
  }
}

// GETT configurations and scheduler settings, each beside the dispatched configuration, after
// cuBLASLt GEMM-only on the pre-concatenated input, unfused and the dispatched configuration
// (bfloat16, TF32; float16 spot checks), plus exact float32 (3xTF32 mma) against SGEMM-only.
// `targets_only`: the three largest shapes, without the scheduler settings. `only`, when given,
// replaces the shape list and limits the sweep to bfloat16 (with the scheduler settings), to
// explore one shape's configurations in little GPU time.
// `only`: that shape alone, in `only_dtype`.
void gett_sweep(cudaStream_t stream, bool targets_only, const std::optional<Shape>& only, DType only_dtype) {
  namespace gett = cuda::gett;
  std::vector<Shape> shapes = {{8, 8192, 512, 4096}, {32, 8192, 128, 4096}, {4, 16384, 64, 8192}, {16, 4096, 128, 2048},
                               {8, 1024, 128, 1024}, {4, 4096, 32, 2048},   {12, 4096, 64, 768},  {32, 1024, 128, 4096}};
  if (only) shapes = {*only};
  std::vector<const gett::Variant*> variants = gett::library_variants();
  const std::size_t kShipped = variants.size();
  for (const gett::Variant& candidate : gett_candidates()) variants.push_back(&candidate);
  const std::pair<const char*, gett::Tuning> tunings[] = {
      {"sw2_m", {2, gett::Raster::along_m}}, {"sw4_m", {4, gett::Raster::along_m}}, {"sw8_m", {8, gett::Raster::along_m}},
      {"sw2_n", {2, gett::Raster::along_n}}, {"sw4_n", {4, gett::Raster::along_n}}, {"sw8_n", {8, gett::Raster::along_n}}};
  for (const Shape& s : shapes) {
    const bool target = only || s.B * s.K >= 8192 * 4096;
    if (targets_only && !target) continue;
    for (DType dtype : {DType::bfloat16, DType::float16, DType::float32}) {
      if (only && dtype != only_dtype) continue;
      const bool spot_check = dtype == DType::float16;  // same kernels as bfloat16: shipped ones only
      if (spot_check && !target) continue;
      Inputs in(s, dtype, stream);
      const Fp32Precision precision = dtype == DType::float32 ? Fp32Precision::tf32 : Fp32Precision::ieee;
      const std::string mode = dtype == DType::float32 ? "tf32" : std::string(dtype_name(dtype));
      const Run unfused = unfused_run(in, precision);
      const Problem& p0 = in.sets[0];
      cuda::concatenate(p0, in.concatenated, stream);
      const auto gemm_only = [&in, precision](const Problem& p, cudaStream_t st) {
        cuda::gemm_on_concatenated(p, in.concatenated, precision, in.gemm_workspace, st);
      };
      // Round-robin timing equalises clocks only among candidates of similar power: a round's
      // first candidate runs at the clocks its last one left. Timed first among the
      // configurations (the slowest at under half the GETT's TFLOP/s), GEMM-only took 0.85-0.89x
      // the time it takes among the comparators alone (docs/PERFORMANCE.md). So the comparators
      // are timed on their own, and each configuration in a pair with the dispatched GETT
      // (GEMM-only where it takes no part), the two alternating.
      std::vector<Candidate> comparators = {{"cublaslt_gemm_only_" + mode, gemm_only, false},
                                            {"unfused_cublaslt_" + mode, unfused, false}};
      add_gett_choice(comparators, p0);
      compare(s, in, comparators, unfused, stream);
      const Candidate pair_reference = {"pair_reference_" + comparators[comparators.size() > 2 ? 2 : 0].name,
                                        comparators[comparators.size() > 2 ? 2 : 0].run, false};
      // The scheduler's settings: on `gett` and a single shape's `gett_large`, not on the targets.
      const bool scheduler_sweep = target && !spot_check && (!targets_only || only);
      for (std::size_t i = 0; i < variants.size(); ++i) {
        const gett::Variant* v = variants[i];
        if (v->dtype != dtype || !v->why_not(p0).empty() || v->workspace_bytes(p0) != 0) continue;
        if (spot_check && i >= kShipped) continue;
        if (v->weight_rows_as_m) continue;  // their own sweep: gett_weight_rows
        std::vector<Candidate> configurations = {{std::string("gett_") + v->name, gett_run(*v, {}), true}};
        if (scheduler_sweep)
          for (const auto& [tag, tuning] : tunings)
            configurations.push_back({std::string("gett_") + v->name + "_" + tag, gett_run(*v, tuning), false});
        for (const Candidate& configuration : configurations)
          compare(s, in, {pair_reference, configuration}, unfused, stream);
      }
      if (dtype == DType::float32 && target) {  // exact float32 at scale
        const Run exact_unfused = unfused_run(in, Fp32Precision::ieee);
        cuda::concatenate(p0, in.concatenated, stream);
        compare(s, in,
                {{"cublaslt_gemm_only_sgemm",
                  [&in](const Problem& p, cudaStream_t st) {
                    cuda::gemm_on_concatenated(p, in.concatenated, Fp32Precision::ieee, in.gemm_workspace, st);
                  },
                  false},
                 {"mma_tf32x3_auto", mma_run(Fp32Precision::ieee, cuda::MmaTile::automatic), true}},
                exact_unfused, stream);
      }
    }
  }
}

// The GETT configurations with the weight's rows as M on decode-sized problems of 16 to 128 rows,
// the library's and any such candidates built in (GATHER_LINEAR_BENCH_GETT_CANDIDATES), bfloat16
// and TF32 (float16 spot checks), against cuBLASLt GEMM-only, unfused, the weight-streaming kernel
// as dispatched and the GETT family's own choice of configuration (gett::choose; the dispatcher
// may still prefer another kernel).
void gett_weight_rows_sweep(cudaStream_t stream, const std::optional<Shape>& only,
                            std::optional<DType> named_dtype) {
  namespace gett = cuda::gett;
  std::vector<Shape> shapes = {{32, 16, 128, 4096}, {32, 20, 128, 4096}, {32, 24, 128, 4096}, {32, 32, 128, 4096},
                               {32, 40, 128, 4096}, {32, 48, 128, 4096}, {32, 64, 128, 4096}, {32, 128, 128, 4096},
                               {16, 24, 128, 2048}, {16, 32, 128, 2048}, {16, 64, 128, 2048}, {24, 32, 128, 3072},
                               {48, 32, 128, 6144}, {64, 32, 128, 8192}, {64, 64, 128, 8192}, {8, 32, 128, 1024},
                               {8, 64, 512, 4096},  {12, 32, 64, 768},   {16, 48, 128, 2048}, {32, 64, 128, 2048},
                               {64, 48, 128, 1024}, {16, 64, 128, 2560}, {64, 24, 128, 1024}, {48, 48, 128, 1536},
                               {32, 24, 128, 1536}, {32, 48, 128, 1792}};
  if (only) shapes = {*only};
  // The partial sums of configurations that split the reduction: up to 16 parts of 64 x 8192.
  Workspace scratch{nullptr, std::size_t{64} << 20};
  check(cudaMalloc(&scratch.data, scratch.bytes), "cudaMalloc");
  // The library's configurations with the weight's rows as M, then any such candidates built in.
  std::vector<const gett::Variant*> variants = gett::library_variants();
  for (const gett::Variant& candidate : gett_candidates())
    if (candidate.weight_rows_as_m) variants.push_back(&candidate);
  for (const gett::Variant* v : variants)  // the persistent scheduler's grid, in clusters
    if (v->cluster_size > 1)
      std::fprintf(stderr, "# %s: %d clusters at once\n", v->name, v->clusters_at_once(0));
  const auto add_configurations = [&](std::vector<Candidate>& candidates, const Problem& p, Fp32Precision,
                                      const std::string&) {
    add_gett_choice(candidates, p);
    for (const gett::Variant* v : variants) {
      if (v->dtype != p.dtype || !v->weight_rows_as_m || !v->why_not(p).empty()) continue;
      if (!v->splits_reduction) {
        candidates.push_back({std::string("gett_") + v->name, gett_run(*v, {}), true});
        continue;
      }
      // Its own count of parts, then every other count up to two waves of blocks.
      const int own = gett::reduction_splits(p, v->tile_n, v->tile_k);
      const std::int64_t tiles = (p.K + 63) / 64 * ((p.B + v->tile_n - 1) / v->tile_n);
      for (int splits : {0, 2, 3, 4, 6, 8, 12, 16}) {
        if (splits == own || (splits > 0 && (!gett::can_split_reduction(p, splits, v->tile_k) ||
                                             tiles * splits > 2 * cuda::multiprocessor_count(0))))
          continue;
        const gett::Tuning tuning{.reduction_splits = splits};
        candidates.push_back({std::string("gett_") + v->name + "_s" + std::to_string(splits > 0 ? splits : own),
                              [v, scratch, tuning](const Problem& q, cudaStream_t st) {
                                v->run(q, scratch, st, tuning);
                              },
                              true});
      }
    }
  };
  for (const Shape& s : shapes) {
    if (named_dtype)  // one shape in the dtype its argument names
      compare_decode_modes(s, stream, add_configurations,
                           {*named_dtype == DType::float16    ? kF16
                            : *named_dtype == DType::bfloat16 ? kBf16
                                                              : kTf32});
    else if (s.K == 4096)
      compare_decode_modes(s, stream, add_configurations, {kBf16, kF16, kTf32});
    else
      compare_decode_modes(s, stream, add_configurations, {kBf16, kTf32});
  }
  cudaFree(scratch.data);
}

// Host microseconds per call (median, the GPU never waited on): the device-pointer checks alone,
// and forward() end to end (validation, dispatch, launch) for the latency kernel, the GETT and the
// unfused baseline. Separate CSV: step,R,B,H,K,dtype,host_us.
void host_sweep(cudaStream_t stream) {
  std::printf("step,R,B,H,K,dtype,host_us\n");
  struct Step {
    const char* name;
    Shape shape;
    DType dtype;
    const char* kernel;  // null: the device-pointer checks alone
    Fp32Precision precision;
  };
  const Step steps[] = {
      {"check_device_arguments", {4, 12, 32, 56}, DType::float32, nullptr, Fp32Precision::ieee},
      {"forward_auto", {4, 12, 32, 56}, DType::float32, "auto", Fp32Precision::ieee},
      {"forward_cuda_latency", {4, 12, 32, 56}, DType::float32, "cuda_latency", Fp32Precision::ieee},
      {"forward_cuda_unfused_cublaslt", {4, 12, 32, 56}, DType::float32, "cuda_unfused_cublaslt", Fp32Precision::ieee},
      {"forward_cuda_gett_sm90", {8, 1024, 128, 1024}, DType::bfloat16, "cuda_gett_sm90", Fp32Precision::ieee},
      {"forward_cuda_gett_sm90", {8, 1024, 128, 1024}, DType::float32, "cuda_gett_sm90", Fp32Precision::tf32},
  };
  for (const Step& step : steps) {
    Inputs in(step.shape, step.dtype, stream);
    const Problem& p = in.sets[0];
    const auto dev = Device::cuda(0);
    const Shape& s = step.shape;
    const TensorView x = TensorView::contiguous(const_cast<void*>(p.x), step.dtype, dev, {s.R, s.B, s.H});
    const TensorView w = TensorView::contiguous(const_cast<void*>(p.weight), step.dtype, dev, {s.K, s.R * s.H});
    const TensorView b = TensorView::contiguous(const_cast<void*>(p.bias), step.dtype, dev, {s.K});
    const TensorView y = TensorView::contiguous(p.y, step.dtype, dev, {s.B, s.K});
    Options options;
    if (step.kernel != nullptr) options.kernel = step.kernel;
    options.fp32_precision = step.precision;
    const std::function<void()> call = step.kernel == nullptr
                                           ? std::function<void()>([&] { cuda::check_device_arguments(p); })
                                           : std::function<void()>([&] { forward(x, w, b, y, options, stream); });
    double us = 0;
    for (int batch = 0; batch < 10; ++batch) {  // short batches keep the launch queue shallow
      us += timing::time_cpu_us(call, 100) / 10;
      check(cudaStreamSynchronize(stream), "host sweep");
    }
    std::printf("%s,%lld,%lld,%lld,%lld,%s,%.3f\n", step.name, (long long)s.R, (long long)s.B, (long long)s.H,
                (long long)s.K, std::string(dtype_name(step.dtype)).c_str(), us);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace gather_linear::bench

int main(int argc, char** argv) {
  using namespace gather_linear::bench;
  using gather_linear::DType;
  const std::string which = argc > 1 ? argv[1] : "all";
  // Parsed before any sweep runs, so that a malformed shape fails at once.
  std::optional<Shape> only;
  DType only_dtype = DType::bfloat16;
  std::optional<DType> named_dtype;  // only_dtype where the argument names it
  if (argc > 2) {
    Shape s{};
    char dtype[8] = "bf16";
    const int fields =
        std::sscanf(argv[2], "%" SCNd64 ",%" SCNd64 ",%" SCNd64 ",%" SCNd64 ",%7s", &s.R, &s.B, &s.H, &s.K, dtype);
    const std::string tag(dtype);
    if (fields < 4 || (tag != "bf16" && tag != "f16" && tag != "tf32")) {
      std::fprintf(stderr, "kernel_variants: expected the shape as R,B,H,K[,bf16|f16|tf32], got '%s'\n", argv[2]);
      return 2;
    }
    only_dtype = tag == "tf32" ? DType::float32 : tag == "f16" ? DType::float16 : DType::bfloat16;
    only = s;
    if (fields == 5) named_dtype = only_dtype;
  }
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (which == "host") {
    host_sweep(stream);
    return 0;
  }
  if (which == "latency_cold") {
    latency_cold_sweep(stream);
    return 0;
  }
  std::printf("R,B,H,K,dtype,variant,graph_us,event_us,tflops,rel_diff\n");
  if (which == "latency" || which == "all") latency_sweep(stream);
  if (which == "gemm" || which == "all") gemm_sweep(stream, false);
  if (which == "gemm_exact") gemm_sweep(stream, true);
  if (which == "stream" || which == "all") stream_sweep(stream, only);
  if (which == "stream_rows" || which == "all") stream_rows_sweep(stream, only);
  if (which == "stream_blocks" || which == "all") stream_blocks_sweep(stream, only);
  if (which == "gett" || which == "all") gett_sweep(stream, false, only, only_dtype);
  if (which == "gett_large") gett_sweep(stream, true, only, only_dtype);
  if (which == "gett_weight_rows" || which == "all") gett_weight_rows_sweep(stream, only, named_dtype);
  return 0;
}
