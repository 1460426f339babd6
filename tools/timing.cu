#include "timing.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "cuda/cuda_check.hpp"

namespace gather_linear::timing {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

CpuTimings time_cpu_interleaved(const std::vector<std::function<void()>>& runs, int rounds, int min_rounds,
                                double budget_us) {
  using clock = std::chrono::steady_clock;
  auto time_one = [](const std::function<void()>& run) {
    const auto start = clock::now();
    run();
    return std::chrono::duration<double, std::micro>(clock::now() - start).count();
  };
  double round_us = 0;
  for (const auto& run : runs) round_us += time_one(run);  // warm-up, and the estimate of a round
  if (rounds <= 0)
    rounds = static_cast<int>(std::clamp(budget_us / std::max(round_us, 1e-3), static_cast<double>(min_rounds),
                                         static_cast<double>(std::max(min_rounds, kMaxCpuRounds))));
  std::vector<std::vector<double>> samples(runs.size());
  for (int r = 0; r < rounds; ++r)
    for (std::size_t i = 0; i < runs.size(); ++i) samples[i].push_back(time_one(runs[i]));
  CpuTimings t;
  t.rounds = rounds;
  for (auto& s : samples) t.median_us.push_back(median(std::move(s)));
  return t;
}

double time_cpu_us(const std::function<void()>& run, int repeats) {
  return time_cpu_interleaved({run}, repeats, repeats, 0).median_us[0];
}

std::vector<GpuTiming> time_gpu_interleaved(const std::vector<std::function<void(int set)>>& launches, int sets,
                                            int repeats, CudaStream stream) {
  using cuda::check;
  for (const auto& launch : launches)
    for (int s = 0; s < sets; ++s) launch(s);  // warm-up: module load, plan caches
  check(cudaStreamSynchronize(stream), "warm-up");

  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  auto elapsed_us = [&] {
    float ms = 0;
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return 1000.0 * ms;
  };

  // Enough launches per graph that the replay's own launch cost is amortised.
  const int per_graph = std::max(sets, 20) / sets * sets;
  const std::size_t n = launches.size();
  std::vector<cudaGraph_t> graphs(n);
  std::vector<cudaGraphExec_t> execs(n);
  for (std::size_t c = 0; c < n; ++c) {
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    for (int i = 0; i < per_graph; ++i) launches[c](i % sets);
    check(cudaStreamEndCapture(stream, &graphs[c]), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&execs[c], graphs[c], 0), "cudaGraphInstantiate");
    check(cudaGraphLaunch(execs[c], stream), "cudaGraphLaunch");
  }
  // Round-robin: every candidate sees the same clock and power state (a GPU under sustained
  // tensor-core load slows down; timing candidates one after another would favour the first).
  std::vector<std::vector<double>> graph_samples(n), event_samples(n), stream_samples(n);
  for (int i = 0; i < repeats; ++i)
    for (std::size_t c = 0; c < n; ++c) {
      check(cudaEventRecord(start, stream), "cudaEventRecord");
      check(cudaGraphLaunch(execs[c], stream), "cudaGraphLaunch");
      check(cudaEventRecord(stop, stream), "cudaEventRecord");
      graph_samples[c].push_back(elapsed_us() / per_graph);
    }
  for (int i = 0; i < repeats * 4; ++i)
    for (std::size_t c = 0; c < n; ++c) {
      check(cudaEventRecord(start, stream), "cudaEventRecord");
      launches[c](i % sets);
      check(cudaEventRecord(stop, stream), "cudaEventRecord");
      event_samples[c].push_back(elapsed_us());
    }
  for (int i = 0; i < repeats; ++i)
    for (std::size_t c = 0; c < n; ++c) {
      check(cudaEventRecord(start, stream), "cudaEventRecord");
      for (int j = 0; j < per_graph; ++j) launches[c](j % sets);
      check(cudaEventRecord(stop, stream), "cudaEventRecord");
      stream_samples[c].push_back(elapsed_us() / per_graph);
    }
  std::vector<GpuTiming> timings;
  for (std::size_t c = 0; c < n; ++c) {
    check(cudaGraphExecDestroy(execs[c]), "cudaGraphExecDestroy");
    check(cudaGraphDestroy(graphs[c]), "cudaGraphDestroy");
    timings.push_back({median(graph_samples[c]), median(event_samples[c]), median(stream_samples[c])});
  }
  check(cudaEventDestroy(start), "cudaEventDestroy");
  check(cudaEventDestroy(stop), "cudaEventDestroy");
  return timings;
}

GpuTiming time_gpu(const std::function<void(int set)>& launch, int sets, int repeats, CudaStream stream) {
  return time_gpu_interleaved({launch}, sets, repeats, stream).front();
}

int rotating_sets(std::size_t set_bytes, int device) {
  const std::size_t sets = 2 * gpu_l2_bytes(device) / std::max<std::size_t>(set_bytes, 1) + 1;
  return static_cast<int>(std::clamp<std::size_t>(sets, 1, 64));
}

std::size_t gpu_l2_bytes(int device) {
  int bytes = 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess) return 0;
  return static_cast<std::size_t>(bytes);
}

}  // namespace gather_linear::timing
