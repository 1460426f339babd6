// How the CPU engines (the SIMD engine and the bfloat16 kernels) share out one packed weight
// block among OpenMP threads: tasks of (a block of rows of y) x (a group of the block's weight
// panels); the sizes they share; and the tiles of their direct paths.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/problem.hpp"

namespace gather_linear::cpu {

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Below this much work the OpenMP fork/join costs more than it saves: one thread runs the call.
constexpr double kParallelFlops = 4e6;
inline bool parallel_pays(double flops) { return omp_get_max_threads() > 1 && flops > kParallelFlops; }
// The direct paths stream the weight once from memory, which one core cannot do at the socket's
// bandwidth: threads pay from this many bytes of it, however few the flops (and from as many
// bytes of x that row blocks stream, or of weight and y that the packed path packs and writes).
// From 256 KB rather than 1 MB, weights of 256-512 KB at B = 1 and 5 went from 0.52-1.85x eager
// PyTorch's speed to 1.78-3.30x in float16 and float32 on the GPU host's 16-core Xeon,
// 0.73-1.48x to 1.23-2.14x in float16 on the 2-core Zen 4 (docs/performance/cpu.md, "Threads
// from 256 KB of weight").
constexpr std::int64_t kParallelBytes = std::int64_t{1} << 18;
inline bool parallel_pays(double flops, std::int64_t streamed_bytes) {
  return parallel_pays(flops) || (omp_get_max_threads() > 1 && streamed_bytes >= kParallelBytes);
}
// `flop_weight`: what one flop costs against an AVX-512 float32 one (the SIMD engine's
// kFlopWeight), so that kParallelFlops means the same time of work on every engine.
inline bool direct_parallel_pays(const Problem& p, double flop_weight = 1) {
  return parallel_pays(p.flops() * flop_weight, p.weight_bytes());
}
// A packed weight block this large keeps one reduction slice of it in L2/L3 while row blocks
// stream. With long reductions (over 2048 on AVX-512, 1024 on AVX2) that holds only a few panels, so
// that every row block of x is packed again for each of many blocks: there a block holds as many
// panels as make a reduction slice of kPackedWeightSliceBytes, up to kPackedWeightBlockMaxBytes
// in all. On the 2-core AMX VM, 2 threads: 0.81-0.83x the time at (38, 219, 154, 239) in float32
// and float64 (R*H = 5852, one block instead of two), 0.74-0.78x at R*H = 16384, 0.93-0.97x at
// 4096 with K = 512 to 4096, 0.99x at 3000; one thread 0.80-0.91x; the AVX2 build on the same
// processor 0.91-0.93x at 5852 and 16384, 1.00-1.02x at 1536 to 4096 (docs/performance/cpu.md,
// "Weight blocks for long reductions").
constexpr std::int64_t kPackedWeightBlockBytes = std::int64_t{4} << 20;
constexpr std::int64_t kPackedWeightSliceBytes = std::int64_t{1} << 20;
constexpr std::int64_t kPackedWeightBlockMaxBytes = std::int64_t{16} << 20;

// Groups to split a block's panels into so that every thread gets about two tasks even when B
// makes few blocks of row_block rows (at least 1; the caller bounds it by its panels).
inline std::int64_t groups_for_threads(std::int64_t B, std::int64_t row_block) {
  return ceil_div(2 * omp_get_max_threads(), ceil_div(B, row_block));
}

// The blocks of rows for_each_block_task cuts B into.
inline std::int64_t block_task_row_blocks(std::int64_t B, std::int64_t row_block, std::int64_t row_granule,
                                          std::int64_t groups, bool parallel) {
  const std::int64_t granules = ceil_div(B, row_granule);
  std::int64_t row_blocks = ceil_div(B, row_block);
  if (parallel)
    while ((row_blocks * groups) % omp_get_max_threads() != 0 && row_blocks < granules) ++row_blocks;
  return row_blocks;
}

// Calls task(b0, rows, first_panel, panels) for the B rows of y in blocks of at most row_block
// rows, cut on multiples of row_granule, and panels [first_panel, first_panel + panels) of the
// block's `panels_total`, in `groups` groups (the last may be smaller). Runs on the OpenMP
// threads where `parallel`; there the rows are cut into enough blocks of near-equal size that
// the tasks come in a multiple of the thread count, so no thread is left with a lone last task.
// The threads take tasks as they finish them, unless `same_threads`: then each takes the same
// run of them on every call (a static schedule), so that the part of y it wrote last time, if y
// is reused, is still in its own core's cache. For short reductions, bound by writing y (see
// kSameThreadsMaxReduction), that pays.
template <class Task>
void for_each_block_task(std::int64_t B, std::int64_t row_block, std::int64_t row_granule, std::int64_t panels_total,
                         std::int64_t groups, bool parallel, bool same_threads, Task&& task) {
  const std::int64_t granules = ceil_div(B, row_granule);
  const std::int64_t row_blocks = block_task_row_blocks(B, row_block, row_granule, groups, parallel);
  const std::int64_t panels_per_group = ceil_div(panels_total, groups);
  const auto run = [&](std::int64_t t) {
    const std::int64_t block = t / groups, first_panel = (t % groups) * panels_per_group;
    // Block i holds granules [i * granules / row_blocks, (i + 1) * granules / row_blocks).
    const std::int64_t b0 = std::min(B, block * granules / row_blocks * row_granule);
    const std::int64_t b1 = std::min(B, (block + 1) * granules / row_blocks * row_granule);
    if (first_panel >= panels_total || b1 == b0) return;
    task(b0, static_cast<int>(b1 - b0), first_panel, std::min(panels_per_group, panels_total - first_panel));
  };
  if (same_threads) {
#pragma omp parallel for if (parallel) schedule(static)
    for (std::int64_t t = 0; t < row_blocks * groups; ++t) run(t);
  } else {
#pragma omp parallel for if (parallel) schedule(dynamic, 1)
    for (std::int64_t t = 0; t < row_blocks * groups; ++t) run(t);
  }
}

// Reductions up to which the engine's block tasks go to the same threads on every call
// (for_each_block_task's same_threads). Against tasks taken as threads finish them, that took
// 0.47-0.80x the time at R*H = 2 to 16 in float32, float16 and float64 (float16 0.96x at 16) on
// the GPU host's 16-core Xeon, 0.88-1.12x at 32 and 1.06-1.16x at 64, up to 1.30x beyond, where
// taking them as they come balances the threads' speeds (docs/performance/cpu.md, "Tiles stored
// straight to y, the same threads for short reductions, and slices of 512").
constexpr std::int64_t kSameThreadsMaxReduction = 16;

// f(i) for i in [0, n): on the OpenMP threads (static split) where `parallel`, and otherwise on the
// calling thread with no OpenMP region at all (an if(false) region alone had made a (1, 7, 5, 3)
// call take 0.50 us against 0.13).
template <class F>
void for_each_index(std::int64_t n, bool parallel, F&& f) {
  if (!parallel) {
    for (std::int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

// The direct paths gather A's rows whole (B * R*H elements) before reading the weight: at most
// this many bytes of them (a longer reduction takes the packed path, whose buffers are bounded).
constexpr std::int64_t kDirectRowsBytes = std::int64_t{16} << 20;

// A single row of A meets a tile's weight rows one after another (one stream a thread) up to this
// reduction length; past it, the four rows are read interleaved (four streams). Timed in one
// process, alternating: one stream took 0.39-0.92 of four's time at R*H = 512-1024 on the 2-core
// Zen 4, 0.93-1.07 on the GPU host's 16-core Xeon; from 2048 it took 1.01-1.24 on the Xeon, and
// from 4096 up to 1.40 on the Zen 4 (docs/performance/cpu.md, "One stream for short weight rows").
constexpr std::int64_t kSingleRowStreamMaxReduction = 1024;

// The direct path's row quads (float32 and float64 on AVX-512, gather_gemm_engine.inl) from this
// many rows of A; where B is not a multiple of 4, whose last quad is partly zeros, only up to this
// reduction length. Against direct_tile on the 2-core Zen 4 VM, K = 64 and 512: whole quads (B = 8
// to 32) 0.58-0.99x the time at R*H = 32 to 2048 in float32, 0.55-1.01x in float64; partial ones
// 0.59-0.95x (float64 0.62-0.95x) at R*H = 32 to 128 (B = 5 at 128: 0.92-1.04x, 0.99-1.03x) but up
// to 1.32x (1.34x) beyond; B = 2 to 4 (one quad, half to all of it used) 0.85-1.72x in float32
// (docs/performance/cpu.md, "Row quads: lane sums within 128-bit lanes").
constexpr std::int64_t kRowQuadsMinRows = 5;
constexpr std::int64_t kRowQuadsPartialMaxReduction = 128;

// Whether B rows of A against a reduction of RH take row quads, within the bounds above (the
// engine's and the bfloat16 dot kernel's direct paths).
constexpr bool row_quads_pay(std::int64_t B, std::int64_t RH) {
  return B >= kRowQuadsMinRows && (B % 4 == 0 || RH <= kRowQuadsPartialMaxReduction);
}

// The weight rows of a direct-path tile of kt <= KT outputs from k0 (along a unit stride). Rows
// past kt repeat the last one, so that the tile's loops keep a fixed count; their sums are dropped.
template <class In, int KT>
void direct_tile_weight_rows(const Problem& p, std::int64_t k0, int kt, const In* (&w)[KT]) {
  for (int j = 0; j < KT; ++j)
    w[j] = static_cast<const In*>(p.weight) + (k0 + std::min(j, kt - 1)) * p.weight_stride_k;
}

// The direct paths' split (no packing: each weight row read once against a few rows of A):
// tile(std::integral_constant<int, BT>{}, b0, k0, kt) for every tile of kt <= KT weight rows
// from k0 by BT <= 4 rows of A from b0; tiles of KT weight rows go to the OpenMP threads where
// `parallel`. Row quads split this way too, passing their count of quads, ceil(B / 4), as B.
template <int KT = 4, class Tile>
void for_each_direct_tile(std::int64_t B, std::int64_t K, bool parallel, Tile&& tile) {
  for_each_index(ceil_div(K, KT), parallel, [&](std::int64_t t) {
    const std::int64_t k0 = t * KT;
    const int kt = static_cast<int>(std::min<std::int64_t>(KT, K - k0));
    std::int64_t b0 = 0;
    for (; b0 + 4 <= B; b0 += 4) tile(std::integral_constant<int, 4>{}, b0, k0, kt);
    switch (B - b0) {
      case 3: tile(std::integral_constant<int, 3>{}, b0, k0, kt); break;
      case 2: tile(std::integral_constant<int, 2>{}, b0, k0, kt); break;
      case 1: tile(std::integral_constant<int, 1>{}, b0, k0, kt); break;
      default: break;
    }
  });
}

}  // namespace gather_linear::cpu
