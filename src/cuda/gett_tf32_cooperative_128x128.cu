// GETT configuration: float32 as TF32, 128x128x32 block tile, no cluster, cooperative: problems of one
// or two waves.
#include "cuda/gett_kernel.cuh"

namespace gather_linear::cuda::gett {

const Variant& tf32_cooperative_128x128() {
  static const Variant variant = Gett<DType::float32, 128, 128, 32, 1, 1, Schedule::cooperative>::variant("tf32_cooperative_128x128");
  return variant;
}

}  // namespace gather_linear::cuda::gett
