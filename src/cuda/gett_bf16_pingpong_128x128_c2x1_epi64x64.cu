// GETT configuration: bfloat16, 128x128x64 block tile, 2x1 cluster (W tiles multicast to both blocks),
// ping-pong (one warpgroup's epilogue overlaps the other's mainloop): large problems and short
// reductions.
#include "cuda/gett_kernel.cuh"

namespace gather_linear::cuda::gett {

const Variant& bf16_pingpong_128x128_c2x1() {
  static const Variant variant = Gett<DType::bfloat16, 128, 128, 64, 2, 1, Schedule::pingpong>::variant("bf16_pingpong_128x128_c2x1");
  return variant;
}

}  // namespace gather_linear::cuda::gett
