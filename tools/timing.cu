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

double time_cpu_us(const std::function<void()>& run, int repeats) {
  run();
  std::vector<double> samples;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  return median(samples);
}

GpuTiming time_gpu(const std::function<void(int set)>& launch, int sets, int repeats, CudaStream stream) {
  using cuda::check;
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
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < per_graph; ++i) launch(i % sets);
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  std::vector<double> graph_samples, event_samples;
  for (int i = 0; i < repeats; ++i) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    graph_samples.push_back(elapsed_us() / per_graph);
  }
  for (int i = 0; i < repeats * 4; ++i) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    launch(i % sets);
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    event_samples.push_back(elapsed_us());
  }
  check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  check(cudaEventDestroy(start), "cudaEventDestroy");
  check(cudaEventDestroy(stop), "cudaEventDestroy");
  return {median(graph_samples), median(event_samples)};
}

std::size_t gpu_l2_bytes(int device) {
  int bytes = 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess) return 0;
  return static_cast<std::size_t>(bytes);
}

}  // namespace gather_linear::timing
