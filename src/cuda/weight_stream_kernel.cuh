// Weight-streaming kernel for decode-sized problems: up to 32 rows of x against a large weight.
// bfloat16 and float16 on m16n8k16 MMAs; float32 as TF32 (m16n8k8, operands rounded to nearest)
// when TF32 is allowed, else exact as 3xTF32 (as the mma.sync GEMM family: mma_gemm_kernel.cuh).
//
//   y[b, k] = bias[k] + sum_c A[b, c] * W[k, c],   A[b, c] = x[c / H, b, c % H]
//
// With a few rows the work is reading W once: (32, 16, 128, 4096) in bfloat16 reads 32 MB of W
// and 128 KB of x, about 7 us at the H200's 4.8 TB/s (measured: 13 us with launch and ramp,
// cuBLAS's GEMM alone on the concatenated input the same). Block tiles of 64 or 128 rows (GEMM
// kernels, the GETT) leave most SMs idle or compute padding, and cuBLAS behind the concatenation
// pays a second launch; this kernel spreads W over every SM and reads it exactly once.
//
// A warp computes y^T for 16 outputs k and all rows b (8 per n8 group, NG groups) with
// mma.sync m16n8k16: W's rows are the A operand, x's rows the B operand. Both are loaded from
// global memory straight into fragment registers, 16 bytes per lane, with no shared-memory
// staging. That works because the reduction may visit c in any order as long as W and x agree:
// in each step (4 lanes x 16 bytes) lane (g, q) = (lane / 4, lane % 4) loads 16 bytes at word
// 4q of the step in each of its rows, and for the step's two halves s the fragment registers
// that hold logical columns (2q, 2q+1), (2q+8, 2q+9) of a k16 tile (16-bit), or columns q, q+4
// of a k8 tile (float32), take the lane's words 2s and 2s + 1, for A and B alike. (H is a
// multiple of a 16-byte group, so a group never straddles two slices of x.)
//
// The block's warps split the reduction and sum their tiles in shared memory: no workspace, no
// atomics, the same summation order every run. Where the blocks are too few to give every SM
// one, the reduction is split further between the blocks of a thread block cluster, their sums
// meeting in distributed shared memory (sm_90).
#pragma once

#include <cooperative_groups.h>

#include <algorithm>

#include "cuda/cuda_check.hpp"
#include "cuda/device_info.hpp"
#include "cuda/device_types.cuh"
#include "cuda/mma_gemm_kernel.cuh"
#include "cuda/weight_stream_kernel.hpp"

namespace gather_linear::cuda::weight_stream {

struct StreamArgs {
  Operands operands;  // x's h stride is 1, W's rows and x's slices are 16-byte aligned
  std::uint32_t B, K, RH;
  std::uint32_t steps;  // 64-byte steps of the reduction (32 16-bit or 16 float32 elements)
  FastDivider slice;     // c -> r = c / H
  std::uint32_t splits;  // blocks per 16 outputs, one cluster (1: no cluster)
  bool prefetch, early_trigger;  // WeightStreamTuning's, the trigger resolved
};

constexpr int kMaxWarps = 16;
// The largest portable cluster; the bytes a tile loads that call for one more block; the bytes
// from which a block takes more than 8 warps (launch() says why).
constexpr std::uint32_t kMaxSplits = 8, kSplitBytes = 96 * 1024, kManyWarpsBytes = 48 * 1024;

// Elements of one warp step: 4 lanes' 16-byte groups (kVec16 elements each).
template <class T> inline constexpr int kStep = 4 * kVec16<T>;

__device__ __forceinline__ std::uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// acc += A * B for one fragment pair in mode M: 3xTF32 as big and small parts (small*small
// dropped), TF32 rounded to nearest, 16-bit as is.
template <mma::Mode M>
__device__ __forceinline__ void multiply_add(float (&acc)[4], std::uint32_t (&a)[4], std::uint32_t (&b)[2]) {
  if constexpr (M == mma::Mode::tf32x3) {
    std::uint32_t a_small[4], b_small[2];
    mma::split_tf32(a, a, a_small);
    mma::split_tf32(b, b, b_small);
    mma::mma<M>(acc, a_small, b);
    mma::mma<M>(acc, a, b_small);
    mma::mma<M>(acc, a, b);
  } else {
    if constexpr (M == mma::Mode::tf32) {
      mma::round_tf32(a);
      mma::round_tf32(b);
    }
    mma::mma<M>(acc, a, b);
  }
}

// NG groups of 8 rows b, 16 outputs k per warp, U steps loaded per memory wait. A warp's steps
// interleave with the other warps' (the warps of a tile's blocks together read a contiguous span
// of each weight row). At most 128 registers a thread: two blocks of 8 warps per SM, or one of 16.
template <mma::Mode M, int NG, int U>
__global__ void __launch_bounds__(kMaxWarps * 32, 1) weight_stream_kernel(const StreamArgs a) {
  using T = typename mma::ModeTraits<M>::Element;
  constexpr int kRows = 16, kCols = 8 * NG, kTile = kRows * kCols;
  extern __shared__ float partial[];  // [warp][k within the tile][b]: each warp's tile of y^T
  const int warps = static_cast<int>(blockDim.x / 32), warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, q = lane % 4;
  // Block `split` of a tile's cluster takes every splits-th run of `warps` steps.
  const std::uint32_t split = blockIdx.x % a.splits, k0 = blockIdx.x / a.splits * kRows;
  const std::uint32_t first_step = split * warps + warp, step_stride = a.splits * warps;
  const T* x = static_cast<const T*>(a.operands.x);
  const T* w = static_cast<const T*>(a.operands.weight);

  // This lane's rows: outputs k0 + g and k0 + g + 8 of W, rows 8n + g of x.
  const T* w_rows[2];
  bool w_valid[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const std::uint32_t k = k0 + 8 * i + g;
    w_valid[i] = k < a.K;
    w_rows[i] = w + static_cast<std::int64_t>(w_valid[i] ? k : 0) * a.operands.weight_stride_k;
  }
  std::int64_t x_rows[NG];
  bool x_valid[NG];
#pragma unroll
  for (int n = 0; n < NG; ++n) {
    const std::uint32_t b = 8 * n + g;
    x_valid[n] = b < a.B;
    x_rows[n] = static_cast<std::int64_t>(x_valid[n] ? b : 0) * a.operands.x_stride_b;
  }

  // Launched programmatically, the blocks start while the previous kernel finishes: meanwhile
  // each lane asks L2 for its first steps of its weight rows (a prefetch cannot read stale data:
  // L2 is where every write lands), then waits for that kernel before reading anything.
  if (a.prefetch) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::uint32_t c = (first_step + u * step_stride) * kStep<T> + q * kVec16<T>;
#pragma unroll
      for (int i = 0; i < 2; ++i)
        if (c < a.RH && w_valid[i]) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(w_rows[i] + c));
    }
  }
  wait_for_prerequisite_grid();
  if (a.early_trigger) allow_dependent_launch();

  // 3xTF32's tensor-core sums do not round to nearest: each round of U steps is added into
  // CUDA-core totals (as the mma.sync GEMM's promotion does), so the bias does not grow with R*H.
  constexpr bool kPromote = M == mma::Mode::tf32x3;
  float acc[NG][4] = {}, total[kPromote ? NG : 1][4] = {};
  for (std::uint32_t base = first_step; base < a.steps; base += step_stride * U) {
    // All U steps' loads are issued before any is used: one memory wait per U steps.
    uint4 wv[U][2], xv[U][NG];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::uint32_t step = base + u * step_stride, c = step * kStep<T> + q * kVec16<T>;
      const bool inside = c < a.RH;
      const std::uint32_t r = a.slice.quotient(c), h = c - r * a.slice.divisor;
      const T* slice = x + static_cast<std::int64_t>(r) * a.operands.x_stride_r + h;
#pragma unroll
      for (int i = 0; i < 2; ++i)  // W is read once: stream it past L1
        wv[u][i] = inside && w_valid[i] ? __ldcs(reinterpret_cast<const uint4*>(w_rows[i] + c)) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int n = 0; n < NG; ++n)
        xv[u][n] = inside && x_valid[n] ? __ldg(reinterpret_cast<const uint4*>(slice + x_rows[n])) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int n = 0; n < NG; ++n) {
          std::uint32_t frag[4] = {word(wv[u][0], 2 * s), word(wv[u][1], 2 * s), word(wv[u][0], 2 * s + 1),
                                   word(wv[u][1], 2 * s + 1)};
          std::uint32_t x_frag[2] = {word(xv[u][n], 2 * s), word(xv[u][n], 2 * s + 1)};
          multiply_add<M>(acc[n], frag, x_frag);
        }
    if constexpr (kPromote) {
#pragma unroll
      for (int n = 0; n < NG; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          total[n][i] += acc[n][i];
          acc[n][i] = 0.f;
        }
    }
  }
  if (!a.early_trigger) allow_dependent_launch();
  if constexpr (kPromote) {
#pragma unroll
    for (int n = 0; n < NG; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[n][i] = total[n][i];
  }

  // Accumulator layout of m16n8: c0, c1 at (k row g, b columns 2q, 2q+1); c2, c3 at k row g + 8.
  float* mine = partial + warp * kTile;
#pragma unroll
  for (int n = 0; n < NG; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) mine[(g + 8 * (i / 2)) * kCols + 8 * n + 2 * q + i % 2] = acc[n][i];
  __syncthreads();
  for (int o = static_cast<int>(threadIdx.x); o < kTile; o += static_cast<int>(blockDim.x)) {
    float sum = 0.f;
    for (int v = 0; v < warps; ++v) sum += partial[v * kTile + o];
    partial[o] = sum;
  }
  __syncthreads();

  // Each block of a cluster writes its share of the tile, summing the blocks' tiles in rank order.
  // Consecutive threads write consecutive outputs k of one row b.
  const T* bias = static_cast<const T*>(a.operands.bias);
  T* y = static_cast<T*>(a.operands.y);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  if (a.splits > 1) cg::this_cluster().sync();  // every block's tile summed
#endif
  const int first = static_cast<int>(split * blockDim.x + threadIdx.x);
  for (int o = first; o < kTile; o += static_cast<int>(a.splits * blockDim.x)) {
    const int b = o / kRows, kk = o % kRows, at = kk * kCols + b;
    const std::uint32_t k = k0 + kk;
    if (static_cast<std::uint32_t>(b) >= a.B || k >= a.K) continue;
    float sum = partial[at];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (a.splits > 1) {
      sum = 0.f;
      for (std::uint32_t r = 0; r < a.splits; ++r) sum += cg::this_cluster().map_shared_rank(partial, r)[at];
    }
#endif
    y[b * a.operands.y_stride_b + k] = from_float<T>(sum + (bias ? to_float(bias[k]) : 0.f));
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (a.splits > 1) cg::this_cluster().sync();  // no block leaves while another reads its tile
#endif
}

// Shared memory of a block of `warps` warps: each warp's tile of sums.
template <int NG> constexpr std::size_t tile_sums_bytes(int warps) {
  return static_cast<std::size_t>(warps) * 16 * 8 * NG * sizeof(float);
}

// Blocks of 12 warps one SM holds at once (registers, threads, shared memory), queried once per
// instantiation and device.
constexpr int kTwelveWarps = 12;
template <mma::Mode M, int NG, int U>
int twelve_warp_blocks_per_sm(int device) {
  static CountPerDevice counts;
  return counts.get(device, [] {
    int blocks = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, weight_stream_kernel<M, NG, U>, kTwelveWarps * 32,
                                                        tile_sums_bytes<NG>(kTwelveWarps)),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    return blocks;
  });
}

// Enqueues the kernel, as a programmatic dependent launch where the GPU runs this build's sm_90
// code (unless `programmatic` is false: the benchmark's comparison). Up to 8 rows, letting the
// next kernel launch only once the weight is streamed took 0.81-1.03x the time (median 0.98;
// 0.87-0.90x against 32 MB) of letting it launch at once (probably: the next blocks' prefetches
// compete with our stream); with 16 rows 0.92-1.08x (median 1.00), and early
// stays (bench/results/weight_stream_pdl_h200.csv, bfloat16 and float32), as with 17 to 32 rows:
// 0.92-1.09x (median 1.00; bench/results/weight_stream_rows_first_h200.csv).
template <mma::Mode M, int NG, int U>
void launch(const Problem& p, CudaStream stream, WeightStreamTuning tuning, bool programmatic = true) {
  using T = typename mma::ModeTraits<M>::Element;
  constexpr int kRows = 16;
  const auto tiles = static_cast<std::uint32_t>((p.K + kRows - 1) / kRows);
  const auto steps = static_cast<std::uint32_t>((p.RH + kStep<T> - 1) / kStep<T>);
  // What a tile's blocks load: its slice of the weight and, per step, x's rows. With few tiles
  // (small K) most SMs would idle while a few stream long slices at one SM's pace, so the slice
  // is split between up to 8 blocks of a cluster: one block per 96 KB loaded, by powers of two,
  // while the blocks fit (clusters of 4 or 8 on at most half the SMs: on all of them they took up
  // to 1.9x the time of half as many). With no more blocks than SMs a block has 16 warps (more
  // of the weight in flight per SM) unless it loads under 48 KB: unsplit, 16 warps took
  // 0.57-1.08x the time of 8 (median 0.71-0.78 by mode) with one block per SM, but 0.88-1.39x
  // with more blocks (12 warps 0.76-1.40x). bench/results/weight_stream_blocks_h200.csv.
  const auto sms = static_cast<std::uint32_t>(multiprocessor_count(p.device.index));
  const std::uint64_t tile_load_bytes = static_cast<std::uint64_t>((kRows + p.B) * p.RH) * sizeof(T);
  std::uint32_t splits = tuning.splits > 0 ? std::min<std::uint32_t>(tuning.splits, kMaxSplits) : 0;
  if (!runs_sm90_code(p.device.index)) {
    splits = 1;
  } else if (splits == 0) {
    for (splits = kMaxSplits; splits > 1; splits /= 2)
      if (splits * kSplitBytes <= tile_load_bytes && tiles * splits <= (splits >= 4 ? sms / 2 : sms)) break;
  }
  // Past one block per SM, exact float32 (three MMAs a step) and 9 or more rows (twice x's loads)
  // take 12 warps where two such blocks fit an SM and every block then has a place at once:
  // 0.77-1.01x the time of 8 (160-256 tiles); with 32 rows (more registers) or a second round of
  // blocks 1.01-1.47x, and 8 stays. bench/results/weight_stream_residency_h200.csv.
  int warps = 8;
  if (tuning.warps > 0) {
    warps = std::min(tuning.warps, kMaxWarps);
  } else if (tile_load_bytes >= kManyWarpsBytes) {
    if (tiles * splits <= sms)
      warps = 16;
    else if ((M == mma::Mode::tf32x3 || p.B > 8) &&
             tiles * splits <= static_cast<std::uint32_t>(twelve_warp_blocks_per_sm<M, NG, U>(p.device.index)) * sms)
      warps = kTwelveWarps;
  }
  const StreamArgs args{operands_of(p), static_cast<std::uint32_t>(p.B), static_cast<std::uint32_t>(p.K),
                        static_cast<std::uint32_t>(p.RH), steps,
                        FastDivider(static_cast<std::uint32_t>(p.H)), splits, tuning.prefetch,
                        tuning.dependents == DependentLaunch::early ||
                            (tuning.dependents == DependentLaunch::by_rows && NG > 1)};

  // Each warp's tile of sums: within the 48 KB any launch may take without raising its limit.
  static_assert(tile_sums_bytes<NG>(kMaxWarps) <= 48 * 1024);
  const std::size_t shared_bytes = tile_sums_bytes<NG>(warps);
  launch_maybe_programmatic(weight_stream_kernel<M, NG, U>, args, dim3(tiles * splits),
                            dim3(static_cast<unsigned>(warps * 32)), shared_bytes, stream, p.device.index,
                            programmatic, "weight_stream_kernel", splits);
}

}  // namespace gather_linear::cuda::weight_stream
