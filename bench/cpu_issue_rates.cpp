// How often one core issues a 512-bit float32 FMA and a 512-bit VDPBF16PS (AVX512-BF16's pair dot
// product), each in 12 independent accumulator chains (enough to cover either's latency): the
// ratio decides whether the bfloat16 dot kernel can outrun the float32 engine on bfloat16 widened
// to float32 (cpu::bf16_dot_packed_beats_engine). A VDPBF16PS does 32 multiply-adds, an FMA 16.
//
//   cpu_issue_rates        (one thread; prints G instructions/s and GFLOP/s for each, three times)
#include <chrono>
#include <cstdio>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// Only these kernels use AVX-512 (main checks the processor first).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16")

namespace {

// Keeps the accumulators in registers and each step's result live (no folding across steps).
#define KEEP(a0, a1, a2, a3, a4, a5) asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5))

template <class Step>
inline float chains(long steps, Step step) {
  __m512 a0 = _mm512_set1_ps(0.f), a1 = _mm512_set1_ps(1e-3f), a2 = _mm512_set1_ps(2e-3f),
         a3 = _mm512_set1_ps(3e-3f), a4 = _mm512_set1_ps(4e-3f), a5 = _mm512_set1_ps(5e-3f),
         a6 = _mm512_set1_ps(6e-3f), a7 = _mm512_set1_ps(7e-3f), a8 = _mm512_set1_ps(8e-3f),
         a9 = _mm512_set1_ps(9e-3f), a10 = _mm512_set1_ps(1e-2f), a11 = _mm512_set1_ps(1.1e-2f);
  for (long i = 0; i < steps; ++i) {
    a0 = step(a0), a1 = step(a1), a2 = step(a2), a3 = step(a3), a4 = step(a4), a5 = step(a5);
    a6 = step(a6), a7 = step(a7), a8 = step(a8), a9 = step(a9), a10 = step(a10), a11 = step(a11);
    KEEP(a0, a1, a2, a3, a4, a5);
    KEEP(a6, a7, a8, a9, a10, a11);
  }
  const __m512 sum = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (const float lane : lanes) total += lane;
  return total;
}

__attribute__((noinline)) float fma_chains(long steps) {
  const __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
  return chains(steps, [&](__m512 a) { return _mm512_fmadd_ps(a, b, c); });
}

__attribute__((noinline)) float dot_chains(long steps) {
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f80), c = (__m512bh)_mm512_set1_epi16(0x3380);
  return chains(steps, [&](__m512 a) { return _mm512_dpbf16_ps(a, b, c); });
}

}  // namespace
#pragma GCC pop_options

namespace {

template <class F>
double seconds(F f, long steps) {
  const auto start = std::chrono::steady_clock::now();
  volatile float sink = f(steps);
  (void)sink;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main() {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) {
    std::puts("cpu_issue_rates: needs AVX-512 and AVX512-BF16");
    return 2;
  }
  constexpr long kSteps = 100'000'000;
  constexpr double kInstructions = 12.0 * kSteps;
  for (int round = 0; round < 3; ++round) {
    const double fma = seconds(fma_chains, kSteps), dot = seconds(dot_chains, kSteps);
    std::printf("FMA zmm %.2f G/s (%.1f GFLOP/s)   VDPBF16PS zmm %.2f G/s (%.1f GFLOP/s)\n", kInstructions / fma / 1e9,
                kInstructions * 32 / fma / 1e9, kInstructions / dot / 1e9, kInstructions * 64 / dot / 1e9);
  }
}
#else
int main() {
  std::puts("cpu_issue_rates: x86-64 only");
  return 2;
}
#endif
