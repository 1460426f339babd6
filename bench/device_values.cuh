// Device values for the CUDA benchmarks: inputs filled with hashed uniform values in [-0.5, 0.5)
// (reproducible from a seed, no host round trip), and results downloaded as float to compare.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "cuda/device_types.cuh"

namespace gather_linear::bench {

template <class T>
__global__ void fill_uniform_kernel(T* p, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    p[i] = cuda::from_accumulator<T>(static_cast<float>(h & 0xffffu) / 65536.f - 0.5f);
  }
}

// Enqueues the fill of n elements of `dtype` at p on `stream`.
inline void fill_uniform(void* p, std::size_t n, DType dtype, unsigned seed, cudaStream_t stream) {
  cuda::visit_any_device_dtype(dtype, [&]<class T>() {
    fill_uniform_kernel<<<1024, 256, 0, stream>>>(static_cast<T*>(p), n, seed);
    cuda::check_launch("fill_uniform_kernel");
  });
}

// n elements of `dtype` (any, float64 included) at p, copied to the host (synchronously) and widened to float.
inline std::vector<float> download_as_float(const void* p, std::size_t n, DType dtype) {
  std::vector<float> h(n);
  cuda::visit_any_device_dtype(dtype, [&]<class T>() {
    std::vector<T> raw(n);
    cuda::check(cudaMemcpy(raw.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<float>(raw[i]);
  });
  return h;
}

}  // namespace gather_linear::bench
