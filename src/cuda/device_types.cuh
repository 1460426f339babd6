// Device element types for each dtype, float conversions, and 16-byte vector loads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gather_linear/tensor_view.hpp"

namespace gather_linear::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Elements of T in one 16-byte access.
template <class T> inline constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

// Loads N consecutive elements (N * sizeof(T) is 16 bytes, or N == 1) widened to float.
template <class T, int N>
__device__ __forceinline__ void load_as_float(const T* __restrict__ p, float (&out)[N]) {
  if constexpr (N == 1) {
    out[0] = to_float(__ldg(p));
  } else {
    static_assert(N * sizeof(T) == 16, "vector loads are 16 bytes");
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_float(v[i]);
  }
}

// Calls f.template operator()<T>() with the device type of a dtype the CUDA kernels support
// (float32, float16, bfloat16); callers have checked the dtype.
template <class F> decltype(auto) visit_device_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::float16: return f.template operator()<__half>();
    case DType::bfloat16: return f.template operator()<__nv_bfloat16>();
    default: return f.template operator()<float>();
  }
}

inline bool aligned_to(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

}  // namespace gather_linear::cuda

#include "core/problem.hpp"

namespace gather_linear::cuda {

// True when every group of n consecutive reduction indices starting at a multiple of n lies
// in one slice of x, contiguous and 16-byte aligned there and in each weight row: then the
// gathered operand and the weight can be read with 16-byte loads.
inline bool gather_vectorizable(const Problem& p, int n) {
  const auto divisible = [n](std::int64_t stride, std::int64_t extent) { return extent <= 1 || stride % n == 0; };
  return p.H % n == 0 && (p.x_stride_h == 1 || p.H == 1) && divisible(p.x_stride_r, p.R) &&
         divisible(p.x_stride_b, p.B) && divisible(p.weight_stride_k, p.K) && aligned_to(p.x, 16) &&
         aligned_to(p.weight, 16);
}

// The operands and element strides every fused kernel reads: one block of its kernel parameters.
struct Operands {
  const void* x;
  const void* weight;
  const void* bias;  // null: no bias
  void* y;
  std::int64_t x_stride_r, x_stride_b, x_stride_h, weight_stride_k, y_stride_b;
};

inline Operands operands_of(const Problem& p) {
  return {p.x, p.weight, p.bias, p.y, p.x_stride_r, p.x_stride_b, p.x_stride_h, p.weight_stride_k, p.y_stride_b};
}

}  // namespace gather_linear::cuda
