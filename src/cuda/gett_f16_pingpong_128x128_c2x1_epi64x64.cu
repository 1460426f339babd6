// GETT configuration: float16, 128x128x64 block tile, 2x1 cluster, ping-pong: large problems and short
// reductions.
#include "cuda/gett_kernel.cuh"

namespace gather_linear::cuda::gett {

const Variant& f16_pingpong_128x128_c2x1() {
  static const Variant variant = Gett<DType::float16, 128, 128, 64, 2, 1, Schedule::pingpong>::variant("f16_pingpong_128x128_c2x1");
  return variant;
}

}  // namespace gather_linear::cuda::gett
