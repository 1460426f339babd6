// GETT configuration: bfloat16, 128x128x64 block tile, 2x1 cluster (W tiles multicast to both
// blocks), ping-pong (one warpgroup's epilogue overlaps the other's mainloop), 64x64 epilogue
// sub-tiles: problems with many waves of tiles and reductions deeper than 256.
#include "cuda/gett_kernel.cuh"

namespace gather_linear::cuda::gett {

const Variant& bf16_pingpong_128x128_c2x1_epi64x64() {
  static const Variant variant = Gett<DType::bfloat16, 128, 128, 64, 2, 1, Schedule::pingpong, 64, 64>::variant(
      "bf16_pingpong_128x128_c2x1_epi64x64");
  return variant;
}

}  // namespace gather_linear::cuda::gett
