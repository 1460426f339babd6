// GETT configuration: bfloat16, 128x256x64 block tile, no cluster, cooperative (both consumer
// warpgroups on one tile): problems of a few waves.
#include "cuda/gett_kernel.cuh"

namespace gather_linear::cuda::gett {

const Variant& bf16_cooperative_128x256() {
  static const Variant variant = Gett<DType::bfloat16, 128, 256, 64, 1, 1, Schedule::cooperative>::variant("bf16_cooperative_128x256");
  return variant;
}

}  // namespace gather_linear::cuda::gett
