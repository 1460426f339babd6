// The Hopper tensor-core GETT family (CUTLASS 3.x on sm_90a): bfloat16, float16, and float32 as
// TF32. The configurations (dtype, block tile, cluster, schedule) are compiled in translation units
// CMake generates, one per dtype and M mode, from gett_unit.cu.in and gett_definition.cu.in (the
// list, with what each configuration is for, is in CMakeLists.txt); this header is what the
// dispatcher and the benchmark see.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/problem.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda {
namespace gett {

// Run-time knobs of CUTLASS's persistent tile scheduler: the order in which output tiles are
// visited decides how much of x and W the L2 serves.
enum class Raster { heuristic, along_m, along_n };
struct Tuning {
  int max_swizzle = 1;
  Raster raster = Raster::heuristic;
  // Configurations that split the reduction: into how many parts (0: reduction_splits' choice).
  int reduction_splits = 0;
};

// One compiled configuration.
struct Variant {
  const char* name;
  DType dtype;  // of x, weight, bias and y
  int tile_m, tile_n, tile_k;
  int cluster_size;
  bool weight_rows_as_m;  // M is the weight's rows (y^T = W A^T), N x's rows; else the other way round
  bool splits_reduction;  // parts of R's slices as the batch mode into float32 partial sums, then their sum
  int (*clusters_at_once)(int device);  // the most clusters resident on the device at once (queried once)
  std::string (*why_not)(const Problem& p);  // empty when the configuration can run p
  std::size_t (*workspace_bytes)(const Problem& p);
  void (*run)(const Problem& p, Workspace workspace, CudaStream stream, Tuning tuning);
};

// The checks that do not depend on CUTLASS: an sm_90 device, sizes that fit CUTLASS's int
// extents, x with unit h stride, 16-byte aligned pointers and strides (TMA's rule), and K tiles
// that never straddle part of a slice (H a multiple or a divisor of the tile's reduction depth).
std::string shape_why_not(const Problem& p, int tile_k, std::size_t element_bytes);
// p with the strides of extent-1 modes (any value is legal there) replaced by aligned ones, so
// that they neither fail the alignment checks nor reach a TMA descriptor.
Problem with_canonical_unit_strides(const Problem& p);

// The library's configurations, defined in the generated gett_<dtype>[_weight_rows].cu.
const Variant& bf16_pingpong_128x128_c2x1_epi64x64();
const Variant& bf16_pingpong_128x128_c2x1_epi64x128();
const Variant& bf16_cooperative_128x256();
const Variant& bf16_cooperative_128x128();
const Variant& f16_pingpong_128x128_c2x1_epi64x64();
const Variant& f16_pingpong_128x128_c2x1_epi64x128();
const Variant& f16_cooperative_128x256();
const Variant& f16_cooperative_128x128();
const Variant& bf16_cooperative_128x64();
const Variant& f16_cooperative_128x64();
const Variant& bf16_pingpong_64x64();
const Variant& f16_pingpong_64x64();
const Variant& tf32_pingpong_128x128();
const Variant& tf32_cooperative_128x256();
const Variant& tf32_cooperative_128x128();
const Variant& bf16_weight_rows_pingpong_64x32();
const Variant& f16_weight_rows_pingpong_64x32();
const Variant& bf16_weight_rows_pingpong_64x64();
const Variant& f16_weight_rows_pingpong_64x64();
const Variant& tf32_weight_rows_pingpong_64x32();
const Variant& bf16_weight_rows_pingpong_64x32_c4x1();
const Variant& f16_weight_rows_pingpong_64x32_c4x1();
const Variant& bf16_weight_rows_pingpong_64x64_c4x1();
const Variant& f16_weight_rows_pingpong_64x64_c4x1();
const Variant& tf32_weight_rows_pingpong_64x32_c4x1();

const Variant& bf16_weight_rows_split_pingpong_64x32();
const Variant& f16_weight_rows_split_pingpong_64x32();
const Variant& bf16_weight_rows_split_pingpong_64x64();
const Variant& f16_weight_rows_split_pingpong_64x64();
const Variant& tf32_weight_rows_split_pingpong_64x32();

// All of the above, for tests and benchmarks that go through every configuration.
std::vector<const Variant*> library_variants();

// The configuration the dispatcher uses for p (whose dtype and precision allow GETT), and the
// scheduler settings it runs with.
struct Choice {
  const Variant* variant;
  Tuning tuning;
};
Choice choose(const Problem& p);
// Whether the GETT beats the unfused baseline on p (the dispatcher's rule; measured).
bool outruns_unfused(const Problem& p);
// The weight's 64-row tiles per SM: the blocks of a configuration with the weight's rows as M,
// each reading its tile alone.
double weight_tiles_per_sm(const Problem& p);
// Configurations that split the reduction run each part of R's slices as one batch of the GEMM,
// writing float32 partial sums to the workspace, then add_partial_sums adds them (and the bias)
// into y: enough parts that the weight's tiles fill the GPU, where they alone leave most SMs
// idle. The parts divide R evenly, and each holds whole K tiles (tile_k elements).
int reduction_splits(const Problem& p, int tile_n, int tile_k);
bool can_split_reduction(const Problem& p, int splits, int tile_k);
std::size_t partial_sums_bytes(const Problem& p, int splits);
// y[b, k] = bias[k] + sum over parts s of partials[s][b][k] (partials: splits x B x K, contiguous),
// as a programmatic launch after the GEMM that writes the partials.
void add_partial_sums(const Problem& p, const float* partials, int splits, CudaStream stream);

// Whether choose() takes a configuration that splits the reduction.
bool takes_split_reduction(const Problem& p);
// Whether the weight has too few 64-row tiles (fewer than about a quarter of the SMs) for the
// configurations with the weight's rows as M.
bool too_few_weight_tiles(const Problem& p);

}  // namespace gett

// The family as one dispatcher entry: bfloat16/float16 always, float32 only when TF32 is allowed.
std::string gett_why_not(const Problem& p, Fp32Precision precision);
std::size_t gett_workspace_bytes(const Problem& p);
void run_gett(const Problem& p, Workspace workspace, CudaStream stream);

}  // namespace gather_linear::cuda
