// Times two copies of the CPU engine call by call in one process (cpu_engine_ab.sh builds it):
// a noisy machine (a shared VM's other tenants, its clock) then slows both alike, where separate
// processes minutes apart differed by 20-30%. Prints one CSV row: the shape, each copy's median
// time, and quartiles of the per-pair ratio b / a; the order inside a pair alternates.
//   cpu_engine_ab R B H K DTYPE PAIRS        (DTYPE: f32, f16 or bf16)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "core/problem.hpp"

using namespace gather_linear;

extern "C" void engine_a_run(const void* problem);
extern "C" void engine_b_run(const void* problem);
extern "C" std::size_t cpu_engine_ab_dtype_size(int dtype) { return dtype_size(static_cast<DType>(dtype)); }

namespace {

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s R B H K f32|f16|bf16 PAIRS\n", argv[0]);
    return 2;
  }
  const std::int64_t R = std::atol(argv[1]), B = std::atol(argv[2]), H = std::atol(argv[3]), K = std::atol(argv[4]);
  const std::string dtype_name = argv[5];
  const int pairs = std::atoi(argv[6]);
  const DType dtype = dtype_name == "f16" ? DType::float16 : dtype_name == "bf16" ? DType::bfloat16 : DType::float32;
  const std::size_t size = dtype_size(dtype);
  std::vector<std::byte> x(R * B * H * size), w(K * R * H * size), bias(K * size), y_a(B * K * size), y_b(B * K * size);
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> uniform(-1, 1);
  visit_floating_dtype(dtype, [&]<class T>() {
    for (auto* v : {&x, &w, &bias})
      for (std::size_t i = 0; i < v->size() / sizeof(T); ++i) {
        const T t = store_as<T>(uniform(rng));
        std::memcpy(v->data() + i * sizeof(T), &t, sizeof(T));
      }
  });
  Problem p;
  p.R = R, p.B = B, p.H = H, p.K = K, p.RH = R * H, p.dtype = dtype, p.device = Device::cpu();
  p.x = x.data(), p.x_stride_r = B * H, p.x_stride_b = H, p.x_stride_h = 1;
  p.weight = w.data(), p.weight_stride_k = R * H, p.bias = bias.data(), p.y_stride_b = K;
  Problem pa = p, pb = p;
  pa.y = y_a.data(), pb.y = y_b.data();

  const auto time_us = [](auto&& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  };
  engine_a_run(&pa);  // warm-up: scratch buffers, threads
  engine_b_run(&pb);
  const bool same = y_a == y_b;
  std::vector<double> ta, tb, ratio;
  for (int i = 0; i < pairs; ++i) {
    double a = 0, b = 0;
    if (i % 2 == 0) {
      a = time_us([&] { engine_a_run(&pa); });
      b = time_us([&] { engine_b_run(&pb); });
    } else {
      b = time_us([&] { engine_b_run(&pb); });
      a = time_us([&] { engine_a_run(&pa); });
    }
    ta.push_back(a), tb.push_back(b), ratio.push_back(b / a);
  }
  std::printf("%lld,%lld,%lld,%lld,%s,%d,%.1f,%.1f,%.3f,%.3f,%.3f,%s\n", (long long)R, (long long)B, (long long)H,
              (long long)K, dtype_name.c_str(), pairs, quantile(ta, 0.5), quantile(tb, 0.5), quantile(ratio, 0.25),
              quantile(ratio, 0.5), quantile(ratio, 0.75), same ? "same" : "different");
}
