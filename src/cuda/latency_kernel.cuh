// Latency kernel template for small problems (the seed problem R=4 B=12 H=32 K=56 and kin).
//
//   y[b, k] = bias[k] + sum_c A[b, c] * W[k, c],   A[b, c] = x[c / H, b, c % H]
//
// A group of SPLIT lanes computes a TB x TK tile of outputs. Its lanes stride over the reduction
// index c in 16-byte groups (VEC elements), so each lane issues all its loads for one step at
// once and the group's loads of a row are coalesced; partial sums meet in a shuffle reduction. Nothing is
// staged through shared memory and there is no intermediate buffer: at these sizes the time
// is one launch plus one round trip to L2, so the kernel keeps that critical path short. Sums
// are float (float32 and 16-bit inputs) or double (float64).
// Napkin bound for the seed problem: 34 KB read (L2-resident in steady state), 2.7 KB written,
// 86 KFLOP: far below any throughput limit; the floor is the ~0.6 us kernel turnaround.
#pragma once

#include "cuda/cuda_check.hpp"
#include "cuda/device_info.hpp"
#include "cuda/device_types.cuh"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda::latency {

// Sizes and tile counts that index threads fit in 31 bits (latency_kernel_why_not checks), so
// the per-lane index arithmetic is 32-bit; element offsets stay 64-bit.
struct LatencyArgs {
  Operands operands;
  std::uint32_t B, H, K, RH;  // 32-bit index arithmetic (latency_kernel_why_not bounds the extents)
  FastDivider slice, k_tiles;  // c -> r = c / H;  tile -> row tile = tile / k_tiles
};

constexpr int kWarpsPerBlock = 4;

template <class T, int VEC, int TB, int TK, int SPLIT, int UNROLL, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) latency_kernel(const LatencyArgs a) {
  static_assert(TB * TK <= SPLIT && 32 % SPLIT == 0, "one lane of the group writes each output of its tile");
  // SPLIT consecutive lanes share one TB x TK output tile and split its reduction.
  const std::uint32_t tile = (blockIdx.x * blockDim.x + threadIdx.x) / SPLIT;
  const int lane = threadIdx.x % SPLIT;
  const std::uint32_t row_tile = a.k_tiles.quotient(tile);
  const std::uint32_t b0 = row_tile * TB, k0 = (tile - row_tile * a.k_tiles.divisor) * TK;
  const bool active = b0 < a.B;  // idle groups still take part in the warp's shuffles
  const T* x = static_cast<const T*>(a.operands.x);
  const T* w = static_cast<const T*>(a.operands.weight);
  const T* bias = static_cast<const T*>(a.operands.bias);
  using Acc = Accumulator<T>;  // float; double for float64
  wait_for_prerequisite_grid();
  allow_dependent_launch();

  // Lane i*TK + j writes output (b0 + i, k0 + j); its bias load is issued with the others
  // instead of after the reduction, which would add a second round trip to memory.
  const int out_i = lane / TK, out_j = lane % TK;
  const bool writes = active && lane < TB * TK && b0 + out_i < a.B && k0 + out_j < a.K;
  const Acc bias_value = writes && bias ? to_accumulator(bias[k0 + out_j]) : Acc(0);

  // UNROLL steps of the reduction are loaded before any is used, so that a lane waits for
  // memory once per UNROLL steps rather than once per step.
  Acc acc[TB][TK] = {};
  for (std::uint32_t c0 = lane * VEC; active && c0 < a.RH; c0 += SPLIT * VEC * UNROLL) {
    Acc xv[UNROLL][TB][VEC], wv[UNROLL][TK][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const std::uint32_t c = c0 + u * SPLIT * VEC;
      const std::uint32_t r = a.slice.quotient(c), h = c - r * a.H;
#pragma unroll
      for (int i = 0; i < TB; ++i) {
        if (c < a.RH && b0 + i < a.B) {
          const T* row = x + r * a.operands.x_stride_r + (b0 + i) * a.operands.x_stride_b;
          if constexpr (VEC == 1)
            xv[u][i][0] = to_accumulator(row[h * a.operands.x_stride_h]);
          else
            load_as_accumulator<T, VEC>(row + h, xv[u][i]);
        } else {
#pragma unroll
          for (int v = 0; v < VEC; ++v) xv[u][i][v] = Acc(0);
        }
      }
#pragma unroll
      for (int j = 0; j < TK; ++j) {
        if (c < a.RH && k0 + j < a.K) {
          load_as_accumulator<T, VEC>(w + (k0 + j) * a.operands.weight_stride_k + c, wv[u][j]);
        } else {
#pragma unroll
          for (int v = 0; v < VEC; ++v) wv[u][j][v] = Acc(0);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int i = 0; i < TB; ++i)
#pragma unroll
        for (int j = 0; j < TK; ++j)
#pragma unroll
          for (int v = 0; v < VEC; ++v) acc[i][j] = fused_multiply_add(xv[u][i][v], wv[u][j][v], acc[i][j]);
  }
  Acc mine = 0;
#pragma unroll
  for (int i = 0; i < TB; ++i)
#pragma unroll
    for (int j = 0; j < TK; ++j) {
#pragma unroll
      for (int offset = SPLIT / 2; offset > 0; offset >>= 1)
        acc[i][j] += __shfl_xor_sync(0xffffffffu, acc[i][j], offset);
      if (out_i == i && out_j == j) mine = acc[i][j];
    }
  if (writes) static_cast<T*>(a.operands.y)[(b0 + out_i) * a.operands.y_stride_b + k0 + out_j] = from_accumulator<T>(mine + bias_value);
}

// Enqueues the kernel: TB x TK output tiles per group of SPLIT lanes, VEC-element loads,
// UNROLL reduction steps per memory wait, WARPS warps per block; as a programmatic dependent
// launch where the device supports it (compute capability 9.0 and later).
template <class T, int VEC, int TB, int TK, int SPLIT, int UNROLL, int WARPS = kWarpsPerBlock>
void launch(const Problem& p, CudaStream stream, bool programmatic = true) {
  const auto u32 = [](std::int64_t v) { return static_cast<std::uint32_t>(v); };
  const std::int64_t k_tiles = (p.K + TK - 1) / TK, tiles = (p.B + TB - 1) / TB * k_tiles;
  const LatencyArgs args{operands_of(p), u32(p.B), u32(p.H), u32(p.K), u32(p.RH), FastDivider(u32(p.H)),
                         FastDivider(u32(k_tiles))};
  const std::int64_t blocks = (tiles * SPLIT + WARPS * 32 - 1) / (WARPS * 32);
  launch_maybe_programmatic(latency_kernel<T, VEC, TB, TK, SPLIT, UNROLL, WARPS>, args,
                            dim3(static_cast<unsigned>(blocks)), dim3(WARPS * 32), 0, stream, p.device.index,
                            programmatic, "latency_kernel");
}

}  // namespace gather_linear::cuda::latency
