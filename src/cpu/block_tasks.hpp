// How the CPU engines (the SIMD engine and the AMX kernel) share out one packed weight block
// among OpenMP threads: tasks of (a block of rows of y) x (a group of the block's weight panels),
// taken dynamically; and the sizes the two share.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace gather_linear::cpu {

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Below this much work the OpenMP fork/join costs more than it saves: one thread runs the call.
constexpr double kParallelFlops = 4e6;
inline bool parallel_pays(double flops) { return omp_get_max_threads() > 1 && flops > kParallelFlops; }
// A packed weight block this large keeps one reduction slice of it in L2/L3 while row blocks
// stream.
constexpr std::int64_t kPackedWeightBlockBytes = std::int64_t{4} << 20;

// Groups to split a block's panels into so that every thread gets about two tasks even when B
// makes few blocks of row_block rows (at least 1; the caller bounds it by its panels).
inline std::int64_t groups_for_threads(std::int64_t B, std::int64_t row_block) {
  return ceil_div(2 * omp_get_max_threads(), ceil_div(B, row_block));
}

// Calls task(b0, rows, first_panel, panels) for the B rows of y in blocks of at most row_block
// rows, cut on multiples of row_granule, and panels [first_panel, first_panel + panels) of the
// block's `panels_total`, in `groups` groups (the last may be smaller). Runs on the OpenMP
// threads where `parallel`; there the rows are cut into enough blocks of near-equal size that
// the tasks come in a multiple of the thread count, so no thread is left with a lone last task.
template <class Task>
void for_each_block_task(std::int64_t B, std::int64_t row_block, std::int64_t row_granule, std::int64_t panels_total,
                         std::int64_t groups, bool parallel, Task&& task) {
  const std::int64_t granules = ceil_div(B, row_granule);
  std::int64_t row_blocks = ceil_div(B, row_block);
  if (parallel)
    while ((row_blocks * groups) % omp_get_max_threads() != 0 && row_blocks < granules) ++row_blocks;
  const std::int64_t panels_per_group = ceil_div(panels_total, groups);
#pragma omp parallel for if (parallel) schedule(dynamic, 1)
  for (std::int64_t t = 0; t < row_blocks * groups; ++t) {
    const std::int64_t block = t / groups, first_panel = (t % groups) * panels_per_group;
    // Block i holds granules [i * granules / row_blocks, (i + 1) * granules / row_blocks).
    const std::int64_t b0 = std::min(B, block * granules / row_blocks * row_granule);
    const std::int64_t b1 = std::min(B, (block + 1) * granules / row_blocks * row_granule);
    if (first_panel >= panels_total || b1 == b0) continue;
    task(b0, static_cast<int>(b1 - b0), first_panel, std::min(panels_per_group, panels_total - first_panel));
  }
}

}  // namespace gather_linear::cpu
