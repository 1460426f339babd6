// Device element types for each dtype, float conversions, 16-byte vector loads, and what the
// grid-stride copy kernels share (vectorization test, grid size, scratch alignment).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "cuda/cuda_check.hpp"
#include "cuda/device_info.hpp"
#include "gather_linear/tensor_view.hpp"

namespace gather_linear::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// What the kernels that take float64 (the latency and SIMT kernels, the unfused baseline's and
// the backward's helpers) accumulate T in: float for the 16-bit types and float32, double for
// float64, so that each keeps its dtype's accuracy.
template <class T> using Accumulator = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T> __device__ __forceinline__ Accumulator<T> to_accumulator(T v) {
  if constexpr (std::is_same_v<T, double>)
    return v;
  else
    return to_float(v);
}
template <class T> __device__ __forceinline__ T from_accumulator(Accumulator<T> v) {
  if constexpr (std::is_same_v<T, double>)
    return v;
  else
    return from_float<T>(v);
}
__device__ __forceinline__ float fused_multiply_add(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fused_multiply_add(double a, double b, double c) { return fma(a, b, c); }

// n / d for a divisor fixed at launch, as a multiply-high and a shift (valid for n < 2^31):
// with l = ceil(log2 d) and m = floor(2^(31+l) / d) + 1, n*m / 2^(31+l) exceeds n/d by less
// than 1/d, which cannot carry past the next integer.
struct FastDivider {
  std::uint32_t divisor = 1, multiplier = 0, shift = 0;
  FastDivider() = default;
  explicit FastDivider(std::uint32_t d) : divisor(d) {
    if (d <= 1) return;
    std::uint32_t l = 0;
    while ((std::uint64_t{1} << l) < d) ++l;
    multiplier = static_cast<std::uint32_t>((std::uint64_t{1} << (31 + l)) / d + 1);
    shift = l - 1;
  }
  __device__ __forceinline__ std::uint32_t quotient(std::uint32_t n) const {
    return divisor <= 1 ? n : __umulhi(n, multiplier) >> shift;
  }
};

// Whether this build's sm_90 machine code runs on `device`: code JIT-compiled from the build's
// older PTX (e.g. on a newer GPU) lacks the sm_90-only instructions (grid dependency control,
// thread block clusters), so kernels use those only where this holds.
inline bool runs_sm90_code(int device) {
  bool built_for_sm90 = false;
#ifdef __CUDA_ARCH_LIST__
  for (int arch : {__CUDA_ARCH_LIST__}) built_for_sm90 = built_for_sm90 || arch == 900;
#endif
  return built_for_sm90 && compute_capability_major(device) == 9 && compute_capability_minor(device) == 0;
}

// Programmatic dependent launch (Hopper): when a kernel is launched with programmatic stream
// serialization, its blocks may start while the previous kernel in the stream is still
// finishing; everything before the wait (index arithmetic, L2 prefetches) then overlaps that
// kernel's tail. The wait returns once the previous grid has completed and its writes are
// visible, so every read of x, W and bias and every write of y comes after it. Only sm_90
// machine code has the wait, so only where it runs (runs_sm90_code) may a kernel be launched
// programmatically.
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel in the stream launch once every block of this one has called it (or
// exited). Safe anywhere after the wait: the dependents wait for our completion before touching
// memory; the earlier the call, the sooner their blocks take SM slots and start their preambles.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Enqueues kernel(args) on `stream`, as a programmatic dependent launch where `programmatic`
// holds and the device runs this build's sm_90 code; the kernel waits with
// wait_for_prerequisite_grid before touching memory. A cluster_size above 1 groups that many
// consecutive blocks along x into a thread block cluster (sm_90 code only: the caller checks
// runs_sm90_code; grid.x a multiple of it).
template <class Args>
void launch_maybe_programmatic(void (*kernel)(Args), const std::type_identity_t<Args>& args, dim3 grid, dim3 block,
                               std::size_t shared_bytes, cudaStream_t stream, int device, bool programmatic,
                               const char* name, unsigned cluster_size = 1) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (programmatic && runs_sm90_code(device)) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_size > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count++].val.clusterDim = {cluster_size, 1, 1};
  }
  config.attrs = attributes;
  config.numAttrs = count;
  check(cudaLaunchKernelEx(&config, kernel, args), name);
}

// Elements of T in one 16-byte access.
template <class T> inline constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

// Loads N consecutive elements (N * sizeof(T) is 16 bytes, or N == 1) widened to T's
// accumulator (float; double for float64).
template <class T, int N>
__device__ __forceinline__ void load_as_accumulator(const T* __restrict__ p, Accumulator<T> (&out)[N]) {
  if constexpr (N == 1) {
    out[0] = to_accumulator(__ldg(p));
  } else {
    static_assert(N * sizeof(T) == 16, "vector loads are 16 bytes");
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_accumulator(v[i]);
  }
}

// Calls f.template operator()<T>() with the device type of a dtype the tensor-core kernels support
// (float32, float16, bfloat16); callers have checked the dtype.
template <class F> decltype(auto) visit_device_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::float16: return f.template operator()<__half>();
    case DType::bfloat16: return f.template operator()<__nv_bfloat16>();
    default: return f.template operator()<float>();
  }
}
// The same, float64 (double) included: for the kernels that take every dtype.
template <class F> decltype(auto) visit_any_device_dtype(DType dtype, F&& f) {
  if (dtype == DType::float64) return f.template operator()<double>();
  return visit_device_dtype(dtype, std::forward<F>(f));
}

inline bool aligned_to(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// True when an (R, B, H) view with unit stride in h can move in groups of n elements: every
// group starting at a multiple of n lies in one slice, and starts on a 16-byte boundary.
inline bool slices_vectorizable(const void* data, std::int64_t R, std::int64_t B, std::int64_t H,
                                std::int64_t stride_r, std::int64_t stride_b, std::int64_t stride_h, int n) {
  const auto divisible = [n](std::int64_t stride, std::int64_t extent) { return extent <= 1 || stride % n == 0; };
  return H % n == 0 && (stride_h == 1 || H == 1) && divisible(stride_r, R) && divisible(stride_b, B) &&
         aligned_to(data, 16);
}

// Blocks of 256 threads for a grid-stride loop over `items`: enough to fill the device, no more.
inline unsigned grid_stride_blocks(std::int64_t items, int device) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((items + 255) / 256, 1, 16 * multiprocessor_count(device)));
}

// Parts of one scratch buffer each start on a 256-byte boundary (cuBLASLt's preference, and
// enough for 16-byte vector accesses).
inline std::size_t round_up_to_256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace gather_linear::cuda

#include "core/problem.hpp"

namespace gather_linear::cuda {

// True when x's slices can be read in groups of n (slices_vectorizable) and so can each weight
// row: then the gathered operand and the weight can be read with 16-byte loads.
inline bool gather_vectorizable(const Problem& p, int n) {
  return slices_vectorizable(p.x, p.R, p.B, p.H, p.x_stride_r, p.x_stride_b, p.x_stride_h, n) &&
         (p.K <= 1 || p.weight_stride_k % n == 0) && aligned_to(p.weight, 16);
}

// The operands and element strides every fused kernel reads: one block of its kernel parameters.
struct Operands {
  const void* x;
  const void* weight;
  const void* bias;  // null: no bias
  void* y;
  std::int64_t x_stride_r, x_stride_b, x_stride_h, weight_stride_k, y_stride_b;
};

inline Operands operands_of(const Problem& p) {
  return {p.x, p.weight, p.bias, p.y, p.x_stride_r, p.x_stride_b, p.x_stride_h, p.weight_stride_k, p.y_stride_b};
}

}  // namespace gather_linear::cuda
