// Times two copies of the CPU engine call by call in one process (cpu_engine_ab.sh builds it):
// a noisy machine (a shared VM's other tenants, its clock) then slows both alike, where separate
// processes minutes apart differed by 20-30% (alternating_pairs.hpp). Prints one CSV row: the
// shape, each copy's median time, and quartiles of the per-pair ratio b / a. MODE head_major
// times the forward on x viewed from a (B, R, H) buffer; grad_x or grad_weight the backward's
// problem for that gradient instead of the forward.
//   cpu_engine_ab R B H K DTYPE PAIRS [MODE]   (DTYPE: f32, f64, f16 or bf16)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "alternating_pairs.hpp"
#include "core/numeric.hpp"
#include "core/problem.hpp"

using namespace gather_linear;
using bench::quantile;

extern "C" void engine_a_run(const void* problem);
extern "C" void engine_b_run(const void* problem);
extern "C" std::size_t cpu_engine_ab_dtype_size(int dtype) { return dtype_size(static_cast<DType>(dtype)); }

int main(int argc, char** argv) {
  if (argc != 7 && argc != 8) {
    std::fprintf(stderr, "usage: %s R B H K f32|f64|f16|bf16 PAIRS [forward|grad_x|grad_weight]\n", argv[0]);
    return 2;
  }
  const std::int64_t R = std::atol(argv[1]), B = std::atol(argv[2]), H = std::atol(argv[3]), K = std::atol(argv[4]);
  const std::string dtype_name = argv[5];
  const int pairs = std::atoi(argv[6]);
  const DType dtype = dtype_name == "f16"    ? DType::float16
                      : dtype_name == "bf16" ? DType::bfloat16
                      : dtype_name == "f64"  ? DType::float64
                                             : DType::float32;
  const std::size_t size = dtype_size(dtype);
  HostBytes x(R * B * H * size), w(K * R * H * size), bias(K * size), y_a(B * K * size), y_b(B * K * size);
  bench::fill_uniform(dtype, {&x, &w, &bias});
  Problem p;
  p.R = R, p.B = B, p.H = H, p.K = K, p.RH = R * H, p.dtype = dtype, p.device = Device::cpu();
  p.x = x.data(), p.x_stride_r = B * H, p.x_stride_b = H, p.x_stride_h = 1;
  p.weight = w.data(), p.weight_stride_k = R * H, p.bias = bias.data(), p.y_stride_b = K;
  // The backward's problems as src/cpu/backward.cpp poses them, over transposed views; x taken as
  // head-major, so that grad_weight reads it in place.
  HostBytes gy(B * K * size);
  bench::fill_uniform(dtype, {&gy});
  const std::string mode = argc > 7 ? argv[7] : "forward";
  if (mode != "forward" && mode != "head_major" && mode != "grad_x" && mode != "grad_weight") {
    std::fprintf(stderr, "MODE: expected forward, head_major, grad_x or grad_weight, got %s\n", mode.c_str());
    return 2;
  }
  if (mode == "head_major") p.x_stride_r = H, p.x_stride_b = R * H;
  if (mode != "forward" && mode != "head_major") {
    Problem g;
    g.R = 1, g.dtype = dtype, g.device = Device::cpu(), g.bias = nullptr, g.x_stride_r = 0;
    if (mode == "grad_x") {  // the unsplit gradient of x: (B, RH) = grad_y (B, K) * W (K, RH)
      g.B = B, g.H = g.RH = K, g.K = R * H;
      g.x = gy.data(), g.x_stride_b = K, g.x_stride_h = 1;
      g.weight = w.data(), g.weight_stride_k = 1, g.weight_stride_c = R * H;
      g.y_stride_b = R * H;
    } else {  // grad_weight: (K, RH) = grad_y^T (K, B) * cat (B, RH), cat = head-major x in place
      g.B = K, g.H = g.RH = B, g.K = R * H;
      g.x = gy.data(), g.x_stride_b = 1, g.x_stride_h = K;
      g.weight = x.data(), g.weight_stride_k = 1, g.weight_stride_c = R * H;
      g.y_stride_b = R * H;
    }
    p = g;
    y_a.resize(g.B * g.K * size), y_b.resize(g.B * g.K * size);
  }
  Problem pa = p, pb = p;
  pa.y = y_a.data(), pb.y = y_b.data();

  const bench::PairTimes t =
      bench::time_alternating_pairs(pairs, [&] { engine_a_run(&pa); }, [&] { engine_b_run(&pb); });
  const bool same = y_a == y_b;
  std::printf("%lld,%lld,%lld,%lld,%s,%d,%.1f,%.1f,%.3f,%.3f,%.3f,%s\n", (long long)R, (long long)B, (long long)H,
              (long long)K, dtype_name.c_str(), pairs, quantile(t.a_us, 0.5), quantile(t.b_us, 0.5), quantile(t.ratio, 0.25),
              quantile(t.ratio, 0.5), quantile(t.ratio, 0.75), same ? "same" : "different");
}
