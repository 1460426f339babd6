// What the CPU A/B tools (cpu_kernel_ab, cpu_engine_ab) share: inputs filled the same way, and two
// candidates timed in alternating pairs in one process. On a shared VM separate runs minutes apart
// differed by 20-30%, while the two calls of a pair see the same machine; the order inside a pair
// alternates so that neither always runs first. Buffers are 64-byte aligned, as PyTorch's are
// (host_buffer.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "core/numeric.hpp"
#include "host_buffer.hpp"

namespace gather_linear::bench {

// Each buffer filled with uniform values in [-1, 1) rounded to dtype, from one fixed seed.
inline void fill_uniform(DType dtype, std::initializer_list<HostBytes*> buffers) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> uniform(-1, 1);
  visit_floating_dtype(dtype, [&]<class T>() {
    for (auto* v : buffers)
      for (std::size_t i = 0; i < v->size() / sizeof(T); ++i) {
        const T t = store_as<T>(uniform(rng));
        std::memcpy(v->data() + i * sizeof(T), &t, sizeof(T));
      }
  });
}

inline double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

struct PairTimes {
  std::vector<double> a_us, b_us, ratio;  // ratio: b / a within each pair
};

// `pairs` pairs of one call of run_a and one of run_b (after one warm-up call of each), wall clock.
template <class RunA, class RunB>
PairTimes time_alternating_pairs(int pairs, RunA&& run_a, RunB&& run_b) {
  const auto time_us = [](auto&& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  };
  run_a();  // warm-up: scratch buffers, threads
  run_b();
  PairTimes t;
  for (int i = 0; i < pairs; ++i) {
    double a = 0, b = 0;
    if (i % 2 == 0) {
      a = time_us(run_a);
      b = time_us(run_b);
    } else {
      b = time_us(run_b);
      a = time_us(run_a);
    }
    t.a_us.push_back(a), t.b_us.push_back(b), t.ratio.push_back(b / a);
  }
  return t;
}

}  // namespace gather_linear::bench
