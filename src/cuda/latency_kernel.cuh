// Latency kernel template for small problems (the seed problem R=4 B=12 H=32 K=56 and kin).
//
//   y[b, k] = bias[k] + sum_c A[b, c] * W[k, c],   A[b, c] = x[c / H, b, c % H]
//
// One warp computes a TB x TK tile of outputs. Its lanes stride over the reduction index c in
// 16-byte groups (VEC elements), so each lane issues all its loads for one step at once and the
// warp's loads of a row are coalesced; partial sums meet in a shuffle reduction. Nothing is
// staged through shared memory and there is no intermediate buffer: at these sizes the time
// is one launch plus one round trip to L2, so the kernel keeps that critical path short.
// Napkin bound for the seed problem: 34 KB read (L2-resident in steady state), 2.7 KB written,
// 86 KFLOP: far below any throughput limit; the floor is the ~0.6 us kernel turnaround.
#pragma once

#include "cuda/cuda_check.hpp"
#include "cuda/device_types.cuh"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda::latency {

struct LatencyArgs {
  const void* x;
  const void* weight;
  const void* bias;
  void* y;
  std::int64_t B, H, K, RH;
  std::int64_t x_stride_r, x_stride_b, x_stride_h, weight_stride_k, y_stride_b;
};

constexpr int kWarpsPerBlock = 4;

template <class T, int VEC, int TB, int TK>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) latency_kernel(const LatencyArgs a) {
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  const std::int64_t k_tiles = (a.K + TK - 1) / TK;
  const std::int64_t b0 = (warp / k_tiles) * TB, k0 = (warp % k_tiles) * TK;
  if (b0 >= a.B) return;
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);

  float acc[TB][TK] = {};
  for (std::int64_t c = static_cast<std::int64_t>(lane) * VEC; c < a.RH; c += 32 * VEC) {
    const std::int64_t r = c / a.H, h = c - r * a.H;
    float xv[TB][VEC], wv[TK][VEC];
#pragma unroll
    for (int i = 0; i < TB; ++i) {
      if (b0 + i < a.B) {
        if constexpr (VEC == 1)
          xv[i][0] = to_float(x[r * a.x_stride_r + (b0 + i) * a.x_stride_b + h * a.x_stride_h]);
        else
          load_as_float<T, VEC>(x + r * a.x_stride_r + (b0 + i) * a.x_stride_b + h, xv[i]);
      } else {
#pragma unroll
        for (int v = 0; v < VEC; ++v) xv[i][v] = 0.f;
      }
    }
#pragma unroll
    for (int j = 0; j < TK; ++j) {
      if (k0 + j < a.K) {
        load_as_float<T, VEC>(w + (k0 + j) * a.weight_stride_k + c, wv[j]);
      } else {
#pragma unroll
        for (int v = 0; v < VEC; ++v) wv[j][v] = 0.f;
      }
    }
#pragma unroll
    for (int i = 0; i < TB; ++i)
#pragma unroll
      for (int j = 0; j < TK; ++j)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[i][j] = fmaf(xv[i][v], wv[j][v], acc[i][j]);
  }
#pragma unroll
  for (int i = 0; i < TB; ++i)
#pragma unroll
    for (int j = 0; j < TK; ++j)
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) acc[i][j] += __shfl_xor_sync(0xffffffffu, acc[i][j], offset);

  // Lane i*TK + j writes output (b0 + i, k0 + j).
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
#pragma unroll
  for (int i = 0; i < TB; ++i)
#pragma unroll
    for (int j = 0; j < TK; ++j)
      if (lane == i * TK + j && b0 + i < a.B && k0 + j < a.K)
        y[(b0 + i) * a.y_stride_b + k0 + j] = from_float<T>(acc[i][j] + (bias ? to_float(bias[k0 + j]) : 0.f));
}

// Enqueues the kernel with TB x TK output tiles per warp and VEC-element loads.
template <class T, int VEC, int TB, int TK>
void launch(const Problem& p, CudaStream stream) {
  const LatencyArgs args{p.x, p.weight, p.bias, p.y, p.B, p.H, p.K, p.RH,
                         p.x_stride_r, p.x_stride_b, p.x_stride_h, p.weight_stride_k, p.y_stride_b};
  const std::int64_t warps = (p.B + TB - 1) / TB * ((p.K + TK - 1) / TK);
  const std::int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  latency_kernel<T, VEC, TB, TK><<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(args);
  check_launch("latency_kernel");
}

}  // namespace gather_linear::cuda::latency
