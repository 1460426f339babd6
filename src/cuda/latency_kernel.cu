// The latency kernel's production configurations (see latency_kernel.cuh): 2x2 or 4x4 outputs
// per 32-lane group by problem size; bench/kernel_variants.cu measures the alternatives.
#include "cuda/latency_kernel.cuh"
#include "cuda/latency_kernel.hpp"

namespace gather_linear::cuda {

std::string latency_kernel_why_not(const Problem& p) {
  // 32-bit thread indexing (fast division needs values below 2^31): for small problems only.
  if (p.outputs() >= (std::int64_t{1} << 26) || p.RH + 32 * 16 * 4 >= (std::int64_t{1} << 31) ||
      p.H >= (std::int64_t{1} << 31))
    return "too large for 32-bit thread indexing (it is meant for small problems)";
  return {};
}

// Output tile per lane group, by problem size (bench/kernel_variants.cu measures them): small
// tiles keep many warps in flight for tiny problems; bigger ones reuse each load more.
template <class T, int VEC>
void launch_for_size(const Problem& p, CudaStream stream) {
  if (p.outputs() <= kLatencySmallTileOutputs)
    latency::launch<T, VEC, 2, 2, 32, 1>(p, stream);
  else
    latency::launch<T, VEC, 4, 4, 32, 1>(p, stream);
}

void run_latency_kernel(const Problem& p, CudaStream stream) {
  visit_any_device_dtype(p.dtype, [&]<class T>() {
    if (gather_vectorizable(p, kVec16<T>))
      launch_for_size<T, kVec16<T>>(p, stream);
    else
      launch_for_size<T, 1>(p, stream);
  });
}

}  // namespace gather_linear::cuda
