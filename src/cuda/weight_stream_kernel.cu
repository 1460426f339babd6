// The weight-streaming kernel's entry points: which problems it takes, and its configuration per
// row count (the kernel itself: weight_stream_kernel.cuh).
#include "cuda/weight_stream_kernel.cuh"

namespace gather_linear::cuda {
namespace weight_stream {

// One, two, three or four n8 groups of rows, 16 outputs per warp; warps per block and blocks per
// tile by launch()'s rule (eight warps, one block, where the tiles are more than the SMs). Steps in
// flight: four for up to 8 rows, two from 9, where x's loads double (exact float32 on three
// groups: four). With 17 to 24 rows three groups took 0.59-0.96x the time of four in every shape
// measured (4-256 MB; bfloat16, TF32, exact float32; an H200 and an H100:
// weight_stream_three_groups_*_session53.csv). In 16-bit and TF32 they need 80-81 registers a
// thread against four groups' 86-90, so two blocks of 12 warps fit an SM; and the MMAs four groups
// spend on absent rows go. Four steps took up to 1.4x the time against 72-128 MB weights with 16
// rows; with 17 to 32 rows 0.88-1.53x the time of two, 1.06-1.28x against weights of up to 8 MB in
// 16-bit and TF32 (where the dispatcher uses them) and 0.97-1.12x in exact float32
// (weight_stream_rows_first_h200.csv). Four warps took 0.94-1.52x the time of eight; a warp's
// steps consecutive rather than interleaved (a variant since removed) 0.98-1.07x
// (weight_stream_variants_h200.csv; the CSVs are in bench/results/).
template <mma::Mode M>
void launch_for_rows(const Problem& p, CudaStream stream, WeightStreamTuning tuning) {
  if (p.B <= 8)
    launch<M, 1, 4>(p, stream, tuning);
  else if (p.B <= 16)
    launch<M, 2, 2>(p, stream, tuning);
  else if (p.B <= 24)
    launch<M, 3, M == mma::Mode::tf32x3 ? 4 : 2>(p, stream, tuning);
  else
    launch<M, 4, 2>(p, stream, tuning);
}

}  // namespace weight_stream

std::string weight_stream_why_not(const Problem& p) {
  if (p.dtype == DType::float64) return "supports float32, float16 and bfloat16, got float64";
  if (p.B > kWeightStreamMaxRows)
    return "serves at most " + std::to_string(kWeightStreamMaxRows) + " rows of x (B), got " + std::to_string(p.B);
  if (!gather_vectorizable(p, static_cast<int>(16 / dtype_size(p.dtype))))
    return "needs 16-byte chunks: H a multiple of " + std::to_string(16 / dtype_size(p.dtype)) +
           " elements, x contiguous along H, x's and W's strides multiples of 16 bytes, 16-byte aligned x and W";
  // 32-bit reduction and output indices (the fast division needs values below 2^31).
  if (p.RH >= (std::int64_t{1} << 30) || p.K >= (std::int64_t{1} << 31) - 32)
    return "too large for 32-bit indexing (R*H below 2^30, K below 2^31 - 32)";
  return {};
}

void run_weight_stream(const Problem& p, Fp32Precision precision, CudaStream stream, WeightStreamTuning tuning) {
  switch (mma_mode_for(p, precision)) {
    case mma::Mode::f16: weight_stream::launch_for_rows<mma::Mode::f16>(p, stream, tuning); break;
    case mma::Mode::bf16: weight_stream::launch_for_rows<mma::Mode::bf16>(p, stream, tuning); break;
    case mma::Mode::tf32: weight_stream::launch_for_rows<mma::Mode::tf32>(p, stream, tuning); break;
    case mma::Mode::tf32x3: weight_stream::launch_for_rows<mma::Mode::tf32x3>(p, stream, tuning); break;
  }
}

}  // namespace gather_linear::cuda
