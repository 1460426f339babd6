// Host-side 16-bit float storage types and their conversions (round to nearest even).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "gather_linear/tensor_view.hpp"

namespace gather_linear {

struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};

inline float to_float(Half h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  const std::uint32_t bits = exponent == 0x1f ? sign | 0x7f800000u | (mantissa << 13)
                                              : sign | ((exponent + 112u) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

inline Half to_half(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u)  // infinity, or NaN (kept quiet)
    return {static_cast<std::uint16_t>(sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u))};
  if (magnitude >= 0x477ff000u) return {static_cast<std::uint16_t>(sign | 0x7c00u)};  // >= 65520 rounds to inf
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half; scaling by 2^24 is exact
    const float scaled = std::bit_cast<float>(magnitude) * 0x1p24f;
    return {static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(scaled)))};
  }
  std::uint32_t half = ((((magnitude >> 23) - 112u) << 10) | ((magnitude >> 13) & 0x3ffu));
  const std::uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry correctly bumps the exponent
  return {static_cast<std::uint16_t>(sign | half)};
}

inline float to_float(BFloat16 b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b.bits) << 16); }

inline BFloat16 to_bfloat16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {static_cast<std::uint16_t>((bits >> 16) | 0x0040u)};  // quiet NaN
  const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return {static_cast<std::uint16_t>(rounded >> 16)};
}

// Uniform conversions for templated kernels: load any storage type as T, store T as any.
template <class T> inline T load_as(float v) { return static_cast<T>(v); }
template <class T> inline T load_as(double v) { return static_cast<T>(v); }
template <class T> inline T load_as(Half v) { return static_cast<T>(to_float(v)); }
template <class T> inline T load_as(BFloat16 v) { return static_cast<T>(to_float(v)); }

template <class Storage> inline Storage store_as(double v);
template <> inline float store_as<float>(double v) { return static_cast<float>(v); }
template <> inline double store_as<double>(double v) { return v; }
// double -> float rounded to odd: toward zero, with the last bit set if anything was dropped.
// Rounding that float to nearest in a format at least two significand bits narrower (half,
// bfloat16) gives the double correctly rounded; going through the nearest float instead can
// round twice (a double just above a half-way point lands exactly on it, and ties go to even).
inline float to_float_rounded_to_odd(double v) {
  float f = static_cast<float>(v);
  if (!std::isfinite(f) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v))  // a step toward zero (f is finite, not 0)
    f = std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) - 1u);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1u);
}
template <> inline Half store_as<Half>(double v) { return to_half(to_float_rounded_to_odd(v)); }
template <> inline BFloat16 store_as<BFloat16>(double v) { return to_bfloat16(to_float_rounded_to_odd(v)); }

}  // namespace gather_linear

namespace gather_linear {

// Calls f.template operator()<Storage>() with the host storage type of a floating dtype.
// Callers have validated the dtype; anything else is a programming error.
template <class F> decltype(auto) visit_floating_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::float16: return f.template operator()<Half>();
    case DType::bfloat16: return f.template operator()<BFloat16>();
    case DType::float64: return f.template operator()<double>();
    default: return f.template operator()<float>();
  }
}

}  // namespace gather_linear
