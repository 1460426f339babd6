// The GETT family's checks and its choice of configuration per shape class. No CUTLASS here:
// the configurations themselves live in the gett_<name>.cu translation units.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/device_info.hpp"
#include "cuda/gett_kernel.hpp"

namespace gather_linear::cuda {
namespace gett {

Problem with_canonical_unit_strides(const Problem& p) {
  Problem q = p;
  if (q.R == 1) q.x_stride_r = q.H;
  if (q.B == 1) q.x_stride_b = q.H;
  if (q.K == 1) q.weight_stride_k = q.RH;
  if (q.B == 1) q.y_stride_b = q.K;
  return q;
}

std::string shape_why_not(const Problem& problem, int tile_k, std::size_t element_bytes) {
  const int device = problem.device.index;
  const int major = compute_capability_major(device), minor = compute_capability_minor(device);
  if (major != 9 || minor != 0)
    return "needs an sm_90 GPU (wgmma and TMA, built for sm_90a); this one is sm_" + std::to_string(major) +
           std::to_string(minor);
  const Problem p = with_canonical_unit_strides(problem);
  if (p.B == 0 || p.K == 0 || p.RH == 0) return "needs a non-empty problem";
  if (std::max({p.R, p.B, p.H, p.K}) > INT_MAX) return "needs every extent below 2^31";
  if (p.x_stride_h != 1) return "needs x's h stride to be 1, got " + std::to_string(p.x_stride_h);
  const auto bytes16 = [&](std::int64_t elements) { return elements > 0 && elements * element_bytes % 16 == 0; };
  const auto aligned16 = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  if (!bytes16(p.H))
    return "needs H * element size to be a multiple of 16 bytes (TMA), got H = " + std::to_string(p.H);
  if (p.H % tile_k != 0 && tile_k % p.H != 0)
    return "needs H to be a multiple or a divisor of the " + std::to_string(tile_k) + "-deep K tile, got H = " +
           std::to_string(p.H);
  if (!bytes16(p.x_stride_b) || !bytes16(p.x_stride_r))
    return "needs x's b and r strides to be positive multiples of 16 bytes (TMA), got " +
           std::to_string(p.x_stride_b) + " and " + std::to_string(p.x_stride_r) + " elements";
  if (!bytes16(p.weight_stride_k)) return "needs weight's row stride to be a multiple of 16 bytes (TMA)";
  if (!bytes16(p.K) || !bytes16(p.y_stride_b))
    return "needs K and y's row stride to be multiples of 16 bytes (TMA store), got K = " + std::to_string(p.K);
  if (!aligned16(p.x) || !aligned16(p.weight) || !aligned16(p.y) || !aligned16(p.bias))
    return "needs x, weight, bias and y to start on 16-byte boundaries";
  return {};
}

std::vector<const Variant*> library_variants() {
  return {&bf16_pingpong_128x128_c2x1_epi64x64(), &bf16_pingpong_128x128_c2x1_epi64x128(),
          &bf16_cooperative_128x256(),            &bf16_cooperative_128x128(),
          &f16_pingpong_128x128_c2x1_epi64x64(),  &f16_pingpong_128x128_c2x1_epi64x128(),
          &f16_cooperative_128x256(),             &f16_cooperative_128x128(),
          &tf32_pingpong_128x128(),               &tf32_cooperative_128x256(),
          &tf32_cooperative_128x128()};
}

// Measured on an H200 (bench/kernel_variants.cu gett, bench/results/gett_tuning_h200.csv).
const Variant& choose(const Problem& p) {
  const bool f16 = p.dtype == DType::float16, tf32 = p.dtype == DType::float32;
  const double sms = multiprocessor_count(p.device.index);
  const auto tiles = [&](int tile_m, int tile_n) {
    return static_cast<double>((p.B + tile_m - 1) / tile_m) * static_cast<double>((p.K + tile_n - 1) / tile_n);
  };
  const double square = tiles(128, 128), wide = tiles(128, 256);
  // Many waves of tiles, or short reductions (epilogue-bound): ping-pong, which overlaps one
  // warpgroup's epilogue with the other's mainloop, was fastest (16-bit with a 2x1 cluster that
  // multicasts W's tiles): about 0.96x cuBLAS's time on the largest problems. Its epilogue
  // sub-tile: 64x128 where writing y bounds the time (R*H <= 256: 0.98x cuBLAS at
  // (4,16384,64,8192), against 1.02x with 64x64), 64x64 for deeper reductions, whose mainloop
  // needs the shared memory that 64x128 staging takes (1.07x cuBLAS with 64x128 there).
  if (p.RH <= 256 || square >= 3.5 * sms) {
    if (tf32) return tf32_pingpong_128x128();
    if (p.RH <= 256) return f16 ? f16_pingpong_128x128_c2x1_epi64x128() : bf16_pingpong_128x128_c2x1_epi64x128();
    return f16 ? f16_pingpong_128x128_c2x1_epi64x64() : bf16_pingpong_128x128_c2x1_epi64x64();
  }
  // A few waves: the 128x256 tile moves the fewest bytes per multiply-add, unless it leaves much
  // more of the last wave idle than 128x128 tiles would (share of SMs the last wave keeps busy).
  const auto wave_fill = [&](double t) { return t / (std::ceil(t / sms) * sms); };
  const bool take_wide = wave_fill(wide) >= wave_fill(square) - 0.1;
  if (tf32) return take_wide ? tf32_cooperative_128x256() : tf32_cooperative_128x128();
  if (take_wide) return f16 ? f16_cooperative_128x256() : bf16_cooperative_128x256();
  return f16 ? f16_cooperative_128x128() : bf16_cooperative_128x128();
}

bool outruns_unfused(const Problem& p) {
  // x's slices must be whole 128-byte rows of the K tile (H a multiple of it): narrower slices
  // split every TMA box into 16- to 64-byte rows (H = 16 ran at a third of the unfused speed).
  const std::int64_t tile_k = p.dtype == DType::float32 ? 32 : 64;
  if (p.H % tile_k != 0) return false;
  // Below about 1.5M outputs (1M for TF32) the GPU is not filled with tiles, and cuBLAS's
  // small-problem kernels behind the concatenation win.
  return static_cast<double>(p.outputs()) >= (p.dtype == DType::float32 ? 1.0e6 : 1.5e6);
}

}  // namespace gett

std::string gett_why_not(const Problem& p, Fp32Precision precision) {
  if (p.dtype == DType::float32 && precision == Fp32Precision::ieee)
    return "runs float32 only as TF32 (Fp32Precision::tf32); exact float32 runs on cuda_tensor_core_mma";
  if (p.dtype != DType::float32 && p.dtype != DType::float16 && p.dtype != DType::bfloat16)
    return "supports bfloat16, float16 and float32 (as TF32), got " + std::string(dtype_name(p.dtype));
  return gett::choose(p).why_not(p);
}

std::size_t gett_workspace_bytes(const Problem& p) { return gett::choose(p).workspace_bytes(p); }

void run_gett(const Problem& p, Workspace workspace, CudaStream stream) {
  gett::choose(p).run(p, workspace, stream, gett::Tuning{});
}

}  // namespace gather_linear::cuda
