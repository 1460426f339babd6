// GETT configuration: float16, 128x256x64 block tile, no cluster, cooperative: problems of a few
// waves.
#include "cuda/gett_kernel.cuh"

namespace gather_linear::cuda::gett {

const Variant& f16_cooperative_128x256() {
  static const Variant variant = Gett<DType::float16, 128, 256, 64, 1, 1, Schedule::cooperative>::variant("f16_cooperative_128x256");
  return variant;
}

}  // namespace gather_linear::cuda::gett
