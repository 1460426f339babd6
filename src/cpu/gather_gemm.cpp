// Fused CPU forward: a cache-blocked SIMD GEMM whose packing routine gathers A's rows straight
// from x (see gather_gemm_engine.inl), parallelised with OpenMP over row blocks x column groups.
// The engine is compiled for AVX-512, AVX2+FMA+F16C and plain SSE2 inside one translation unit with
// `#pragma GCC target`, so that only the engine itself (not inline library code shared with
// other translation units) uses the wider instructions; the best supported one runs.
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
#include "cpu/block_tasks.hpp"
#include "cpu/cpu_kernels.hpp"
#include "cpu/scratch.hpp"
#include "cpu/avx512_helpers.hpp"
#include "gather_linear/error.hpp"

namespace gather_linear::cpu {
namespace {

template <class In>
using AccumulatorOf = std::conditional_t<std::is_same_v<In, double>, double, float>;

struct EngineTiling {
  int MR, NR, MC, KC;
};

// One instruction set's engine for one input type; buffers are typed void* so that the
// driver below stays free of instruction-set code.
struct Engine {
  EngineTiling tiling;
  void (*pack_weight_panel)(const Problem& p, std::int64_t k_first, void* out);
  void (*compute_tile)(const Problem& p, const void* packed_weight, std::int64_t k_block0, std::int64_t b0, int mc,
                       std::int64_t k0, int nc, void* a_buf, void* c_buf);
  void (*direct_rows)(const Problem& p, void* row_buf);
};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GATHER_GEMM_HAS_X86_VARIANTS 1
#pragma GCC push_options
#pragma GCC target("avx512f,fma")
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

thread_local Scratch packed_weight_scratch, a_scratch, c_scratch;

// The direct path (no packing) where packing the weight costs more than it saves: below this
// much work, or for batches this short. Packing reads and writes the weight once more than the
// GEMM reads it, and only B rows reuse it: against the packed path the direct one took 0.11-0.68
// of the time at B = 1 to 8, 0.47-0.74 at B = 16, 0.66-1.13 at 32 and 0.79-1.31 at 64 in float32
// on a 2-core Zen 4, float16 0.19-0.77 up to B = 64 (docs/performance/cpu.md, "Short batches"). Its
// gathered rows of A (B * RH accumulators) are bounded by kDirectRowsBytes. Small problems of more
// rows than kDirectFlopsMaxRows are packed: at B = 96 to 512 the packed path took 0.47-0.80x the
// direct one's time on an Emerald Rapids VM, at B = 24 to 48 1.15-1.57x (docs/performance/cpu.md,
// "Small problems of many rows").
constexpr double kDirectFlops = 4e6;
constexpr std::int64_t kDirectFlopsMaxRows = 64;
constexpr std::int64_t kDirectRows = 16;

template <class In>
void run_engine(const Problem& p, const Engine& e, GemmPath path) {
  using Acc = AccumulatorOf<In>;
  // The direct path reads each weight row once per row of A, cheap only along a unit stride; the
  // backward's transposed views go through packing, which reads them row-wise. (Copying such a
  // view row-major for the direct path measured slower still: its short reductions run as
  // chains of dependent scalar adds.)
  const bool direct_pays = p.weight_stride_c == 1 &&
                           ((p.flops() <= kDirectFlops && p.B <= kDirectFlopsMaxRows) ||
                            (p.B <= kDirectRows && p.B * p.RH * std::int64_t{sizeof(Acc)} <= kDirectRowsBytes));
  if (path == GemmPath::direct || (path == GemmPath::automatic && direct_pays)) {
    // Each gathered row padded to whole vectors (at most 16 accumulators more).
    e.direct_rows(p, a_scratch.bytes(static_cast<std::size_t>(std::max<std::int64_t>(p.B * (p.RH + 16), 1)) * sizeof(Acc)));
    return;
  }
  const auto [MR, NR, MC, KC] = e.tiling;
  const bool parallel = parallel_pays(p.flops());

  const std::int64_t panels_total = ceil_div(p.K, NR);
  const std::int64_t panel_elems = std::max<std::int64_t>(p.RH, 1) * NR;
  const std::int64_t panels_per_block =
      std::clamp<std::int64_t>(kPackedWeightBlockBytes / (panel_elems * std::int64_t{sizeof(Acc)}), 1, panels_total);
  auto* packed = static_cast<Acc*>(
      packed_weight_scratch.bytes(static_cast<std::size_t>(panels_per_block * panel_elems) * sizeof(Acc)));

  for (std::int64_t panel0 = 0; panel0 < panels_total; panel0 += panels_per_block) {
    const std::int64_t panels = std::min(panels_per_block, panels_total - panel0);
    const std::int64_t k_block0 = panel0 * NR;
#pragma omp parallel for if (parallel) schedule(static)
    for (std::int64_t q = 0; q < panels; ++q) e.pack_weight_panel(p, k_block0 + q * NR, packed + q * panel_elems);

    // Enough tasks for every thread even when B is small: split the block's columns too.
    const std::int64_t groups = parallel ? std::clamp<std::int64_t>(groups_for_threads(p.B, MC), 1, panels) : 1;
    for_each_block_task(p.B, MC, MR, panels, groups, parallel,
                        [&](std::int64_t b0, int mc, std::int64_t first_panel, std::int64_t group_panels) {
                          const std::int64_t k0 = k_block0 + first_panel * NR;
                          const int nc = static_cast<int>(std::min(group_panels * NR, p.K - k0));
                          const std::size_t c_elems = static_cast<std::size_t>(ceil_div(mc, MR) * MR) *
                                                      static_cast<std::size_t>(ceil_div(nc, NR) * NR);
                          void* a_buf = a_scratch.bytes(static_cast<std::size_t>(MC) * KC * sizeof(Acc));
                          void* c_buf = c_scratch.bytes(c_elems * sizeof(Acc));
                          e.compute_tile(p, packed, k_block0, b0, mc, k0, nc, a_buf, c_buf);
                        });
  }
}

}  // namespace

bool simd_level_supported(SimdLevel level) {
  switch (level) {
    case SimdLevel::best:
    case SimdLevel::portable: return true;
#ifdef GATHER_GEMM_HAS_X86_VARIANTS
    case SimdLevel::avx512: return __builtin_cpu_supports("avx512f");
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
