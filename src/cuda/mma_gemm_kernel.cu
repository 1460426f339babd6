// Dispatch within the tensor-core family: precision mode from dtype and policy, tile from size.
#include "cuda/device_info.hpp"
#include "cuda/device_types.cuh"
#include "cuda/mma_gemm_kernel.hpp"

namespace gather_linear::cuda {

mma::Mode mma_mode_for(const Problem& p, Fp32Precision precision) {
  switch (p.dtype) {
    case DType::float16: return mma::Mode::f16;
    case DType::bfloat16: return mma::Mode::bf16;
    default: return precision == Fp32Precision::tf32 ? mma::Mode::tf32 : mma::Mode::tf32x3;
  }
}

std::string mma_gemm_why_not(const Problem& p) {
  if (p.dtype == DType::float64) return "supports float32, float16 and bfloat16, got float64";
  // cp.async moves 16-byte chunks: each must lie inside one slice of x and one row of W.
  if (!gather_vectorizable(p, static_cast<int>(16 / dtype_size(p.dtype))))
    return "needs 16-byte chunks: H a multiple of " + std::to_string(16 / dtype_size(p.dtype)) +
           " elements, x contiguous along H, x's and W's strides multiples of 16 bytes, 16-byte aligned x and W";
  if ((p.B + 63) / 64 * ((p.K + 63) / 64) > 0x7fffffff) return "more output tiles than a grid can hold";
  return {};
}

void run_mma_gemm(const Problem& p, Fp32Precision precision, CudaStream stream, MmaTile tile) {
  const mma::Mode mode = mma_mode_for(p, precision);
  if (tile == MmaTile::automatic) {
    // The largest tile whose grid still covers every multiprocessor. Exact float32 (three
    // MMAs per product, more registers) runs best at 128 x 64 even on large problems.
    const std::int64_t sms = multiprocessor_count(p.device.index);
    const auto tiles = [&](int bm, int bn) { return (p.B + bm - 1) / bm * ((p.K + bn - 1) / bn); };
    tile = mode != mma::Mode::tf32x3 && tiles(128, 128) >= sms ? MmaTile::rows128_cols128
           : tiles(128, 64) >= sms                              ? MmaTile::rows128_cols64
                                                                : MmaTile::rows64_cols64;
  }
  switch (mode) {
    case mma::Mode::tf32x3: mma::run_mode<mma::Mode::tf32x3>(p, tile, stream); break;
    case mma::Mode::tf32: mma::run_mode<mma::Mode::tf32>(p, tile, stream); break;
    case mma::Mode::f16: mma::run_mode<mma::Mode::f16>(p, tile, stream); break;
    case mma::Mode::bf16: mma::run_mode<mma::Mode::bf16>(p, tile, stream); break;
  }
}

}  // namespace gather_linear::cuda
