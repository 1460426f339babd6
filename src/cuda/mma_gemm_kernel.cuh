// Fused tensor-core kernel: the gathered GEMM on mma.sync (sm_80+ instructions, run on Hopper).
//
//   y[b, k] = bias[k] + sum_c A[b, c] * W[k, c],   A[b, c] = x[c / H, b, c % H]
//
// Both operands are K-major (x's h and W's rows are contiguous), so a block tile of each is a
// set of 16-byte chunks that cp.async copies straight from x and W into shared memory: a chunk
// of A never straddles two slices because H is a multiple of the chunk width (the dispatcher's
// vector condition), so the gather costs one division per chunk column per k-tile and nothing
// else. Tiles are BM (rows b) x BN (outputs k) x 128 bytes of the reduction, STAGES deep;
// shared rows are 128 bytes with the 16-byte chunk index XOR-swizzled by the row, so that
// ldmatrix reads are conflict-free. Fragments come from ldmatrix (a 32-bit tf32 element is a
// pair of 16-bit lanes, so the same non-transposed loads serve tf32 and 16-bit types).
//
// Precision modes:
//   tf32x3  exact float32: each operand splits into big (its top tf32 bits) and small = v - big;
//           acc += a_small*b_big + a_big*b_small + a_big*b_big (the dropped small*small term is
//           below 2^-20 relative). Three MMAs per product. The tensor cores' float32 additions
//           do not round to nearest, and that bias grows with the reduction length, so every
//           kPromoteTiles k-tiles the sum is added into a CUDA-core accumulator (rounded to
//           nearest) and restarted.
//   tf32    float32 inputs rounded to tf32 (when TF32 is allowed), one MMA.
//   f16, bf16  one m16n8k16 MMA, float32 accumulation, output rounded to the input type.
// Napkin bound: Hopper's mma.sync runs tf32 at roughly 60% of the ~495 TFLOP/s dense wgmma
// rate, so tf32x3 tops out near 100 TFLOP/s of float32 work (cuBLAS SGEMM: ~50).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>

#include "core/problem.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_info.hpp"
#include "cuda/device_types.cuh"
#include "cuda/mma_gemm_kernel.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda::mma {

template <Mode M> struct ModeTraits;
template <> struct ModeTraits<Mode::tf32x3> { using Element = float; };
template <> struct ModeTraits<Mode::tf32> { using Element = float; };
template <> struct ModeTraits<Mode::f16> { using Element = __half; };
template <> struct ModeTraits<Mode::bf16> { using Element = __nv_bfloat16; };

struct MmaArgs {
  Operands operands;  // x's h stride is 1 (16-byte chunks)
  std::int64_t B, H, K, RH;
  std::int64_t tiles_m, tiles_n;
};

constexpr int kRowBytes = 128;  // one k-tile of one row: 8 chunks of 16 bytes
constexpr int kChunks = kRowBytes / 16;
constexpr int kGroupM = 8;  // row tiles per raster group: neighbouring blocks share W tiles in L2

template <int BM, int BN, int WM, int WN, int STAGES>
struct TileConfig {
  static constexpr int kBM = BM, kBN = BN, kWM = WM, kWN = WN, kStages = STAGES;
  static constexpr int kWarps = (BM / WM) * (BN / WN);
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStageBytes = (BM + BN) * kRowBytes;
  static constexpr int kSharedBytes = kStageBytes * STAGES;
};

__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void copy_chunk_async(std::uint32_t dst, const void* src, bool valid) {
  // src-size 0 zero-fills the chunk without reading: out-of-range rows and reduction indices.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void load_matrix_x4(std::uint32_t (&r)[4], std::uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ std::uint32_t to_tf32(float v) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
}

template <Mode M>
__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  if constexpr (M == Mode::tf32x3 || M == Mode::tf32) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (M == Mode::f16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Splits fragment registers holding float32 bits into tf32 big and small parts: big keeps the
// top 10 mantissa bits (a mask, so v - big is exact in float32), small is the rest, which the
// tensor core reads as tf32 (truncated below 2^-20 of v, the size of the dropped small*small).
template <int N>
__device__ __forceinline__ void split_tf32(const std::uint32_t (&v)[N], std::uint32_t (&big)[N], std::uint32_t (&small)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float f = __uint_as_float(v[i]);
    big[i] = v[i] & 0xffffe000u;
    small[i] = __float_as_uint(f - __uint_as_float(big[i]));
  }
}
template <int N>
__device__ __forceinline__ void round_tf32(std::uint32_t (&v)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = to_tf32(__uint_as_float(v[i]));
}

struct TileOrigin {
  std::int64_t m0, n0;
};
// This block's first row and column in a grouped raster: kGroupM row tiles walk the column
// tiles together.
__device__ __forceinline__ TileOrigin grouped_tile_origin(std::int64_t tiles_m, std::int64_t tiles_n, int bm, int bn) {
  const std::int64_t tile = blockIdx.x, group_tiles = kGroupM * tiles_n;
  const std::int64_t first_m = tile / group_tiles * kGroupM;
  const std::int64_t group_m = min(static_cast<std::int64_t>(kGroupM), tiles_m - first_m);
  return {(first_m + tile % group_tiles % group_m) * bm, (tile % group_tiles / group_m) * bn};
}

// tf32x3's promotion (see the precision modes above): the tensor cores' sums added into the
// float32 totals, and restarted.
template <int MT, int NT>
__device__ __forceinline__ void promote(float (&total)[MT][NT][4], float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        total[mt][nt][i] += acc[mt][nt][i];
        acc[mt][nt][i] = 0.f;
      }
}

// Raises a kernel's dynamic shared-memory limit to `bytes`, once per device.
template <auto Kernel>
void raise_shared_limit_once(int device, int bytes, const char* what) {
  static std::atomic<bool> raised[kMaxDevices];
  if (raised[device].load(std::memory_order_acquire)) return;
  check(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), what);
  raised[device].store(true, std::memory_order_release);
}

template <Mode MODE, class Config>
__global__ void __launch_bounds__(Config::kThreads) mma_gemm_kernel(const MmaArgs a) {
  using T = typename ModeTraits<MODE>::Element;
  constexpr int BM = Config::kBM, BN = Config::kBN, WM = Config::kWM, WN = Config::kWN, STAGES = Config::kStages;
  constexpr int THREADS = Config::kThreads;
  constexpr int EPC = 16 / sizeof(T);       // elements per 16-byte chunk
  constexpr int BK = kChunks * EPC;         // reduction elements per k-tile
  constexpr int MT = WM / 16, NT = WN / 8;  // MMA tiles per warp
  static_assert(THREADS % kChunks == 0 && NT % 2 == 0, "tile shape");
  constexpr int ROWS_PER_PASS = THREADS / kChunks;

  extern __shared__ __align__(128) unsigned char shared[];
  const std::uint32_t shared_base = shared_address(shared);

  const auto [m0, n0] = grouped_tile_origin(a.tiles_m, a.tiles_n, BM, BN);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / (BN / WN), warp_n = warp % (BN / WN);
  const T* x = static_cast<const T*>(a.operands.x);
  const T* w = static_cast<const T*>(a.operands.weight);
  const int chunk = tid % kChunks, first_row = tid / kChunks;  // this thread's copy slots

  auto load_tile = [&](std::int64_t k_tile, int stage) {
    const std::int64_t c = k_tile * BK + chunk * EPC;
    const bool c_valid = c < a.RH;
    const std::int64_t r = c / a.H, h = c - r * a.H;
    const T* x_chunk = x + r * a.operands.x_stride_r + h;
    const std::uint32_t a_stage = shared_base + stage * Config::kStageBytes;
    const std::uint32_t w_stage = a_stage + BM * kRowBytes;
#pragma unroll
    for (int row = first_row; row < BM; row += ROWS_PER_PASS) {
      const bool valid = c_valid && m0 + row < a.B;
      const T* src = valid ? x_chunk + (m0 + row) * a.operands.x_stride_b : x;
      copy_chunk_async(a_stage + row * kRowBytes + ((chunk ^ (row & 7)) << 4), src, valid);
    }
#pragma unroll
    for (int row = first_row; row < BN; row += ROWS_PER_PASS) {
      const bool valid = c_valid && n0 + row < a.K;
      const T* src = valid ? w + (n0 + row) * a.operands.weight_stride_k + c : w;
      copy_chunk_async(w_stage + row * kRowBytes + ((chunk ^ (row & 7)) << 4), src, valid);
    }
  };

  float acc[MT][NT][4] = {};
  constexpr bool kPromote = MODE == Mode::tf32x3;  // see the precision modes above
  constexpr int kPromoteTiles = 4;                 // 128 reduction elements between promotions
  float total[kPromote ? MT : 1][kPromote ? NT : 1][4] = {};
  const std::int64_t k_tiles = (a.RH + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_tile(s, s);
    commit_copies();
  }
  // ldmatrix lane roles: lanes 8i..8i+7 address the rows of 8x8 matrix i.
  const int matrix = lane >> 3, matrix_row = lane & 7;

  for (std::int64_t kt = 0; kt < k_tiles; ++kt) {
    wait_copies<STAGES - 2>();
    __syncthreads();  // tile kt is visible to all; the stage refilled below is no longer read
    if (kt + STAGES - 1 < k_tiles) load_tile(kt + STAGES - 1, static_cast<int>((kt + STAGES - 1) % STAGES));
    commit_copies();

    const std::uint32_t a_stage = shared_base + static_cast<std::uint32_t>(kt % STAGES) * Config::kStageBytes;
    const std::uint32_t w_stage = a_stage + BM * kRowBytes;
#pragma unroll
    for (int ks = 0; ks < kChunks / 2; ++ks) {  // one MMA k-step is two chunks (32 bytes)
      std::uint32_t b_frag[NT][2];
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        const int row = warp_n * WN + np * 16 + ((matrix >> 1) << 3) + matrix_row;
        const int c = ks * 2 + (matrix & 1);
        std::uint32_t r[4];
        load_matrix_x4(r, w_stage + row * kRowBytes + ((c ^ (row & 7)) << 4));
        b_frag[2 * np][0] = r[0], b_frag[2 * np][1] = r[1], b_frag[2 * np + 1][0] = r[2], b_frag[2 * np + 1][1] = r[3];
      }
      std::uint32_t b_small[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if constexpr (MODE == Mode::tf32x3) split_tf32(b_frag[nt], b_frag[nt], b_small[nt]);
        if constexpr (MODE == Mode::tf32) round_tf32(b_frag[nt]);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int row = warp_m * WM + mt * 16 + ((matrix & 1) << 3) + matrix_row;
        const int c = ks * 2 + (matrix >> 1);
        std::uint32_t a_frag[4];
        load_matrix_x4(a_frag, a_stage + row * kRowBytes + ((c ^ (row & 7)) << 4));
        if constexpr (MODE == Mode::tf32x3) {
          std::uint32_t a_small[4];
          split_tf32(a_frag, a_frag, a_small);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            mma<MODE>(acc[mt][nt], a_small, b_frag[nt]);
            mma<MODE>(acc[mt][nt], a_frag, b_small[nt]);
            mma<MODE>(acc[mt][nt], a_frag, b_frag[nt]);
          }
        } else {
          if constexpr (MODE == Mode::tf32) round_tf32(a_frag);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma<MODE>(acc[mt][nt], a_frag, b_frag[nt]);
        }
      }
    }
    if constexpr (kPromote)
      if (kt % kPromoteTiles == kPromoteTiles - 1 || kt == k_tiles - 1) promote(total, acc);
  }
  wait_copies<0>();
  if constexpr (kPromote) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = total[mt][nt][i];
  }

  // Accumulator layout of m16n8: c0, c1 at (row g, cols 2t, 2t+1); c2, c3 at row g + 8.
  const T* bias = static_cast<const T*>(a.operands.bias);
  T* y = static_cast<T*>(a.operands.y);
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const std::int64_t col = n0 + warp_n * WN + nt * 8 + 2 * t;
    float bias_pair[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) bias_pair[j] = bias && col + j < a.K ? to_float(bias[col + j]) : 0.f;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const std::int64_t row = m0 + warp_m * WM + mt * 16 + g + half * 8;
        if (row >= a.B) continue;
#pragma unroll
        for (int j = 0; j < 2; ++j)
          if (col + j < a.K) y[row * a.operands.y_stride_b + col + j] = from_float<T>(acc[mt][nt][half * 2 + j] + bias_pair[j]);
      }
  }
}

// Enqueues one configuration; raises the kernel's dynamic shared-memory limit once per device.
template <Mode MODE, class Config>
void launch(const Problem& p, CudaStream stream) {
  const std::int64_t tiles_m = (p.B + Config::kBM - 1) / Config::kBM, tiles_n = (p.K + Config::kBN - 1) / Config::kBN;
  const MmaArgs args{operands_of(p), p.B, p.H, p.K, p.RH, tiles_m, tiles_n};
  raise_shared_limit_once<mma_gemm_kernel<MODE, Config>>(p.device.index, Config::kSharedBytes,
                                                         "cudaFuncSetAttribute(mma_gemm_kernel)");
  mma_gemm_kernel<MODE, Config>
      <<<static_cast<unsigned>(tiles_m * tiles_n), Config::kThreads, Config::kSharedBytes, stream>>>(args);
  check_launch("mma_gemm_kernel");
}

// The block tiles the dispatcher chooses among (rows b x outputs k, warp tile, pipeline depth).
using LargeTile = TileConfig<128, 128, 64, 32, 3>;
using MediumTile = TileConfig<128, 64, 64, 32, 3>;
using SmallTile = TileConfig<64, 64, 32, 32, 4>;

// Runs `p` in mode M with the given tile; each mode is instantiated in its own .cu file.
template <Mode M>
void run_mode(const Problem& p, MmaTile tile, CudaStream stream) {
  switch (tile) {
    case MmaTile::rows128_cols128: launch<M, LargeTile>(p, stream); break;
    case MmaTile::rows128_cols64: launch<M, MediumTile>(p, stream); break;
    default: launch<M, SmallTile>(p, stream); break;
  }
}

}  // namespace gather_linear::cuda::mma
