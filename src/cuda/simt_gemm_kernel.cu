// General fused kernel on CUDA cores: exact float32 accumulation for every shape and layout (float64
// accumulates in double, on 64 x 64 tiles with 4 x 4 per thread: larger double tiles exceed static
// shared memory, and 8 x 8 doubles per thread spilled registers to local memory).
//
//   y[b, k] = bias[k] + sum_c A[b, c] * W[k, c],   A[b, c] = x[c / H, b, c % H]
//
// Classic shared-memory SGEMM tiling: a block owns a BM x BN tile of y (rows b, columns k) and
// walks the reduction in BK = 16 steps; each thread accumulates a TM x TM sub-tile made of 4 x 4
// quadrants (TM = 8: two by two, so its shared-memory reads are conflict-free 16-byte loads). The A
// tile is gathered from x in place: each 16-byte group of reduction indices lies in one slice
// when H is a multiple of the vector width (VEC elements), otherwise elements are fetched one
// by one through all three strides. The next step's tiles are loaded into registers while the
// current one is multiplied (double-buffered shared memory, one barrier per step).
// Napkin bound: float32 FMA peak ~67 TFLOP/s on an H200; (8,1024,128,1024) is 2.1 GFLOP, so
// >= 32 us, and about 75% of peak is what a SIMT GEMM can sustain.
#include <algorithm>
#include <type_traits>

#include "core/kernel_registry.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_info.hpp"
#include "cuda/device_types.cuh"
#include "cuda/simt_gemm_kernel.hpp"

namespace gather_linear::cuda {
namespace {

struct SimtArgs {
  Operands operands;
  std::int64_t B, H, K, RH;
  std::int64_t tiles_n;  // column tiles: the grid is 1-D, tile = row_tile * tiles_n + column_tile
};

constexpr int kBK = 16;
constexpr int kPad = 4;  // keeps 16-byte alignment of shared rows and spreads the transposed stores

template <int BM, int BN, int TM> inline constexpr int kThreads = (BM / TM) * (BN / TM);
// Thread sub-tile: 8 x 8 float accumulators; 4 x 4 doubles (8 x 8 needed more than 255 registers).
template <class T> inline constexpr int kThreadTile = sizeof(Accumulator<T>) == 8 ? 4 : 8;

// Four consecutive accumulators from shared memory (16-byte aligned) in 16-byte loads.
template <class Acc>
__device__ __forceinline__ void load4_shared(const Acc* src, Acc* dst) {
  static_assert(sizeof(Acc) == 4 || sizeof(Acc) == 8);
  using Vector = std::conditional_t<sizeof(Acc) == 4, float4, double2>;
  constexpr int kLoads = 4 * static_cast<int>(sizeof(Acc)) / 16;
#pragma unroll
  for (int i = 0; i < kLoads; ++i) reinterpret_cast<Vector*>(dst)[i] = reinterpret_cast<const Vector*>(src)[i];
}

template <class T, int BM, int BN, int VEC>
__global__ void __launch_bounds__(kThreads<BM, BN, kThreadTile<T>>) simt_gemm_kernel(const SimtArgs a) {
  constexpr int TM = kThreadTile<T>, Q = TM / 4;  // sub-tile side, 4 x 4 quadrants per side
  constexpr int THREADS = kThreads<BM, BN, TM>;
  constexpr int GROUPS = kBK / VEC;  // vector groups per tile row
  constexpr int LOADS_A = BM * GROUPS / THREADS, LOADS_W = BN * GROUPS / THREADS;
  static_assert(LOADS_A * THREADS == BM * GROUPS && LOADS_W * THREADS == BN * GROUPS, "tile loads must divide evenly");
  using Acc = Accumulator<T>;  // float; double for float64
  __shared__ __align__(16) Acc a_tile[2][kBK][BM + kPad];
  __shared__ __align__(16) Acc w_tile[2][kBK][BN + kPad];

  const int tid = threadIdx.x;
  const std::int64_t m0 = (blockIdx.x / a.tiles_n) * BM;  // first row b
  const std::int64_t n0 = (blockIdx.x % a.tiles_n) * BN;  // first column k
  const T* x = static_cast<const T*>(a.operands.x);
  const T* w = static_cast<const T*>(a.operands.weight);

  Acc a_next[LOADS_A][VEC], w_next[LOADS_W][VEC];
  auto load_step = [&](std::int64_t k0) {
#pragma unroll
    for (int i = 0; i < LOADS_A; ++i) {
      const int g = tid + i * THREADS;
      const std::int64_t b = m0 + g / GROUPS, c = k0 + (g % GROUPS) * VEC;
      if (b < a.B && c < a.RH) {  // with VEC > 1, RH % VEC == 0: a group is all in or all out
        const std::int64_t r = c / a.H, h = c - r * a.H;
        if constexpr (VEC == 1)
          a_next[i][0] = to_accumulator(x[r * a.operands.x_stride_r + b * a.operands.x_stride_b + h * a.operands.x_stride_h]);
        else
          load_as_accumulator<T, VEC>(x + r * a.operands.x_stride_r + b * a.operands.x_stride_b + h, a_next[i]);
      } else {
#pragma unroll
        for (int v = 0; v < VEC; ++v) a_next[i][v] = Acc(0);
      }
    }
#pragma unroll
    for (int i = 0; i < LOADS_W; ++i) {
      const int g = tid + i * THREADS;
      const std::int64_t n = n0 + g / GROUPS, c = k0 + (g % GROUPS) * VEC;
      if (n < a.K && c < a.RH) {
        load_as_accumulator<T, VEC>(w + n * a.operands.weight_stride_k + c, w_next[i]);
      } else {
#pragma unroll
        for (int v = 0; v < VEC; ++v) w_next[i][v] = Acc(0);
      }
    }
  };
  auto store_step = [&](int buf) {
#pragma unroll
    for (int i = 0; i < LOADS_A; ++i) {
      const int g = tid + i * THREADS;
#pragma unroll
      for (int v = 0; v < VEC; ++v) a_tile[buf][(g % GROUPS) * VEC + v][g / GROUPS] = a_next[i][v];
    }
#pragma unroll
    for (int i = 0; i < LOADS_W; ++i) {
      const int g = tid + i * THREADS;
#pragma unroll
      for (int v = 0; v < VEC; ++v) w_tile[buf][(g % GROUPS) * VEC + v][g / GROUPS] = w_next[i][v];
    }
  };

  // Quadrant q of the thread's rows starts at q * BM / Q + ty * 4 (columns likewise).
  const int ty = tid / (BN / TM), tx = tid % (BN / TM);
  Acc acc[TM][TM] = {};
  load_step(0);
  store_step(0);
  __syncthreads();
  int buf = 0;
  for (std::int64_t k0 = 0; k0 < a.RH; k0 += kBK) {
    const bool has_next = k0 + kBK < a.RH;
    if (has_next) load_step(k0 + kBK);
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      Acc af[TM], bf[TM];
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        load4_shared(&a_tile[buf][kk][q * BM / Q + ty * 4], &af[4 * q]);
        load4_shared(&w_tile[buf][kk][q * BN / Q + tx * 4], &bf[4 * q]);
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TM; ++j) acc[i][j] = fused_multiply_add(af[i], bf[j], acc[i][j]);
    }
    if (has_next) store_step(buf ^ 1);
    __syncthreads();
    buf ^= 1;
  }

  const T* bias = static_cast<const T*>(a.operands.bias);
  T* y = static_cast<T*>(a.operands.y);
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const std::int64_t b = m0 + i / 4 * (BM / Q) + ty * 4 + i % 4;
    if (b >= a.B) continue;
#pragma unroll
    for (int j = 0; j < TM; ++j) {
      const std::int64_t n = n0 + j / 4 * (BN / Q) + tx * 4 + j % 4;
      if (n < a.K) y[b * a.operands.y_stride_b + n] = from_accumulator<T>(acc[i][j] + (bias ? to_accumulator(bias[n]) : Acc(0)));
    }
  }
}

template <class T, int BM, int BN, int VEC>
void launch(const Problem& p, CudaStream stream) {
  const std::int64_t tiles_n = (p.K + BN - 1) / BN, tiles = (p.B + BM - 1) / BM * tiles_n;
  const SimtArgs args{operands_of(p), p.B, p.H, p.K, p.RH, tiles_n};
  simt_gemm_kernel<T, BM, BN, VEC><<<static_cast<unsigned>(tiles), kThreads<BM, BN, kThreadTile<T>>, 0, stream>>>(args);
  check_launch("simt_gemm_kernel");
}

template <class T, int BM, int BN>
void launch_tile(const Problem& p, CudaStream stream) {
  if (gather_vectorizable(p, kVec16<T>))
    launch<T, BM, BN, kVec16<T>>(p, stream);
  else
    launch<T, BM, BN, 1>(p, stream);
}

}  // namespace

std::string simt_gemm_why_not(const Problem& p) {
  if ((p.B + 63) / 64 * ((p.K + 63) / 64) > 0x7fffffff) return "more output tiles than a grid can hold";
  return {};
}

void run_simt_gemm(const Problem& p, CudaStream stream, SimtTile tile) {
  if (tile == SimtTile::automatic) {
    // The largest tile that still gives every multiprocessor a block: big tiles reuse loads
    // more, but a grid smaller than the GPU leaves multiprocessors idle.
    const std::int64_t sms = multiprocessor_count(p.device.index);
    const auto tiles = [&](int bm, int bn) { return (p.B + bm - 1) / bm * ((p.K + bn - 1) / bn); };
    tile = tiles(128, 128) >= 2 * sms ? SimtTile::rows128_cols128
           : tiles(128, 64) >= sms    ? SimtTile::rows128_cols64
                                      : SimtTile::rows64_cols64;
  }
  visit_any_device_dtype(p.dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, double>) {
      launch_tile<T, 64, 64>(p, stream);  // larger tiles of doubles exceed static shared memory
    } else {
      switch (tile) {
        case SimtTile::rows128_cols128: launch_tile<T, 128, 128>(p, stream); break;
        case SimtTile::rows128_cols64: launch_tile<T, 128, 64>(p, stream); break;
        default: launch_tile<T, 64, 64>(p, stream); break;
      }
    }
  });
}

}  // namespace gather_linear::cuda
