// GETT configuration: float16, as f16_pingpong_128x128_c2x1_epi64x64 but with 64x128 epilogue
// sub-tiles: short reductions (R*H <= 256), where writing y bounds the time. Fewer, larger TMA
// stores per tile beat the mainloop stages the bigger staging buffer costs, which deeper
// reductions need.
#include "cuda/gett_kernel.cuh"

namespace gather_linear::cuda::gett {

const Variant& f16_pingpong_128x128_c2x1_epi64x128() {
  static const Variant variant = Gett<DType::float16, 128, 128, 64, 2, 1, Schedule::pingpong, 64, 128>::variant(
      "f16_pingpong_128x128_c2x1_epi64x128");
  return variant;
}

}  // namespace gather_linear::cuda::gett
