// The second kernel of a GETT whose reduction is split (gett_kernel.cuh, kSplitReduction): it
// adds the parts' float32 partial sums and the bias, in a fixed order, and rounds once into y.
#include "cuda/device_types.cuh"
#include "cuda/gett_kernel.hpp"

namespace gather_linear::cuda::gett {
namespace {

// Four consecutive outputs of one row: K and y's row stride are multiples of 16 bytes (the GETT's
// rule), so four elements of any dtype are one aligned access.
template <class T> struct alignas(4 * sizeof(T)) Four {
  T v[4];
};

template <class T> struct PartialSums {
  const float* partials;  // splits x B x K, contiguous
  const T* bias;          // null: none
  T* y;
  std::int64_t y_stride_b;
  std::uint32_t quads_per_row;  // K / 4
  std::uint32_t quads;          // B * K / 4
  std::uint32_t part_stride;    // B * K
  int splits;
};

template <class T> __global__ void add_partial_sums_kernel(PartialSums<T> a) {
  wait_for_prerequisite_grid();  // the GEMM's partial sums are complete and visible
  for (std::uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < a.quads; q += gridDim.x * blockDim.x) {
    const std::uint32_t b = q / a.quads_per_row, k = (q - b * a.quads_per_row) * 4;
    float sum[4] = {0.f, 0.f, 0.f, 0.f};
    if (a.bias != nullptr) {
      const Four<T> bias = *reinterpret_cast<const Four<T>*>(a.bias + k);
      for (int i = 0; i < 4; ++i) sum[i] = to_float(bias.v[i]);
    }
    const float* part = a.partials + static_cast<std::size_t>(q) * 4;
    for (int s = 0; s < a.splits; ++s, part += a.part_stride) {
      const float4 v = __ldcs(reinterpret_cast<const float4*>(part));
      sum[0] += v.x, sum[1] += v.y, sum[2] += v.z, sum[3] += v.w;
    }
    Four<T> out;
    for (int i = 0; i < 4; ++i) out.v[i] = from_float<T>(sum[i]);
    *reinterpret_cast<Four<T>*>(a.y + b * a.y_stride_b + k) = out;
  }
}

}  // namespace

void add_partial_sums(const Problem& p, const float* partials, int splits, CudaStream stream) {
  visit_device_dtype(p.dtype, [&]<class T>() {
    const PartialSums<T> args{partials,
                              static_cast<const T*>(p.bias),
                              static_cast<T*>(p.y),
                              p.y_stride_b,
                              static_cast<std::uint32_t>(p.K / 4),
                              static_cast<std::uint32_t>(p.B * p.K / 4),
                              static_cast<std::uint32_t>(p.B * p.K),
                              splits};
    constexpr int kThreads = 256;
    const int blocks = static_cast<int>(std::min<std::int64_t>((args.quads + kThreads - 1) / kThreads,
                                                               4 * multiprocessor_count(p.device.index)));
    // Programmatic: its launch overlaps the GEMM's last blocks.
    launch_maybe_programmatic(add_partial_sums_kernel<T>, args, dim3(blocks), dim3(kThreads), 0, stream,
                              p.device.index, true, "add_partial_sums kernel");
  });
}

}  // namespace gather_linear::cuda::gett
