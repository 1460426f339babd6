// Measures the design choices inside the CUDA kernels, one CSV row per (shape, variant):
//   - the latency kernel's outputs per warp (TB x TK) on small problems, against an empty
//     kernel (the launch floor), the dispatched choice and the unfused baseline;
//   - the SIMT kernel's block tile on larger float32 problems, against cuBLASLt GEMM-only.
// Each variant is checked against the dispatched kernel's result before it is timed.
// Times: median per forward over CUDA-graph replays, rotating input sets past L2.
//
//   kernel_variants [latency|simt|all]   > variants.csv
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
#include "cuda/simt_gemm_kernel.hpp"
#include "cuda/unfused_cublaslt.hpp"
#include "timing.hpp"

namespace gather_linear::bench {
namespace {

using cuda::check;

__global__ void fill_uniform(float* p, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    p[i] = static_cast<float>(h & 0xffffu) / 65536.f - 0.5f;
  }
}
__global__ void empty_kernel() {}

struct Shape {
  std::int64_t R, B, H, K;
};

// Input sets on the device (float32, x contiguous), enough of them to span twice the L2.
struct Inputs {
  std::vector<float*> allocations;
  std::vector<Problem> sets;
  float* y = nullptr;
  float* concatenated = nullptr;
  Inputs(const Shape& s, cudaStream_t stream) {
    const std::size_t nx = s.R * s.B * s.H, nw = s.K * s.R * s.H, bytes = 4 * (nx + nw + s.K);
    const int count = static_cast<int>(std::clamp<std::size_t>(2 * timing::gpu_l2_bytes(0) / bytes + 1, 1, 64));
    y = alloc(s.B * s.K);
    concatenated = alloc(nx);
    for (int i = 0; i < count; ++i) {
      float *x = alloc(nx), *w = alloc(nw), *b = alloc(s.K);
      fill_uniform<<<1024, 256, 0, stream>>>(x, nx, 3 * i + 1);
      fill_uniform<<<1024, 256, 0, stream>>>(w, nw, 3 * i + 2);
      fill_uniform<<<1024, 256, 0, stream>>>(b, s.K, 3 * i + 3);
      const auto dev = Device::cuda(0);
      sets.push_back(validate_forward_args(TensorView::contiguous(x, DType::float32, dev, {s.R, s.B, s.H}),
                                           TensorView::contiguous(w, DType::float32, dev, {s.K, s.R * s.H}),
                                           TensorView::contiguous(b, DType::float32, dev, {s.K}),
                                           TensorView::contiguous(y, DType::float32, dev, {s.B, s.K})));
    }
    check(cudaStreamSynchronize(stream), "fill");
  }
  ~Inputs() {
    for (float* p : allocations) cudaFree(p);
  }
  float* alloc(std::size_t n) {
    float* p = nullptr;
    check(cudaMalloc(&p, std::max<std::size_t>(n, 1) * 4), "cudaMalloc");
    allocations.push_back(p);
    return p;
  }
  std::vector<float> download_y(std::size_t n) const {
    std::vector<float> h(n);
    check(cudaMemcpy(h.data(), y, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
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
  check(cudaMemsetAsync(in.y, 0xff, n * 4, stream), "poison");
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
         cudaStream_t stream, bool check_result = true) {
  const double err = check_result ? disagreement(in, run, reference_run, stream) : 0.0;
  const double flops = 2.0 * s.B * s.K * s.R * s.H;
  const int repeats = static_cast<int>(std::clamp(2e10 / flops, 10.0, 200.0));
  const int sets = static_cast<int>(in.sets.size());
  const auto t = timing::time_gpu([&](int i) { run(in.sets[i], stream); }, sets, repeats, stream);
  std::printf("%lld,%lld,%lld,%lld,%s,%.3f,%.3f,%.2f,%.1e\n", (long long)s.R, (long long)s.B, (long long)s.H,
              (long long)s.K, variant.c_str(), t.graph_us, t.event_us, flops / t.graph_us / 1e6, err);
  std::fflush(stdout);
}

template <int TB, int TK>
Run latency_variant() {
  return [](const Problem& p, cudaStream_t s) { cuda::latency::launch<float, 4, TB, TK>(p, s); };
}

void latency_sweep(cudaStream_t stream) {
  const Shape shapes[] = {{4, 12, 32, 56}, {4, 12, 32, 57}, {4, 12, 32, 112}, {4, 12, 32, 168}, {4, 24, 32, 56},
                          {8, 32, 64, 128}, {4, 64, 32, 256}, {8, 64, 128, 256}, {16, 128, 64, 128}, {8, 256, 64, 256}};
  for (const Shape& s : shapes) {
    Inputs in(s, stream);
    const Run simt = [](const Problem& p, cudaStream_t st) { cuda::run_simt_gemm(p, st); };
    row(s, "empty_kernel", in, [](const Problem&, cudaStream_t st) { empty_kernel<<<1, 32, 0, st>>>(); }, simt, stream,
        false);
    row(s, "latency_1x1", in, latency_variant<1, 1>(), simt, stream);
    row(s, "latency_1x2", in, latency_variant<1, 2>(), simt, stream);
    row(s, "latency_2x1", in, latency_variant<2, 1>(), simt, stream);
    row(s, "latency_2x2", in, latency_variant<2, 2>(), simt, stream);
    row(s, "latency_1x4", in, latency_variant<1, 4>(), simt, stream);
    row(s, "latency_4x1", in, latency_variant<4, 1>(), simt, stream);
    row(s, "latency_2x4", in, latency_variant<2, 4>(), simt, stream);
    row(s, "latency_4x4", in, latency_variant<4, 4>(), simt, stream);
    row(s, "simt_auto", in, simt, simt, stream, false);
    row(s, "unfused_cublaslt", in,
        [&](const Problem& p, cudaStream_t st) {
          cuda::concatenate(p, in.concatenated, st);
          cuda::gemm_on_concatenated(p, in.concatenated, Fp32Precision::ieee, st);
        },
        simt, stream);
  }
}

void simt_sweep(cudaStream_t stream) {
  const Shape shapes[] = {{8, 256, 64, 512},    {8, 512, 128, 512},   {8, 1024, 128, 1024}, {32, 2048, 64, 1024},
                          {4, 4096, 32, 2048},  {16, 4096, 128, 2048}, {12, 4096, 64, 768},  {8, 8192, 128, 1024},
                          {8, 4096, 512, 4096}, {32, 8192, 128, 4096}};
  for (const Shape& s : shapes) {
    Inputs in(s, stream);
    const Run gemm_only = [&](const Problem& p, cudaStream_t st) {
      cuda::gemm_on_concatenated(p, in.concatenated, Fp32Precision::ieee, st);
    };
    cuda::concatenate(in.sets[0], in.concatenated, stream);
    const Run unfused = [&](const Problem& p, cudaStream_t st) {
      cuda::concatenate(p, in.concatenated, st);
      cuda::gemm_on_concatenated(p, in.concatenated, Fp32Precision::ieee, st);
    };
    using cuda::SimtTile;
    for (auto [name, tile] : {std::pair{"simt_128x128", SimtTile::rows128_cols128},
                              std::pair{"simt_128x64", SimtTile::rows128_cols64},
                              std::pair{"simt_64x64", SimtTile::rows64_cols64}, std::pair{"simt_auto", SimtTile::automatic}})
      row(s, name, in, [tile](const Problem& p, cudaStream_t st) { cuda::run_simt_gemm(p, st, tile); }, unfused, stream);
    row(s, "cublaslt_gemm_only", in, gemm_only, unfused, stream, false);
    row(s, "unfused_cublaslt", in, unfused, unfused, stream, false);
  }
}

}  // namespace
}  // namespace gather_linear::bench

int main(int argc, char** argv) {
  using namespace gather_linear::bench;
  const std::string which = argc > 1 ? argv[1] : "all";
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::printf("R,B,H,K,variant,graph_us,event_us,tflops,rel_diff\n");
  if (which == "latency" || which == "all") latency_sweep(stream);
  if (which == "simt" || which == "all") simt_sweep(stream);
  return 0;
}
