// Measures the design choices inside the CUDA kernels, one CSV row per (shape, variant):
//   - the latency kernel's outputs per warp (TB x TK) on small problems, against an empty
//     kernel (the launch floor), the dispatched choice and the unfused baseline;
//   - the tensor-core kernel's block tile (exact float32 as 3xTF32, TF32, bfloat16) and the SIMT
//     kernel on larger problems, against cuBLASLt GEMM-only and the unfused baseline.
// Each variant is checked against the unfused baseline's result before it is timed.
// Times: median per forward over CUDA-graph replays, rotating input sets past L2.
//
//   kernel_variants [latency|gemm|gemm_exact|all]   > variants.csv
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/validate.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/latency_kernel.cuh"
#include "cuda/latency_kernel.hpp"
#include "cuda/mma_gemm_kernel.hpp"
#include "cuda/simt_gemm_kernel.hpp"
#include "cuda/unfused_cublaslt.hpp"
#include "timing.hpp"

namespace gather_linear::bench {
namespace {

using cuda::check;

template <class T>
__global__ void fill_uniform(T* p, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    p[i] = cuda::from_float<T>(static_cast<float>(h & 0xffffu) / 65536.f - 0.5f);
  }
}
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
  Inputs(const Shape& s, DType dtype_, cudaStream_t stream) : dtype(dtype_), element(dtype_size(dtype_)) {
    const std::size_t nx = s.R * s.B * s.H, nw = s.K * s.R * s.H, bytes = element * (nx + nw + s.K);
    const int count = static_cast<int>(std::clamp<std::size_t>(2 * timing::gpu_l2_bytes(0) / bytes + 1, 1, 64));
    y = alloc(s.B * s.K);
    concatenated = alloc(nx);
    for (int i = 0; i < count; ++i) {
      void *x = alloc(nx), *w = alloc(nw), *b = alloc(s.K);
      cuda::visit_device_dtype(dtype, [&]<class T>() {
        fill_uniform<<<1024, 256, 0, stream>>>(static_cast<T*>(x), nx, 3 * i + 1);
        fill_uniform<<<1024, 256, 0, stream>>>(static_cast<T*>(w), nw, 3 * i + 2);
        fill_uniform<<<1024, 256, 0, stream>>>(static_cast<T*>(b), s.K, 3 * i + 3);
      });
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
  std::vector<float> download_y(std::size_t n) const {
    std::vector<float> h(n);
    cuda::visit_device_dtype(dtype, [&]<class T>() {
      std::vector<T> raw(n);
      check(cudaMemcpy(raw.data(), y, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
      for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<float>(raw[i]);
    });
    return h;
  }
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

void row(const Shape& s, const std::string& variant, Inputs& in, const Run& run, const Run& reference_run,
         cudaStream_t stream, bool check_result = true, int max_sets = 64) {
  const double err = check_result ? disagreement(in, run, reference_run, stream) : 0.0;
  const double flops = 2.0 * s.B * s.K * s.R * s.H;
  const int repeats = static_cast<int>(std::clamp(2e10 / flops, 10.0, 200.0));
  const int sets = std::min(static_cast<int>(in.sets.size()), max_sets);
  const auto t = timing::time_gpu([&](int i) { run(in.sets[i], stream); }, sets, repeats, stream);
  std::printf("%lld,%lld,%lld,%lld,%s,%s,%.3f,%.3f,%.2f,%.1e\n", (long long)s.R, (long long)s.B, (long long)s.H,
              (long long)s.K, std::string(dtype_name(in.dtype)).c_str(), variant.c_str(), t.graph_us, t.event_us,
              flops / t.graph_us / 1e6, err);
  std::fflush(stdout);
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
    cuda::gemm_on_concatenated(p, in.concatenated, precision, st);
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
              cuda::gemm_on_concatenated(p, in.concatenated, precision, st);
            },
            unfused, stream, false);
        row(s, "unfused_cublaslt_" + mode, in, unfused, unfused, stream, false);
      }
    }
  }
}

}  // namespace
}  // namespace gather_linear::bench

int main(int argc, char** argv) {
  using namespace gather_linear::bench;
  const std::string which = argc > 1 ? argv[1] : "all";
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::printf("R,B,H,K,dtype,variant,graph_us,event_us,tflops,rel_diff\n");
  if (which == "latency" || which == "all") latency_sweep(stream);
  if (which == "gemm" || which == "all") gemm_sweep(stream, false);
  if (which == "gemm_exact") gemm_sweep(stream, true);
  return 0;
}
