// Timing helpers for the CLI and the benchmarks: wall clock on the CPU; CUDA-graph replays and event pairs on
// the GPU, rotating through input sets so that repeated launches do not just measure L2.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "gather_linear/gather_linear.hpp"

namespace gather_linear::timing {

struct GpuTiming {
  double graph_us = 0;  // median per forward over CUDA-graph replays (launch gaps amortised)
  double event_us = 0;  // median of an event pair around one forward launched from the host
  double stream_us = 0;  // median per forward of as many forwards launched back to back from the host
};

// Median wall-clock microseconds of `run` over `repeats` calls, after one warm-up call.
double time_cpu_us(const std::function<void()>& run, int repeats);

// Several candidates on the CPU, taking turns call by call (so that a drift of the clock or of the
// caches over the run weighs on each alike), after one warm-up call each. `rounds` > 0 runs that
// many; 0 runs as many as fill about `budget_us`, judged by the warm-up calls, and at least
// `min_rounds` (at most kMaxCpuRounds). One median per candidate.
struct CpuTimings {
  std::vector<double> median_us;
  int rounds = 0;
};
inline constexpr int kMaxCpuRounds = 2000;
CpuTimings time_cpu_interleaved(const std::vector<std::function<void()>>& runs, int rounds, int min_rounds,
                                double budget_us);

// `launch(set)` enqueues one forward reading input set `set` on `stream`. Each graph holds
// `sets` launches cycling through the sets; `repeats` replays give the median.
GpuTiming time_gpu(const std::function<void(int set)>& launch, int sets, int repeats, CudaStream stream);
// The same for several candidates, their replays interleaved round-robin so that all of them
// run under the same clocks (sustained tensor-core load lowers them); one result per launch.
std::vector<GpuTiming> time_gpu_interleaved(const std::vector<std::function<void(int set)>>& launches, int sets,
                                            int repeats, CudaStream stream);

// Bytes of the GPU's L2 cache (0 without a GPU).
std::size_t gpu_l2_bytes(int device);

// How many input sets of `set_bytes` each to rotate through so that together they span twice
// the L2 (1 to 64): repeated forwards then read their inputs from memory, not from L2.
int rotating_sets(std::size_t set_bytes, int device);

}  // namespace gather_linear::timing
