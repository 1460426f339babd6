// AVX2 helpers the CPU code shares, compiled for AVX2 and F16C whatever the translation unit's
// target (callers run them only where the processor has both): 8-wide widening of float32,
// float16 and bfloat16 to float32, for the AVX2 engine's packing and the backward's bias sums.
#pragma once

#include <type_traits>

#include "core/numeric.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#define GATHER_LINEAR_HAS_AVX2_HELPERS 1

namespace gather_linear::cpu {

#pragma GCC push_options
#pragma GCC target("avx2,f16c")
// 8 consecutive float32, float16 or bfloat16 values from src as float32, exactly (VCVTPH2PS for
// float16, a shift for bfloat16).
template <class In>
inline __m256 load8_as_float(const In* src) {
  static_assert(std::is_same_v<In, float> || std::is_same_v<In, Half> || std::is_same_v<In, BFloat16>);
  if constexpr (std::is_same_v<In, float>) {
    return _mm256_loadu_ps(src);
  } else {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    if constexpr (std::is_same_v<In, Half>) return _mm256_cvtph_ps(bits);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
}
#pragma GCC pop_options

}  // namespace gather_linear::cpu

#endif
