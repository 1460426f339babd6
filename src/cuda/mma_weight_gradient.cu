// Exact float32's gradients.weight on mma.sync in 3xTF32 (mma_weight_gradient.hpp says what it
// computes). The output is M = K rows (grad_y's columns) by N = R*H columns (x's slices side by
// side); the reduction runs over b.
//
// A k-tile is 32 rows b of both operands, each row's 16-byte chunks copied whole by cp.async
// (a chunk of x never straddles two slices: H is a multiple of four). An m16n8k8 fragment holds
// rows g and g + 8 of A (columns t and t + 4 of the reduction) and column g of B, for lane
// g * 4 + t; with the reduction along shared memory's rows those are one element each of rows t
// and t + 4. ptxas feeds the MMAs tf32's big part from the loaded registers themselves (the
// tensor cores ignore the bits its mask clears), so a fragment's registers must be loaded in
// their places; values loaded elsewhere are moved there before every MMA (16-byte loads across
// fragments had cost 594 moves a 128 x 64 k-tile, 192 MMAs). The kernel therefore numbers each
// MMA tile's 16 output rows so that A's rows g and g + 8 are outputs 2g and 2g + 1, side by side,
// and one 8-byte load per shared row fills a register pair; B's column g is output column g, two
// 4-byte loads. Shared rows are padded to 8 floats past a multiple of 32 so that
// rows t = 0..3 fall on distinct banks for both loads.
//
// Precision as the forward's tf32x3 mode (mma_gemm_kernel.cuh): each operand split into big and
// small tf32 parts, three MMAs per product, and the tensor cores' sums added into a float32
// total every 128 reduction elements. Where the output tiles are few, blockIdx.y splits the
// reduction into parts, each writing its sums to scratch, which add_parts_kernel adds in order.
#include <algorithm>

#include "cuda/mma_gemm_kernel.cuh"
#include "cuda/mma_weight_gradient.hpp"

namespace gather_linear::cuda {
namespace mma {
namespace {

struct WeightGradientArgs {
  const float* grad_y;
  std::int64_t grad_y_stride_b;
  const float* x;
  std::int64_t x_stride_r, x_stride_b;  // x's h stride is 1
  float* out;  // gradients.weight, or with a split reduction this part's partial sums
  std::int64_t out_stride_k;
  std::int64_t out_stride_part;  // between the parts' partial sums (blockIdx.y)
  std::int64_t B, K, H, RH;
  std::int64_t tiles_m, tiles_n;
  std::int64_t k_tiles_per_part;  // of the reduction's k-tiles: part y takes those from y times this
};

// Block tiles: BM outputs k x BN columns r*H + h in warps of WM x WN; 32 rows b a k-tile, STAGES
// k-tiles in flight. Shared rows are padded to 8 floats past a multiple of 32.
template <int BM, int BN, int WM, int WN, int STAGES>
struct WeightTile {
  static constexpr int kBM = BM, kBN = BN, kWM = WM, kWN = WN, kBK = 32, kStages = STAGES;
  static constexpr int kThreads = (BM / WM) * (BN / WN) * 32;
  static constexpr int kLdA = BM + 8, kLdB = BN + 8;
  static_assert(kLdA % 32 == 8 && kLdB % 32 == 8, "rows t = 0..3 on distinct banks");
  static constexpr int kStageFloats = kBK * (kLdA + kLdB);
  static constexpr int kSharedBytes = kStageFloats * STAGES * static_cast<int>(sizeof(float));
};
// The forward's exact float32 tiles: 128 x 64 in 2 x 2 warps of 64 x 32, three k-tiles in flight,
// and 64 x 64 in warps of 32 x 32, four in flight, where the larger ones would leave
// multiprocessors idle.
using LargeWeightTile = WeightTile<128, 64, 64, 32, 3>;
using SmallWeightTile = WeightTile<64, 64, 32, 32, 4>;
constexpr int kPromoteTiles = 4;  // 128 reduction elements between promotions, as the forward's

// The output's tiles: kBM of its K rows by kBN of its R*H columns.
struct TileGrid {
  std::int64_t m, n;
  std::int64_t count() const { return m * n; }
};
template <class Tile>
TileGrid output_tiles(const Problem& f) {
  return {(f.K + Tile::kBM - 1) / Tile::kBM, (f.RH + Tile::kBN - 1) / Tile::kBN};
}

template <class Tile>
__global__ void __launch_bounds__(Tile::kThreads) weight_gradient_kernel(const WeightGradientArgs a) {
  constexpr int kBM = Tile::kBM, kBN = Tile::kBN, kWM = Tile::kWM, kWN = Tile::kWN, kBK = Tile::kBK;
  constexpr int kStages = Tile::kStages, kThreads = Tile::kThreads, kLdA = Tile::kLdA, kLdB = Tile::kLdB;
  constexpr int kStageFloats = Tile::kStageFloats;
  constexpr int MT = kWM / 16, NT = kWN / 8;  // MMA tiles a warp
  constexpr int kChunksA = kBM / 4, kChunksB = kBN / 4;  // 16-byte chunks of a tile's row
  static_assert(kThreads % kChunksA == 0 && kThreads % kChunksB == 0, "copy slots");
  constexpr int kRowsPerPassA = kThreads / kChunksA, kRowsPerPassB = kThreads / kChunksB;

  extern __shared__ __align__(16) float shared_floats[];
  const std::uint32_t shared_base = shared_address(shared_floats);

  const auto [m0, n0] = grouped_tile_origin(a.tiles_m, a.tiles_n, kBM, kBN);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / (kBN / kWN), warp_n = warp % (kBN / kWN);
  const int g = lane >> 2, t = lane & 3;

  // This thread's copy slots: one chunk column of each operand, every kRowsPerPass-th row.
  const int chunk_a = tid % kChunksA, first_row_a = tid / kChunksA;
  const int chunk_b = tid % kChunksB, first_row_b = tid / kChunksB;
  const std::int64_t m_chunk = m0 + chunk_a * 4, n_chunk = n0 + chunk_b * 4;
  const bool m_valid = m_chunk < a.K, n_valid = n_chunk < a.RH;
  const float* grad_y_column = a.grad_y + (m_valid ? m_chunk : 0);
  const std::int64_t r = n_chunk / a.H;
  const float* x_column = a.x + (n_valid ? r * a.x_stride_r + (n_chunk - r * a.H) : 0);

  auto load_tile = [&](std::int64_t k_tile, int stage) {
    const std::int64_t b0 = k_tile * kBK;
    const std::uint32_t a_stage = shared_base + stage * kStageFloats * 4;
    const std::uint32_t b_stage = a_stage + kBK * kLdA * 4;
#pragma unroll
    for (int row = first_row_a; row < kBK; row += kRowsPerPassA) {
      const bool valid = m_valid && b0 + row < a.B;
      const float* src = valid ? grad_y_column + (b0 + row) * a.grad_y_stride_b : a.grad_y;
      copy_chunk_async(a_stage + (row * kLdA + chunk_a * 4) * 4, src, valid);
    }
#pragma unroll
    for (int row = first_row_b; row < kBK; row += kRowsPerPassB) {
      const bool valid = n_valid && b0 + row < a.B;
      const float* src = valid ? x_column + (b0 + row) * a.x_stride_b : a.x;
      copy_chunk_async(b_stage + (row * kLdB + chunk_b * 4) * 4, src, valid);
    }
  };

  float acc[MT][NT][4] = {};
  float total[MT][NT][4] = {};
  // This part's k-tiles (all of them unless the reduction is split; a part may have none).
  const std::int64_t first_k_tile = blockIdx.y * a.k_tiles_per_part;
  const std::int64_t k_tiles = max(min(a.k_tiles_per_part, (a.B + kBK - 1) / kBK - first_k_tile), std::int64_t{0});
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_tile(first_k_tile + s, s);
    commit_copies();
  }

  for (std::int64_t kt = 0; kt < k_tiles; ++kt) {
    wait_copies<kStages - 2>();
    __syncthreads();  // tile kt is visible to all; the stage refilled below is no longer read
    if (kt + kStages - 1 < k_tiles)
      load_tile(first_k_tile + kt + kStages - 1, static_cast<int>((kt + kStages - 1) % kStages));
    commit_copies();

    const float* a_tile = shared_floats + static_cast<int>(kt % kStages) * kStageFloats;
    const float* b_tile = a_tile + kBK * kLdA;
#pragma unroll
    for (int ks = 0; ks < kBK / 8; ++ks) {
      const int row_lo = ks * 8 + t, row_hi = row_lo + 4;
      std::uint32_t b_frag[NT][2], b_small[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int column = warp_n * kWN + nt * 8 + g;
        b_frag[nt][0] = __float_as_uint(b_tile[row_lo * kLdB + column]);
        b_frag[nt][1] = __float_as_uint(b_tile[row_hi * kLdB + column]);
        split_tf32(b_frag[nt], b_frag[nt], b_small[nt]);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        // Fragment registers: rows g, g + 8 (outputs 2g, 2g + 1) at reduction column t, then at t + 4.
        const int column = warp_m * kWM + mt * 16 + 2 * g;
        const float2 lo = *reinterpret_cast<const float2*>(a_tile + row_lo * kLdA + column);
        const float2 hi = *reinterpret_cast<const float2*>(a_tile + row_hi * kLdA + column);
        std::uint32_t a_frag[4] = {__float_as_uint(lo.x), __float_as_uint(lo.y), __float_as_uint(hi.x),
                                   __float_as_uint(hi.y)};
        std::uint32_t a_small[4];
        split_tf32(a_frag, a_frag, a_small);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          mma<Mode::tf32x3>(acc[mt][nt], a_small, b_frag[nt]);
          mma<Mode::tf32x3>(acc[mt][nt], a_frag, b_small[nt]);
          mma<Mode::tf32x3>(acc[mt][nt], a_frag, b_frag[nt]);
        }
      }
    }
    if (kt % kPromoteTiles == kPromoteTiles - 1 || kt == k_tiles - 1) promote(total, acc);
  }
  wait_copies<0>();

  // Accumulator c[2 * half + j] of MMA tile (mt, nt) sits at MMA row g + 8 * half and column
  // 2t + j: output row 16 mt + 2g + half, column 8 nt + 2t + j (the numbering above).
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const std::int64_t row = m0 + warp_m * kWM + mt * 16 + 2 * g + half;
      if (row >= a.K) continue;
      float* out = a.out + blockIdx.y * a.out_stride_part + row * a.out_stride_k;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const std::int64_t column = n0 + warp_n * kWN + nt * 8 + 2 * t + j;
          if (column < a.RH) out[column] = total[mt][nt][half * 2 + j];
        }
    }
}

// gradients.weight from the parts' partial sums (each K x R*H, contiguous), added in order.
__global__ void add_parts_kernel(const float* __restrict__ parts, int count, std::int64_t K, std::int64_t RH,
                                 float* __restrict__ grad_weight, std::int64_t grad_weight_stride_k) {
  const std::int64_t part_size = K * RH;
  for (std::int64_t e = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; e < part_size;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x * 4) {
    float4 sum = *reinterpret_cast<const float4*>(parts + e);  // RH is a multiple of four: one row
    for (int part = 1; part < count; ++part) {
      const float4 v = *reinterpret_cast<const float4*>(parts + part * part_size + e);
      sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
    }
    const std::int64_t k = e / RH;
    float* out = grad_weight + k * grad_weight_stride_k + (e - k * RH);
    out[0] = sum.x, out[1] = sum.y, out[2] = sum.z, out[3] = sum.w;
  }
}

}  // namespace
}  // namespace mma

std::string mma_weight_gradient_why_not(const BackwardProblem& p) {
  const Problem& f = p.forward;
  if (f.dtype != DType::float32) return "takes float32 only";
  if (!slices_vectorizable(f.x, f.R, f.B, f.H, f.x_stride_r, f.x_stride_b, f.x_stride_h, 4))
    return "needs x in 16-byte chunks: H a multiple of four, x contiguous along H, its strides multiples of four, "
           "16-byte aligned";
  if (f.K % 4 != 0 || (f.B > 1 && p.grad_y_stride_b % 4 != 0) || !aligned_to(p.grad_y, 16))
    return "needs grad_y in 16-byte chunks: K a multiple of four, rows a multiple of four elements apart, 16-byte "
           "aligned";
  if (mma::output_tiles<mma::SmallWeightTile>(f).count() > 0x7fffffff)  // the smaller tile's count, the larger
    return "needs fewer output tiles than a grid can hold";
  return {};
}

namespace {

template <class Tile>
void launch_weight_gradient(const BackwardProblem& p, int parts, float* partial_sums, CudaStream stream) {
  const Problem& f = p.forward;
  const auto [tiles_m, tiles_n] = mma::output_tiles<Tile>(f);
  const std::int64_t k_tiles = (f.B + Tile::kBK - 1) / Tile::kBK;
  const bool split = parts > 1;
  const mma::WeightGradientArgs args{static_cast<const float*>(p.grad_y),
                                     p.grad_y_stride_b,
                                     static_cast<const float*>(f.x),
                                     f.x_stride_r,
                                     f.x_stride_b,
                                     split ? partial_sums : static_cast<float*>(p.grad_weight),
                                     split ? f.RH : p.grad_weight_stride_k,
                                     split ? f.K * f.RH : 0,
                                     f.B,
                                     f.K,
                                     f.H,
                                     f.RH,
                                     tiles_m,
                                     tiles_n,
                                     (k_tiles + parts - 1) / parts};
  mma::raise_shared_limit_once<mma::weight_gradient_kernel<Tile>>(f.device.index, Tile::kSharedBytes,
                                                                  "cudaFuncSetAttribute(weight_gradient_kernel)");
  const dim3 grid(static_cast<unsigned>(tiles_m * tiles_n), static_cast<unsigned>(parts));
  mma::weight_gradient_kernel<Tile><<<grid, Tile::kThreads, Tile::kSharedBytes, stream>>>(args);
  check_launch("weight_gradient_kernel");
  if (!split) return;
  mma::add_parts_kernel<<<grid_stride_blocks(f.K * f.RH / 4, f.device.index), 256, 0, stream>>>(
      partial_sums, parts, f.K, f.RH, static_cast<float*>(p.grad_weight), p.grad_weight_stride_k);
  check_launch("add_parts_kernel");
}

}  // namespace

WeightGradientLaunch mma_weight_gradient_launch(const BackwardProblem& p) {
  const Problem& f = p.forward;
  // As the forward's exact float32: the larger tile where its grid covers every multiprocessor.
  const std::int64_t sms = multiprocessor_count(f.device.index);
  WeightGradientLaunch launch;
  const std::int64_t large_tiles = mma::output_tiles<mma::LargeWeightTile>(f).count();
  launch.tile = large_tiles >= sms ? MmaTile::rows128_cols64 : MmaTile::rows64_cols64;
  // Fewer tiles than two a multiprocessor: the reduction split into as many parts as make up
  // the difference (at most 16, each of 8 k-tiles or more).
  const std::int64_t tiles =
      launch.tile == MmaTile::rows128_cols64 ? large_tiles : mma::output_tiles<mma::SmallWeightTile>(f).count();
  const std::int64_t k_tiles = (f.B + mma::LargeWeightTile::kBK - 1) / mma::LargeWeightTile::kBK;  // either tile's
  launch.parts = static_cast<int>(std::clamp<std::int64_t>(std::min(2 * sms / std::max<std::int64_t>(tiles, 1),
                                                                    k_tiles / 8),
                                                           1, kMaxWeightGradientParts));
  return launch;
}

std::size_t mma_weight_gradient_scratch_bytes(const BackwardProblem& p, const WeightGradientLaunch& launch) {
  const Problem& f = p.forward;
  return launch.parts > 1 ? static_cast<std::size_t>(launch.parts * f.K * f.RH) * sizeof(float) : 0;
}

void run_mma_weight_gradient(const BackwardProblem& p, const WeightGradientLaunch& launch, void* scratch,
                             CudaStream stream) {
  const Problem& f = p.forward;
  if (f.K == 0 || f.RH == 0) return;
  auto* partial_sums = static_cast<float*>(scratch);
  if (launch.tile == MmaTile::rows128_cols64)
    launch_weight_gradient<mma::LargeWeightTile>(p, launch.parts, partial_sums, stream);
  else
    launch_weight_gradient<mma::SmallWeightTile>(p, launch.parts, partial_sums, stream);
}

}  // namespace gather_linear::cuda
