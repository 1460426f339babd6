// The GETT family's checks and its choice of configuration per shape class. No CUTLASS here: the
// configurations themselves live in the generated gett_<dtype>[_weight_rows].cu translation units.
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
          &bf16_cooperative_128x64(),             &f16_cooperative_128x64(),
          &bf16_pingpong_64x64(),                 &f16_pingpong_64x64(),
          &tf32_pingpong_128x128(),               &tf32_cooperative_128x256(),
          &tf32_cooperative_128x128(),            &bf16_weight_rows_pingpong_64x32(),
          &f16_weight_rows_pingpong_64x32(),      &bf16_weight_rows_pingpong_64x64(),
          &f16_weight_rows_pingpong_64x64(),      &tf32_weight_rows_pingpong_64x32(),
          &bf16_weight_rows_pingpong_64x32_c4x1(), &f16_weight_rows_pingpong_64x32_c4x1(),
          &bf16_weight_rows_pingpong_64x64_c4x1(), &f16_weight_rows_pingpong_64x64_c4x1(),
          &tf32_weight_rows_pingpong_64x32_c4x1(),
          &bf16_weight_rows_split_pingpong_64x32(), &f16_weight_rows_split_pingpong_64x32(),
          &bf16_weight_rows_split_pingpong_64x64(), &f16_weight_rows_split_pingpong_64x64(),
          &tf32_weight_rows_split_pingpong_64x32()};
}

namespace {
// Output tiles of tile_m of x's rows by tile_n of the weight's (either operand as the GEMM's M).
double tile_count(const Problem& p, int tile_m, int tile_n) {
  return static_cast<double>((p.B + tile_m - 1) / tile_m) * static_cast<double>((p.K + tile_n - 1) / tile_n);
}
}  // namespace

bool can_split_reduction(const Problem& p, int splits, int tile_k) {
  if (splits == 1) return true;
  if (splits < 1 || p.R % splits != 0) return false;
  // Parts of whole K tiles: where a K tile spans several slices (H a divisor of tile_k, below
  // it), a part of fewer slices would leave part of its last tile empty. Other widths, which the
  // GETT refuses (shape_why_not), allow no split (and must not reach the division below).
  if (p.H % tile_k == 0) return true;
  if (tile_k % p.H != 0) return false;
  return (p.R / splits) % (tile_k / p.H) == 0;
}

int reduction_splits(const Problem& p, int tile_n, int tile_k) {
  constexpr int kMostSplits = 16;
  const double sms = multiprocessor_count(p.device.index);
  const double tiles = tile_count(p, tile_n, 64);  // 64 of the weight's rows by tile_n of x's
  // The most parts that still fit every block in one wave.
  int best = 1;
  for (int splits = 2; splits <= kMostSplits && tiles * splits <= sms; ++splits)
    if (can_split_reduction(p, splits, tile_k)) best = splits;
  return best;
}

std::size_t partial_sums_bytes(const Problem& p, int splits) {
  return static_cast<std::size_t>(splits) * static_cast<std::size_t>(p.B) * static_cast<std::size_t>(p.K) *
         sizeof(float);
}

namespace {
// The weight's 64-row tiles: the M tiles of every configuration with the weight's rows as M.
std::int64_t weight_tiles(const Problem& p) { return (p.K + 63) / 64; }
}  // namespace

double weight_tiles_per_sm(const Problem& p) {
  return static_cast<double>(weight_tiles(p)) / multiprocessor_count(p.device.index);
}

namespace {
// Below this many outputs a 16-bit problem has too few 128x128 tiles to fill the GPU (1M for TF32,
// whose mid-size problems stay with cuBLAS).
constexpr double kMidSizeOutputs = 1.5e6;
constexpr double kMidSizeOutputsTf32 = 1.0e6;

// A mid-size 16-bit problem on small tiles: 128x64 (cooperative) from about half a wave of them,
// else 64x64 (ping-pong, one warpgroup per tile; then at most 0.9 of a wave).
struct MidSizeTiles {
  bool small;         // 64x64
  double waves;       // blocks over SMs
  double block_macs;  // multiply-adds of one block's tile
};
MidSizeTiles mid_size_tiles(const Problem& p) {
  const double sms = multiprocessor_count(p.device.index);
  const bool small = tile_count(p, 128, 64) < 0.45 * sms;
  const int tile_m = small ? 64 : 128, tile_n = 64;
  return {small, tile_count(p, tile_m, tile_n) / sms, static_cast<double>(tile_m * tile_n) * static_cast<double>(p.RH)};
}

// 17 to 64 rows of x (TF32: to 32) against 8 to 128 MB of weight (TF32: to 256 MB), beyond the
// weight-streaming kernel's reach: the weight's rows as M in 64-row tiles (where it has enough of
// them), x's rows in one N tile of 32 or 64. Against unfused: 16-bit 0.78-0.97x its time with up
// to 32 rows, 0.91-1.00x with 33 to 64; TF32 with up to 32 rows 0.79-1.00x (the tie at 144 MB).
// TF32 with 40 to 64 rows lost against 32-128 MB (1.06-1.27x; 0.85x at 16 MB) and stays with
// cuBLAS, as do 128 rows (1.01x) (bench/results/gett_weight_rows_h200.csv).
// The 64x32 and 64x64 tiles in clusters of four along M, whose TMA multicasts x's tile to the
// four blocks, while all the clusters fit the GPU at once: as many as cudaOccupancyMaxActiveClusters
// finds (Variant::clusters_at_once; 30 of four on an H100's 132 SMs), which the persistent
// scheduler is told (left to itself it guessed 29, and a 30th cluster's tiles waited for a second
// round: 1.08-1.13x unfused's time at 120 tiles). On an H100 against unfused (bench/results/
// gett_weight_rows_clusters_h100_session55*.csv, ..._at_once_h100_session57.csv): up to 32 rows
// 0.77-0.97x its time to 120 tiles, unclustered 0.79-1.05x (clusters behind only at 93 and 97
// tiles, 0.96-0.97x against 0.95x); 33 to 64 rows on 64x64 tiles 0.86-0.95x from 40 to 120 tiles,
// unclustered 0.92-1.03x. Past the bound (124-132 tiles) clusters took 1.10-1.15x, unclustered
// 0.95-0.96x. TF32's 64x32 tiles likewise, 17 to 32 rows on an H100 (bench/results/
// gett_weight_rows_tf32_clusters*_h100_session66.csv): at 32-96 tiles clusters 0.78-0.97x
// unfused's time, unclustered 0.80-1.05x (through the CLI, 96 tiles took 1.03x either way); at
// 104-120 tiles within 2% of each other (0.96-1.01x against 0.95-1.03x); at 128 tiles clusters
// 1.09-1.13x, unclustered 0.90-0.93x; in clusters of two no faster than alone. Not measured on an
// H200 (also 132 SMs; the query answers for each device).
bool clusters_fit_at_once(const Variant& v, const Problem& p) {
  const std::int64_t clusters_along_m = (weight_tiles(p) + v.cluster_size - 1) / v.cluster_size;
  const std::int64_t tiles_along_n = (p.B + v.tile_n - 1) / v.tile_n;
  return clusters_along_m * tiles_along_n <= v.clusters_at_once(p.device.index);
}

const Variant* weight_rows_variant(const Problem& p) {
  const bool f16 = p.dtype == DType::float16, tf32 = p.dtype == DType::float32;
  const double weight_bytes = static_cast<double>(p.weight_bytes()), MiB = 0x1p20;
  if (p.B < 17 || p.B > (tf32 ? 32 : 64) || weight_bytes < 8 * MiB || weight_bytes > (tf32 ? 256 : 128) * MiB)
    return nullptr;
  if (too_few_weight_tiles(p)) return nullptr;
  if (tf32) {
    const Variant& clustered = tf32_weight_rows_pingpong_64x32_c4x1();
    return clusters_fit_at_once(clustered, p) ? &clustered : &tf32_weight_rows_pingpong_64x32();
  }
  // 33 to 64 rows in one N tile of 64, unless the weight's tiles are so few (a quarter of the SMs)
  // that two N tiles of 32, each reading the weight's tile, read it faster: (16, 48-64, 128, 2048)
  // 0.96-0.97x the time of 64x64; with 64 or 128 tiles of 64x64 they took 1.01-1.38x.
  const bool tiles_of_32 = p.B <= 32 || weight_tiles_per_sm(p) <= 0.25;
  const Variant& clustered = tiles_of_32 ? (f16 ? f16_weight_rows_pingpong_64x32_c4x1() : bf16_weight_rows_pingpong_64x32_c4x1())
                                         : (f16 ? f16_weight_rows_pingpong_64x64_c4x1() : bf16_weight_rows_pingpong_64x64_c4x1());
  if (clusters_fit_at_once(clustered, p)) return &clustered;
  if (tiles_of_32) return f16 ? &f16_weight_rows_pingpong_64x32() : &bf16_weight_rows_pingpong_64x32();
  return f16 ? &f16_weight_rows_pingpong_64x64() : &bf16_weight_rows_pingpong_64x64();
}

// 17 to 128 rows of x against a weight with too few 64-row tiles for the SMs (too_few_weight_tiles:
// K up to 2,024 on the H200; from 8 tiles, the fewest measured): the same tiles, the reduction
// split into reduction_splits' parts so that its blocks fill a wave. Against unfused, weights of
// 4 to 128 MB at K = 512-1,984 (bench/results/gett_split_reduction_h200.csv): 16-bit from 8 MB,
// 0.81-0.96x its time with up to 32 rows, and 0.77-0.93x with 33 to 64 rows from 8 MB, or from
// 4 MB in 8 parts or more (in 4 parts below 8 MB 0.93-1.02x); measured to 64 MB. It also outruns
// the weight-streaming kernel above 8 MB (0.46-0.99x its time); at 8 MB it won five shapes of
// seven (0.80-0.95x; 1.04-1.06x with 17-20 rows at K = 1,024). TF32 with up to 32 rows from 8 MB
// (below, the weight-streaming kernel) to 128 MB: 0.70-0.87x unfused's time; with 33 to 64 rows
// 0.72-0.98x in 8 parts or more, in 4 up to 32 MB, in 2 up to 16 MB (in 4 parts at 64 MB
// 0.98-1.015x, in 2 from 18 MB 0.93-1.05x).
// 65 to 128 rows (two N tiles of 64; TF32 three or four of 32), K = 512-1,024 unless noted
// (bench/results/gett_split_reduction_many_rows_h200.csv): 16-bit from 4 to 16 MB in 4 parts or
// more, 0.82-0.97x unfused's time (at 18 MB 1.14x, at 32 MB 0.99x, in 2 parts at K = 1,536-1,792
// 0.97-1.32x); TF32 from 8 to 36 MB in 2 parts or more, 0.82-1.00x (at 64 MB 1.28x).
const Variant* split_reduction_variant(const Problem& p) {
  const bool f16 = p.dtype == DType::float16, tf32 = p.dtype == DType::float32;
  if (p.B < 17 || p.B > 128 || weight_tiles(p) < 8 || !too_few_weight_tiles(p) || p.H % (tf32 ? 32 : 64) != 0)
    return nullptr;
  const bool wide = p.B > 32;  // two N tiles of 32 or more for TF32, one of 64 or more for 16-bit
  const Variant& narrow_tiles = f16 ? f16_weight_rows_split_pingpong_64x32() : bf16_weight_rows_split_pingpong_64x32();
  const Variant& wide_tiles = f16 ? f16_weight_rows_split_pingpong_64x64() : bf16_weight_rows_split_pingpong_64x64();
  const Variant& variant = tf32 ? tf32_weight_rows_split_pingpong_64x32() : wide ? wide_tiles : narrow_tiles;
  const int splits = reduction_splits(p, variant.tile_n, variant.tile_k);
  const double weight_bytes = static_cast<double>(p.weight_bytes()), MiB = 0x1p20;
  if (splits < 2) return nullptr;
  if (p.B > 64) {
    if (tf32) return weight_bytes >= 8 * MiB && weight_bytes <= 36 * MiB ? &variant : nullptr;
    return splits >= 4 && weight_bytes >= 4 * MiB && weight_bytes <= 16 * MiB ? &variant : nullptr;
  }
  if (tf32) {
    if (weight_bytes < 8 * MiB || weight_bytes > 128 * MiB) return nullptr;
    if (wide && weight_bytes > (splits >= 8 ? 128 : splits >= 4 ? 32 : 16) * MiB) return nullptr;
  } else {
    const double least = wide && splits >= 8 ? 4 * MiB : 8 * MiB;
    if (weight_bytes < least || weight_bytes > 64 * MiB) return nullptr;
  }
  return &variant;
}
}  // namespace

bool takes_split_reduction(const Problem& p) { return split_reduction_variant(p) != nullptr; }

// Each block reads its 64 rows of the weight alone, so with few of them each takes long: 16 or 24
// tiles of 0.5-2 MB took 1.04-1.81x unfused's time (16-bit and TF32, 24 and 48 rows; 28 tiles at
// (32, 48, 128, 1792) bfloat16 0.98x); from 32 tiles they won (bench/results/
// gett_weight_rows_tiles_h200.csv).
bool too_few_weight_tiles(const Problem& p) { return weight_tiles_per_sm(p) < 0.24; }

namespace {
// TF32's 128x128 tiles against cooperative 128x256 ones where the reduction is deeper than 256
// (time / cuBLAS TF32 GEMM-only on the pre-concatenated input, kernel_variants gett_large): on an
// H200 ping-pong 128x128 took 0.98-1.05x at (8, 8192, 512, 4096) and (32, 8192, 128, 4096) over
// thirteen runs, 128x256 1.00-1.05x, ping-pong ahead in 18 of the 26. On an H100 128x128 tiles
// took 1.16-1.47x at those and at (16, 4096, 128, 2048), (8, 8192, 128, 1024), (16, 8192, 64,
// 1024) and (32, 4096, 128, 4096), ping-pong or cooperative, in every order of the scheduler's
// (CUTLASS's own order is the one that keeps pace on the H200); 128x256 0.96-1.05x. The two differ
// in memory (4.9 against 3.35 TB/s; L2 60 against 50 MB); which of them makes the difference is not
// measured. Ping-pong 128x128 only where memory is H200-fast.
constexpr double kTf32SquareTilesMinBandwidth = 4.5e12;  // bytes per second
bool tf32_square_tiles_keep_pace(const Problem& p) {
  return peak_memory_bandwidth(p.device.index) >= kTf32SquareTilesMinBandwidth;
}
}  // namespace

// Measured on an H200: kernel_variants gett (bench/results/gett_tuning_h200.csv for the large
// problems, gett_mid_size_h200.csv for the mid-size ones) and the CLI over bench/shapes_mid.txt
// (sweep_mid_h200.csv).
Choice choose(const Problem& p) {
  if (const Variant* split = split_reduction_variant(p)) return {split, {}};
  if (const Variant* few_rows = weight_rows_variant(p)) return {few_rows, {}};
  const bool f16 = p.dtype == DType::float16, tf32 = p.dtype == DType::float32;
  const double sms = multiprocessor_count(p.device.index);
  // Mid-size: consecutive tiles along n with a swizzle of 2 were 7% (128x64) and 3% (64x64)
  // faster on average than CUTLASS's default order, up to 17%.
  if (!tf32 && static_cast<double>(p.outputs()) < kMidSizeOutputs) {
    const Tuning along_n{2, Raster::along_n};
    if (mid_size_tiles(p).small) return {f16 ? &f16_pingpong_64x64() : &bf16_pingpong_64x64(), along_n};
    return {f16 ? &f16_cooperative_128x64() : &bf16_cooperative_128x64(), along_n};
  }
  const double square = tile_count(p, 128, 128), wide = tile_count(p, 128, 256);
  // Many waves of tiles, or short reductions (epilogue-bound): ping-pong, which overlaps one
  // warpgroup's epilogue with the other's mainloop, was fastest (16-bit with a 2x1 cluster that
  // multicasts W's tiles): about 0.96x cuBLAS's time on the largest problems. Its epilogue
  // sub-tile: 64x128 where writing y bounds the time (R*H <= 256: 0.98x cuBLAS at
  // (4,16384,64,8192), against 1.02x with 64x64), 64x64 for deeper reductions, whose mainloop
  // needs the shared memory that 64x128 staging takes (1.07x cuBLAS with 64x128 there). The
  // scheduler's order made no difference beyond noise on these.
  if (p.RH <= 256 || square >= 3.5 * sms) {
    if (tf32)
      return {p.RH <= 256 || tf32_square_tiles_keep_pace(p) ? &tf32_pingpong_128x128() : &tf32_cooperative_128x256(),
              {}};
    if (p.RH <= 256)
      return {f16 ? &f16_pingpong_128x128_c2x1_epi64x128() : &bf16_pingpong_128x128_c2x1_epi64x128(), {}};
    return {f16 ? &f16_pingpong_128x128_c2x1_epi64x64() : &bf16_pingpong_128x128_c2x1_epi64x64(), {}};
  }
  // A few waves: the 128x256 tile moves the fewest bytes per multiply-add, unless it leaves much
  // more of the last wave idle than 128x128 tiles would (share of SMs the last wave keeps busy).
  const auto wave_fill = [&](double t) { return t / (std::ceil(t / sms) * sms); };
  const bool take_wide = wave_fill(wide) >= wave_fill(square) - 0.1;
  if (tf32) return {take_wide ? &tf32_cooperative_128x256() : &tf32_cooperative_128x128(), {}};
  if (take_wide) return {f16 ? &f16_cooperative_128x256() : &bf16_cooperative_128x256(), {}};
  // 128x128 tiles over one or two waves: consecutive tiles along m with a swizzle of 2 were 2.5%
  // faster than the default order on average, up to 14%, never slower beyond noise (0.5%)
  // (bench/results/gett_mid_size_h200.csv).
  return {f16 ? &f16_cooperative_128x128() : &bf16_cooperative_128x128(), {2, Raster::along_m}};
}

bool outruns_unfused(const Problem& p) {
  // x's slices must be whole 128-byte rows of the K tile (H a multiple of it): narrower slices
  // split every TMA box into 16- to 64-byte rows (H = 16 ran at a third of the unfused speed).
  const bool tf32 = p.dtype == DType::float32;
  const std::int64_t tile_k = tf32 ? 32 : 64;
  if (p.H % tile_k != 0) return false;
  if (split_reduction_variant(p) != nullptr || weight_rows_variant(p) != nullptr) return true;
  const double outputs = static_cast<double>(p.outputs());
  // Below a million TF32 outputs cuBLAS's small-problem kernels behind the concatenation win.
  if (tf32) return outputs >= kMidSizeOutputsTf32;
  if (outputs >= kMidSizeOutputs) return true;
  // Mid-size: the fused kernel's time is one block's tile, cuBLAS's (which splits long reductions
  // between blocks) the whole problem's work spread over the GPU, plus the concatenation. So the
  // fused kernel wins while a block's work is small (up to 2^23 multiply-adds: 1.06-1.28x faster
  // than unfused) or its blocks fill most of the GPU (1.09-1.36x); longer work over half a wave
  // lost or tied (0.91-1.02x), and so did a full wave of blocks twice as long as any that won
  // (2^26 at (64, 64, 128, 8192): 0.77x; 2^25 won 1.08x). A second wave of blocks, mostly idle,
  // costs a whole block's time again: only where that is short (2^21: 1.11x, against 0.65-0.97x
  // above it). With fewer rows than the smallest tile (B < 64) a block's time is reading its
  // weight rows, which cuBLAS spreads over more SMs: only short blocks won (2^22: 1.07x; 2^23 at
  // (16, 16, 128, 2048): 0.90-0.97x; bench/results/decode_h200.csv).
  const MidSizeTiles tiles = mid_size_tiles(p);
  if (tiles.waves > 1) return tiles.block_macs <= 0x1p21;
  if (p.B < 64) return tiles.block_macs <= 0x1p22;
  return tiles.block_macs <= 0x1p23 || (tiles.waves >= 0.7 && tiles.block_macs <= 0x1p25);
}

}  // namespace gett

std::string gett_why_not(const Problem& p, Fp32Precision precision) {
  if (p.dtype == DType::float32 && precision == Fp32Precision::ieee)
    return "runs float32 only as TF32 (Fp32Precision::tf32); exact float32 runs on cuda_tensor_core_mma";
  if (p.dtype != DType::float32 && p.dtype != DType::float16 && p.dtype != DType::bfloat16)
    return "supports bfloat16, float16 and float32 (as TF32), got " + std::string(dtype_name(p.dtype));
  return gett::choose(p).variant->why_not(p);
}

std::size_t gett_workspace_bytes(const Problem& p) { return gett::choose(p).variant->workspace_bytes(p); }

void run_gett(const Problem& p, Workspace workspace, CudaStream stream) {
  const gett::Choice choice = gett::choose(p);
  choice.variant->run(p, workspace, stream, choice.tuning);
}

}  // namespace gather_linear::cuda
