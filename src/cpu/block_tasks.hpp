// How the CPU engines share out one packed weight block among OpenMP threads: tasks of (a block
// of rows of y) x (a group of the block's weight panels), taken dynamically.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gather_linear::cpu {

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Calls task(b0, rows, first_panel, panels) for rows [b0, b0 + rows) of y's B rows, in blocks of
// row_block, and panels [first_panel, first_panel + panels) of the block's `panels_total`, in
// `groups` groups (the last may be smaller). Runs on the OpenMP threads where `parallel`.
template <class Task>
void for_each_block_task(std::int64_t B, std::int64_t row_block, std::int64_t panels_total, std::int64_t groups,
                         bool parallel, Task&& task) {
  const std::int64_t row_blocks = ceil_div(B, row_block);
  const std::int64_t panels_per_group = ceil_div(panels_total, groups);
#pragma omp parallel for if (parallel) schedule(dynamic, 1)
  for (std::int64_t t = 0; t < row_blocks * groups; ++t) {
    const std::int64_t first_panel = (t % groups) * panels_per_group;
    if (first_panel >= panels_total) continue;
    const std::int64_t b0 = (t / groups) * row_block;
    task(b0, static_cast<int>(std::min(row_block, B - b0)), first_panel,
         std::min(panels_per_group, panels_total - first_panel));
  }
}

}  // namespace gather_linear::cpu
