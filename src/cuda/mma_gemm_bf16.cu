// The mma.sync kernel family in mode bf16 (one translation unit per mode keeps builds parallel).
#include "cuda/mma_gemm_kernel.cuh"

namespace gather_linear::cuda::mma {
template void run_mode<Mode::bf16>(const Problem&, MmaTile, CudaStream);
}  // namespace gather_linear::cuda::mma
