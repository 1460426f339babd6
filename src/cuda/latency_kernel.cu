// The latency kernel's production configuration: 2 x 2 outputs per warp (see latency_kernel.cuh;
// bench/latency_tiles.cu measures the alternatives).
#include "cuda/latency_kernel.cuh"
#include "cuda/latency_kernel.hpp"

namespace gather_linear::cuda {

using latency::kWarpsPerBlock;

std::string latency_kernel_why_not(const Problem& p) {
  if (p.dtype == DType::float64) return "float64 is not supported on CUDA";
  // One warp per output tile: beyond this the grid itself would be the problem.
  if (((p.B + 1) / 2 * ((p.K + 1) / 2) + kWarpsPerBlock - 1) / kWarpsPerBlock > 0x7fffffff)
    return "too many outputs for one warp per output tile";
  return {};
}

void run_latency_kernel(const Problem& p, CudaStream stream) {
  visit_device_dtype(p.dtype, [&]<class T>() {
    if (gather_vectorizable(p, kVec16<T>))
      latency::launch<T, kVec16<T>, 2, 2>(p, stream);
    else
      latency::launch<T, 1, 2, 2>(p, stream);
  });
}

}  // namespace gather_linear::cuda
