// Fused CPU forward: a cache-blocked SIMD GEMM whose packing routine gathers A's rows straight
// from x (see gather_gemm_engine.inl), parallelised with OpenMP over row blocks x column groups.
// The engine is compiled for AVX-512 (with FMA and F16C), AVX2+FMA+F16C and plain SSE2 inside one
// translation unit with `#pragma GCC target`, so that only the engine itself (not inline library
// code shared with other translation units) uses the wider instructions; the best supported one
// runs.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include "core/numeric.hpp"
#include "cpu/avx2_helpers.hpp"
#include "cpu/avx512_helpers.hpp"
#include "cpu/block_tasks.hpp"
#include "cpu/cpu_kernels.hpp"
#include "cpu/scratch.hpp"
#include "gather_linear/error.hpp"

namespace gather_linear::cpu {
namespace {

template <class In>
using AccumulatorOf = std::conditional_t<std::is_same_v<In, double>, double, float>;

struct EngineTiling {
  int MR, NR, MC, KC;
  std::int64_t direct_reduction_per_row;  // automatic_path's, beyond direct_few_rows rows
  std::int64_t direct_few_rows_reduction_per_row;  // automatic_path's, up to direct_few_rows
  std::int64_t direct_few_rows;
  std::int64_t direct_wide_rows_bytes;    // automatic_path's
  std::int64_t direct_wide_min_reduction; // automatic_path's
  std::int64_t direct_batch_max_rows;           // automatic_path's
  std::int64_t direct_batch_min_reduction;      // automatic_path's
  std::int64_t direct_batch_reduction_per_row;  // automatic_path's
  double flop_weight;                     // Tiling's kFlopWeight: the thread rules'
  std::int64_t row_block_max_outputs;     // automatic_path's
  std::int64_t row_block_min_reduction;   // automatic_path's
  std::int64_t (*weight_rows_max_rows)(std::int64_t RH);  // automatic_path's
  std::int64_t weight_rows_max_panels_bytes;   // automatic_path's
};

// One instruction set's engine for one input type; buffers are typed void* so that the
// driver below stays free of instruction-set code.
struct Engine {
  EngineTiling tiling;
  void (*pack_weight_panel)(const Problem& p, std::int64_t k_first, void* out);
  void (*compute_tile)(const Problem& p, const void* packed_weight, std::int64_t k_block0, std::int64_t b0, int mc,
                       std::int64_t k0, int nc, void* a_buf, void* b_buf, void* c_buf);
  void (*direct_rows)(const Problem& p, void* row_buf);
  void (*row_block)(const Problem& p, std::int64_t b0, int rows, void* rows_buf);
  void (*pack_rows_panel)(const Problem& p, std::int64_t panel, void* at);
  void (*weight_rows_tiles)(const Problem& p, std::int64_t k0, std::int64_t panel0, std::int64_t panels, const void* at,
                            void* w_tail);
};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GATHER_GEMM_HAS_X86_VARIANTS 1
#pragma GCC push_options
#pragma GCC target("avx512f,fma,f16c")
namespace avx512 {
#define GATHER_GEMM_VECTOR_BYTES 64
#define GATHER_GEMM_MR 12
#include "cpu/gather_gemm_engine.inl"
#undef GATHER_GEMM_VECTOR_BYTES
#undef GATHER_GEMM_MR
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
#define GATHER_GEMM_VECTOR_BYTES 32
#define GATHER_GEMM_MR 6
#include "cpu/gather_gemm_engine.inl"
#undef GATHER_GEMM_VECTOR_BYTES
#undef GATHER_GEMM_MR
}  // namespace avx2
#pragma GCC pop_options
#endif

namespace portable {
#define GATHER_GEMM_VECTOR_BYTES 16
#define GATHER_GEMM_MR 4
#include "cpu/gather_gemm_engine.inl"
#undef GATHER_GEMM_VECTOR_BYTES
#undef GATHER_GEMM_MR
}  // namespace portable

template <class In>
Engine engine_for(SimdLevel level) {
#ifdef GATHER_GEMM_HAS_X86_VARIANTS
  if (level == SimdLevel::avx512) return avx512::engine<In>();
  if (level == SimdLevel::avx2) return avx2::engine<In>();
#endif
  (void)level;
  return portable::engine<In>();
}

thread_local Scratch packed_weight_scratch, a_scratch, b_scratch, c_scratch;

// The direct path and row blocks pad each gathered row of A to whole vectors: at most this many
// accumulators, whatever the engine's vector width.
std::int64_t direct_row_stride_bound(std::int64_t RH) { return RH + 16; }

// The direct path (no packing) where packing the weight costs more than it saves: below this
// much work, or for batches this short. Packing reads and writes the weight once more than the
// GEMM reads it, and only B rows reuse it: against the packed path the direct one took 0.11-0.68
// of the time at B = 1 to 8, 0.47-0.74 at B = 16, 0.66-1.13 at 32 and 0.79-1.31 at 64 in float32
// on a 2-core Zen 4, float16 0.19-0.77 up to B = 64 (docs/performance/cpu.md, "Short batches"). Its
// gathered rows of A (B * RH accumulators) are bounded by kDirectRowsBytes. Small problems of more
// rows than kDirectFlopsMaxRows are packed: at B = 96 to 512 the packed path took 0.47-0.80x the
// direct one's time on an Emerald Rapids VM, at B = 24 to 48 1.15-1.57x (docs/performance/cpu.md,
// "Small problems of many rows"). On AVX2, float32 problems of long reductions take it at any size
// while their gathered rows fit the engine's direct_wide_rows_bytes (Tiling's kDirectWideRowsBytes
// says why), and batches of up to the engine's direct_batch_max_rows rows given a long enough
// reduction (Tiling's kDirectBatchMaxRows).
// The batch rule's gathered rows stay within the bytes where AVX2's float32 direct path was
// measured to win (kDirectWideRowsBytes; 1.5-2.3x the packed path's time from 6 MB): its cells
// had at most 0.4 MB, and float32 on AVX2 keeps exactly the wide rule's reach.
constexpr std::int64_t kDirectBatchRowsBytes = std::int64_t{2} << 20;
constexpr double kDirectFlops = 4e6;
constexpr std::int64_t kDirectFlopsMaxRows = 64;
constexpr std::int64_t kDirectRows = 16;
// But every output of the direct path pays a lane sum, and on AVX2 its 4 x 4 tiles spill (16
// accumulators in 16 registers): with a reduction shorter than the engine's
// direct_reduction_per_row times B (AVX2: R*H < 8B), the packed path took 0.2-0.95x its time in
// float32 on a 2-core AMD EPYC of family 23 (docs/performance/cpu.md, "Short reductions and few
// outputs"), except in problems of at most kDirectAnyReductionOutputs outputs, where the packed
// path's fixed costs outweigh the lane sums (there the direct path took 0.2-0.8x its time).
constexpr std::int64_t kDirectAnyReductionOutputs = 256;
// Problems of up to the engine's row_block_max_outputs outputs a row (Tiling says how many) take
// row blocks: the packed path fills its NR-wide micro-tiles with fewer, and the direct path
// gathers every row of A before reading it again for each 4 weight rows. Given a reduction of
// kRowBlockReductionPerOutput elements an output (shorter ones leave the lane sums most of the
// work: 1.3-2.1x the packed path's time on that EPYC) and rows of x gathered along a unit stride
// (where x's rows sit side by side, with x_stride_b 1, the packed path gathers whole runs of them:
// row blocks took 3.6x its time).
constexpr std::int64_t kRowBlockReductionPerOutput = 4;
constexpr std::int64_t kRowBlockRows = 16;

// The weight-rows path needs this many outputs: its threads split the weight's MR-row tiles (with
// 24 to 96 outputs it took 0.6-1.5x the time of the path it would replace on the 2-core AMX VM).
constexpr std::int64_t kWeightRowsMinOutputs = 128;
// How its tasks are cut (run_engine says why): A's panels in groups of at most this many bytes, and
// at least this many tasks a thread.
constexpr std::int64_t kWeightRowsGroupBytes = std::int64_t{1} << 20;
constexpr std::int64_t kWeightRowsTasksPerThread = 4;

// Where the weight-rows path pays (Tiling's weight_rows_max_rows says where that was measured):
// float32 and float64 inputs (16-bit ones would be widened one broadcast at a time), a weight of
// unit inner stride, from a whole panel of rows to the engine's bound for the reduction, and A's
// panels within the engine's bound.
template <class Acc>
bool weight_rows_pay(const Problem& p, const EngineTiling& tiling) {
  const std::int64_t panels_bytes = ceil_div(p.B, tiling.NR) * tiling.NR * p.RH * std::int64_t{sizeof(Acc)};
  return dtype_size(p.dtype) == sizeof(Acc) && p.weight_stride_c == 1 && p.K >= kWeightRowsMinOutputs &&
         p.B >= tiling.NR && p.B <= tiling.weight_rows_max_rows(p.RH) &&
         panels_bytes <= tiling.weight_rows_max_panels_bytes;
}

// The path `automatic` takes. The direct path and row blocks read each weight row along a unit
// stride; the backward's transposed views go through packing, which reads them row-wise. (Copying
// such a view row-major for the direct path measured slower still: its short reductions run as
// chains of dependent scalar adds.)
template <class Acc>
GemmPath automatic_path(const Problem& p, const EngineTiling& tiling) {
  if (p.weight_stride_c != 1) return GemmPath::packed;
  if (p.K <= tiling.row_block_max_outputs && p.RH >= kRowBlockReductionPerOutput * p.K &&
      p.RH >= tiling.row_block_min_reduction && (p.x_stride_b != 1 || p.B == 1))
    return GemmPath::row_blocks;
  if (weight_rows_pay<Acc>(p, tiling)) return GemmPath::weight_rows;
  const std::int64_t rows_bytes = p.B * p.RH * std::int64_t{sizeof(Acc)};
  const bool small = (p.flops() <= kDirectFlops && p.B <= kDirectFlopsMaxRows) ||
                     (p.B <= kDirectRows && rows_bytes <= kDirectRowsBytes) ||
                     (dtype_size(p.dtype) == sizeof(Acc) && rows_bytes <= tiling.direct_wide_rows_bytes &&
                      p.RH >= tiling.direct_wide_min_reduction) ||
                     (p.B <= tiling.direct_batch_max_rows && rows_bytes <= kDirectBatchRowsBytes &&
                      p.RH >= tiling.direct_batch_min_reduction && p.RH >= tiling.direct_batch_reduction_per_row * p.B);
  const std::int64_t per_row =
      p.B <= tiling.direct_few_rows ? tiling.direct_few_rows_reduction_per_row : tiling.direct_reduction_per_row;
  const bool reduction_pays = p.RH >= per_row * p.B || p.B * p.K <= kDirectAnyReductionOutputs;
  return small && reduction_pays ? GemmPath::direct : GemmPath::packed;
}

// Threads for the packed path: from kParallelFlops counted in AVX-512 float32 multiply-adds (a
// float64 one, or an AVX2 one, does half the work of such an instruction: at 1-4 MFLOP two
// threads took 0.53-0.83x one's time in float32 and 0.57-0.74x in float64 on AVX2 on the EPYC of
// family 23), or from the bytes direct_parallel_pays takes for the weight, counting the weight's
// and y's (a short reduction packs and writes many: with 256 KB to 3 MB of them two threads took
// 0.51-0.64x one's time there; docs/performance/cpu.md, "Short reductions and few outputs").
bool packed_parallel_pays(const Problem& p, const EngineTiling& tiling) {
  const std::int64_t bytes = (p.B * p.K + p.K * p.RH) * static_cast<std::int64_t>(dtype_size(p.dtype));
  return parallel_pays(p.flops() * tiling.flop_weight, bytes);
}

template <class In>
void run_engine(const Problem& p, const Engine& e, GemmPath path) {
  using Acc = AccumulatorOf<In>;
  if (path == GemmPath::automatic) path = automatic_path<Acc>(p, e.tiling);
  if (p.B == 0) return;  // no rows of y to write
  if (path == GemmPath::row_blocks && p.weight_stride_c == 1) {
    // Blocks of up to kRowBlockRows rows, at least one a thread where threads pay (for the bytes
    // of x they stream, as the direct path's for the weight's).
    const bool parallel = parallel_pays(p.flops(), p.B * p.RH * std::int64_t{sizeof(In)});
    const std::int64_t threads = parallel ? std::min<std::int64_t>(p.B, omp_get_max_threads()) : 1;
    const std::int64_t blocks = std::max(ceil_div(p.B, kRowBlockRows), threads);
    const std::int64_t rows_per_block = ceil_div(p.B, blocks);
    const std::int64_t lda = direct_row_stride_bound(p.RH);
    for_each_index(ceil_div(p.B, rows_per_block), parallel, [&](std::int64_t t) {
      const std::int64_t b0 = t * rows_per_block;
      const int rows = static_cast<int>(std::min(rows_per_block, p.B - b0));
      e.row_block(p, b0, rows, a_scratch.bytes(static_cast<std::size_t>(rows * lda) * sizeof(Acc)));
    });
    return;
  }
  if (path == GemmPath::direct || path == GemmPath::row_blocks) {
    // B rows, or on AVX-512 up to B + 3 rows as row quads after 4 gathered lines.
    const std::int64_t rows_elems = (p.B + 7) * direct_row_stride_bound(p.RH);
    e.direct_rows(p, a_scratch.bytes(static_cast<std::size_t>(rows_elems) * sizeof(Acc)));
    return;
  }
  const int MR = e.tiling.MR, NR = e.tiling.NR, MC = e.tiling.MC, KC = e.tiling.KC;
  const bool parallel = packed_parallel_pays(p, e.tiling);
  if (path == GemmPath::weight_rows && p.weight_stride_c == 1 && p.RH > 0 && p.K > 0) {
    // All of A packed once (its panels shared by the threads), then tasks of one weight tile (MR
    // rows) by a group of A's panels, in one parallel region. Groups of at most
    // kWeightRowsGroupBytes, so that a thread's consecutive tasks (a static split, group-major) read
    // one group, which stays in its core's L2, and enough of them for each thread to take several
    // tasks however few the weight's tiles.
    const std::int64_t panels = ceil_div(p.B, NR), tiles = ceil_div(p.K, MR);
    const std::int64_t panel_bytes = p.RH * NR * std::int64_t{sizeof(Acc)};
    const std::int64_t threads = parallel ? omp_get_max_threads() : 1;
    const std::int64_t panels_per_group = ceil_div(
        panels, std::clamp(std::max(ceil_div(panels * panel_bytes, kWeightRowsGroupBytes),
                                    ceil_div(kWeightRowsTasksPerThread * threads, tiles)),
                           std::int64_t{1}, panels));
    const std::int64_t groups = ceil_div(panels, panels_per_group);  // none left empty
    void* at = packed_weight_scratch.bytes(static_cast<std::size_t>(panels * panel_bytes));
    const std::size_t w_tail_bytes = static_cast<std::size_t>(MR * p.RH) * dtype_size(p.dtype);
#pragma omp parallel if (parallel)
    {
#pragma omp for schedule(static)
      for (std::int64_t panel = 0; panel < panels; ++panel) e.pack_rows_panel(p, panel, at);
#pragma omp for schedule(static)
      for (std::int64_t t = 0; t < groups * tiles; ++t)
        e.weight_rows_tiles(p, t % tiles * MR, t / tiles * panels_per_group, panels_per_group, at,
                            b_scratch.bytes(w_tail_bytes));
    }
    return;
  }

  const std::int64_t panels_total = ceil_div(p.K, NR);
  const std::int64_t panel_elems = std::max<std::int64_t>(p.RH, 1) * NR;
  const std::int64_t panel_bytes = panel_elems * std::int64_t{sizeof(Acc)};
  const std::int64_t panels_per_block = std::clamp<std::int64_t>(
      std::min(std::max(kPackedWeightBlockBytes / panel_bytes,
                        kPackedWeightSliceBytes / (std::int64_t{KC} * NR * std::int64_t{sizeof(Acc)})),
               kPackedWeightBlockMaxBytes / panel_bytes),
      1, panels_total);
  for (std::int64_t panel0 = 0; panel0 < panels_total; panel0 += panels_per_block) {
    const std::int64_t panels = std::min(panels_per_block, panels_total - panel0);
    const std::int64_t k_block0 = panel0 * NR;
    // Enough tasks for every thread even when B is small: split the block's columns too.
    const std::int64_t groups = parallel ? std::clamp<std::int64_t>(groups_for_threads(p.B, MC), 1, panels) : 1;
    // Where one block of rows reads every panel, nothing reads a packed panel twice: each task
    // packs a panel's slice just before its micro-kernels (into L1) rather than the whole block
    // being packed beforehand, written out and read back. With 21 to 96 rows that took 0.72-0.92x
    // the time on the 2-core AMX VM (docs/performance/cpu.md, "Packing inside the tasks").
    const bool pack_in_tasks = block_task_row_blocks(p.B, MC, MR, groups, parallel) == 1;
    Acc* packed = nullptr;
    if (!pack_in_tasks) {
      packed = static_cast<Acc*>(
          packed_weight_scratch.bytes(static_cast<std::size_t>(panels_per_block * panel_elems) * sizeof(Acc)));
#pragma omp parallel for if (parallel) schedule(static)
      for (std::int64_t q = 0; q < panels; ++q) e.pack_weight_panel(p, k_block0 + q * NR, packed + q * panel_elems);
    }
    for_each_block_task(p.B, MC, MR, panels, groups, parallel, p.RH <= kSameThreadsMaxReduction,
                        [&](std::int64_t b0, int mc, std::int64_t first_panel, std::int64_t group_panels) {
                          const std::int64_t k0 = k_block0 + first_panel * NR;
                          const int nc = static_cast<int>(std::min(group_panels * NR, p.K - k0));
                          const std::size_t c_elems = static_cast<std::size_t>(ceil_div(mc, MR) * MR) *
                                                      static_cast<std::size_t>(ceil_div(nc, NR) * NR);
                          void* a_buf = a_scratch.bytes(static_cast<std::size_t>(MC) * KC * sizeof(Acc));
                          void* b_buf = pack_in_tasks ? b_scratch.bytes(static_cast<std::size_t>(KC) * NR * sizeof(Acc))
                                                      : nullptr;
                          void* c_buf = c_scratch.bytes(c_elems * sizeof(Acc));
                          e.compute_tile(p, packed, k_block0, b0, mc, k0, nc, a_buf, b_buf, c_buf);
                        });
  }
}

}  // namespace

bool simd_level_supported(SimdLevel level) {
  switch (level) {
    case SimdLevel::best:
    case SimdLevel::portable: return true;
#ifdef GATHER_GEMM_HAS_X86_VARIANTS
    case SimdLevel::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case SimdLevel::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#endif
    default: return false;
  }
}

void run_gather_gemm(const Problem& p, SimdLevel level, GemmPath path) {
  if (level == SimdLevel::best) {
    static const SimdLevel best = simd_level_supported(SimdLevel::avx512) ? SimdLevel::avx512
                                  : simd_level_supported(SimdLevel::avx2) ? SimdLevel::avx2
                                                                          : SimdLevel::portable;
    level = best;
  }
  if (!simd_level_supported(level))
    throw Error(ErrorCode::unsupported, "level", "this processor does not support the requested SIMD level");
  visit_floating_dtype(p.dtype, [&]<class In>() { run_engine<In>(p, engine_for<In>(level), path); });
}

}  // namespace gather_linear::cpu
