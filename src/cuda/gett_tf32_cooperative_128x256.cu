// GETT configuration: float32 as TF32, 128x256x32 block tile, no cluster, cooperative: problems of a
// few waves.
#include "cuda/gett_kernel.cuh"

namespace gather_linear::cuda::gett {

const Variant& tf32_cooperative_128x256() {
  static const Variant variant = Gett<DType::float32, 128, 256, 32, 1, 1, Schedule::cooperative>::variant("tf32_cooperative_128x256");
  return variant;
}

}  // namespace gather_linear::cuda::gett
