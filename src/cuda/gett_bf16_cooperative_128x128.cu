// GETT configuration: bfloat16, 128x128x64 block tile, no cluster, cooperative: problems of one or two
// waves.
#include "cuda/gett_kernel.cuh"

namespace gather_linear::cuda::gett {

const Variant& bf16_cooperative_128x128() {
  static const Variant variant = Gett<DType::bfloat16, 128, 128, 64, 1, 1, Schedule::cooperative>::variant("bf16_cooperative_128x128");
  return variant;
}

}  // namespace gather_linear::cuda::gett
