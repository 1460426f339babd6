// The CPU backward. Both gradient GEMMs are phrased as problems of the forward's form, over
// transposed views, so that the forward's kernels compute them (they gather whatever they pack):
// the AMX kernel for bfloat16 where the processor has it, else the SIMD engine:
//   gradients.x as (B, R*H) = grad_y (B, K) * W (K, R*H)                  (reduction over k)
//   gradients.weight (K, R*H) = grad_y^T (K, B) * cat (B, R*H)            (reduction over b)
// Each is one problem: gradients.x written in place where its slices sit side by side (the
// gradient of a head-major x), else split into place afterwards; gradients.weight read from x
// where its slices sit side by side, else from a concatenation of x. The bias gradient sums
// grad_y's rows.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/kernel_registry.hpp"
#include "core/numeric.hpp"
#include "cpu/avx2_helpers.hpp"
#include "cpu/avx512_helpers.hpp"
#include "cpu/block_tasks.hpp"
#include "cpu/cpu_kernels.hpp"
#include "cpu/scratch.hpp"

namespace gather_linear::cpu {
namespace {

// The kernel the forward's dispatcher would choose for the problem (AMX for bfloat16 where the
// processor has it, else the SIMD engine).
void run_gemm(const Problem& g) { choose_kernel(g, {}).run(g, {}, {}, nullptr); }

// A problem with a single slice: y (rows, cols) = A (rows, depth) * Wt (cols, depth)^T.
Problem gemm_problem(const BackwardProblem& bp, std::int64_t rows, std::int64_t depth, std::int64_t cols) {
  Problem g;
  g.R = 1;
  g.B = rows;
  g.H = depth;
  g.RH = depth;
  g.K = cols;
  g.dtype = bp.forward.dtype;
  g.device = bp.forward.device;
  return g;
}

// Below this many elements a copy or sum runs on the calling thread alone: the OpenMP fork/join
// would cost more.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;

// The (B, R*H) buffers: the concatenation of x and gradients.x before its split. Up to 64 MB
// they stay with the thread for its next call, so that a call neither clears nor faults in fresh
// pages; a larger one is the call's own (`local`) and freed when it returns.
thread_local Scratch concatenation_scratch, unsplit_scratch;
template <class In>
In* buffer_of(const Problem& f, Scratch& kept, Scratch& local) {
  constexpr std::size_t kKeptBytes = std::size_t{64} << 20;
  const std::size_t bytes = static_cast<std::size_t>(f.B * f.RH) * sizeof(In);
  return static_cast<In*>((bytes <= kKeptBytes ? kept : local).bytes(bytes));
}

// Calls visit(at, offset) for each (b, r) row of an (R, B, H) view with these strides: `at` the
// row's index in the (B, R*H) concatenation, `offset` its offset in the view. Moves between the
// two layouts: x into its concatenation, gradients.x out of one. Rows go to the OpenMP threads.
template <class Visit>
void for_each_slice_row(const Problem& f, std::int64_t stride_r, std::int64_t stride_b, Visit&& visit) {
#pragma omp parallel for if (f.B * f.RH >= kParallelElements) schedule(static)
  for (std::int64_t b = 0; b < f.B; ++b)
    for (std::int64_t r = 0; r < f.R; ++r)
      visit(static_cast<std::size_t>(b * f.RH + r * f.H), r * stride_r + b * stride_b);
}

// n elements from `from` (stride from_stride) to `to` (stride to_stride): one memcpy where both
// strides are 1.
template <class T>
void copy_row(const T* from, std::int64_t from_stride, T* to, std::int64_t to_stride, std::int64_t n) {
  if (n <= 0) return;
  if (n == 1 || (from_stride == 1 && to_stride == 1)) {
    std::memcpy(to, from, static_cast<std::size_t>(n) * sizeof(T));
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) to[i * to_stride] = from[i * from_stride];
}

// One problem over all R*H columns, into gradients.x itself where its slices sit side by side
// (the gradient of a head-major x), else into a (B, R*H) buffer split into place afterwards,
// rather than one problem per slice, each of which would pack grad_y again.
template <class In>
void input_gradient(const BackwardProblem& bp) {
  const Problem& f = bp.forward;
  // A = grad_y as it is; Wt[c, k] = W[k, c]: W read down its columns.
  Problem g = gemm_problem(bp, f.B, f.K, f.RH);
  g.x = bp.grad_y;
  g.x_stride_b = bp.grad_y_stride_b;
  g.x_stride_h = 1;
  g.weight = f.weight;
  g.weight_stride_k = 1;
  g.weight_stride_c = f.K == 1 ? 1 : f.weight_stride_k;
  const bool side_by_side = (f.H == 1 || bp.grad_x_stride_h == 1) && (f.R == 1 || bp.grad_x_stride_r == f.H);
  if (side_by_side) {
    g.y = bp.grad_x;
    g.y_stride_b = bp.grad_x_stride_b;
    run_gemm(g);
    return;
  }
  Scratch local;
  In* unsplit = buffer_of<In>(f, unsplit_scratch, local);
  g.y = unsplit;
  g.y_stride_b = f.RH;
  run_gemm(g);
  In* grad_x = static_cast<In*>(bp.grad_x);
  for_each_slice_row(f, bp.grad_x_stride_r, bp.grad_x_stride_b, [&](std::size_t at, std::int64_t offset) {
    copy_row(unsplit + at, 1, grad_x + offset, bp.grad_x_stride_h, f.H);
  });
}

// x's slices laid end to end, (B, R*H) row-major, in the thread's concatenation scratch or `local`.
template <class In>
const In* concatenation_of(const Problem& f, Scratch& local) {
  In* out = buffer_of<In>(f, concatenation_scratch, local);
  const In* x = static_cast<const In*>(f.x);
  for_each_slice_row(f, f.x_stride_r, f.x_stride_b, [&](std::size_t at, std::int64_t offset) {
    copy_row(x + offset, f.x_stride_h, out + at, 1, f.H);
  });
  return out;
}

// One problem over all R*H columns, the weight side x where its slices sit side by side (a
// head-major x) or a concatenation of it: R problems of H columns each packed grad_y^T R times,
// 3x the forward's time at R = 26, H = 64 on a 2-core VM, against 1.7x. (Transposing grad_y
// first, so that packing it reads rows, measured slower still.)
template <class In>
void weight_gradient(const BackwardProblem& bp) {
  const Problem& f = bp.forward;
  // A = grad_y^T (read down its columns); Wt[c, b] = cat[b, c], read along a row of the
  // concatenation for each packed panel.
  Problem g = gemm_problem(bp, f.K, f.B, f.RH);
  g.x = bp.grad_y;
  g.x_stride_b = 1;
  g.x_stride_h = bp.grad_y_stride_b;
  g.weight_stride_k = 1;
  g.y = bp.grad_weight;
  g.y_stride_b = bp.grad_weight_stride_k;
  const bool side_by_side = (f.H == 1 || f.x_stride_h == 1) && (f.R == 1 || f.x_stride_r == f.H);
  if (side_by_side) {
    g.weight = f.x;
    g.weight_stride_c = f.x_stride_b;
    run_gemm(g);
    return;
  }
  Scratch local;
  g.weight = concatenation_of<In>(f, local);
  g.weight_stride_c = f.RH;
  run_gemm(g);
}

// sums[k] = the sum over b < rows of first[b * stride + k], for k < n, each element widened to
// double and added in order of b.
template <class In>
void column_sums_portable(const In* first, std::int64_t stride, std::int64_t rows, std::int64_t n, double* sums,
                          bool accumulate = false) {
  if (!accumulate) std::fill_n(sums, n, 0.0);
  for (std::int64_t b = 0; b < rows; ++b)
    for (std::int64_t k = 0; k < n; ++k) sums[k] += load_as<double>(first[b * stride + k]);
}

// The SIMD sums take a few columns at a time down the rows, one group of registers after
// another. Where a row takes several such groups, block(b0, rows) runs over blocks of rows of
// about kSumBlockBytes, so that the groups after the first read the block from L1 rather than
// each group walking all the rows from memory, a short run of each row at a time. The bias
// gradient's tasks on one thread of the 2-core AMX VM, grad_y evicted, B x K from 512 x 512 to
// 2^20 x 16: AVX2 (32 columns a group) 0.44-0.79x the time in float32 and bfloat16 (bfloat16 at
// 2^20 x 16 1.08x), 0.72-0.81x in float64; AVX-512 (128) 0.79-1.01x. On the GPU host's 16-core
// Xeon, AVX2 0.30-0.97x and AVX-512 0.47-1.04x (docs/performance/cpu.md, "Column sums in blocks of
// rows" and "The GPU host's Xeon: the forty-sixth session's rules, the column sums, and its random
// problems").
constexpr std::int64_t kSumBlockBytes = std::int64_t{32} << 10;

template <class In, class Block>
void for_each_sum_block(std::int64_t rows, std::int64_t n, int groups, Block&& block) {
  const std::int64_t block_rows = groups > 1 ? std::max<std::int64_t>(8, kSumBlockBytes / (n * std::int64_t{sizeof(In)}))
                                             : std::max<std::int64_t>(rows, 1);
  std::int64_t b0 = 0;
  do {  // once at least, so that no rows still writes zero sums
    block(b0, std::min(block_rows, rows - b0));
    b0 += block_rows;
  } while (b0 < rows);
}

#ifdef GATHER_LINEAR_HAS_AVX512_HELPERS
#pragma GCC push_options
#pragma GCC target("avx512f")
#pragma GCC diagnostic push
// GCC 12's conversion and extraction intrinsics start from _mm512_undefined
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The sums of 8 * kVectors columns (the first `count` of them stored), each 8 in a register down
// all the rows, reading `count` elements of each row; added to the `count` sums already there
// where `accumulate`. 128 columns at a time read a row in runs of 512 bytes (float32); 32 at a
// time, or double sums added into memory a row at a time, had taken up to 1.2x and 1.7x the time
// of the float32 sums before them.
template <int kVectors, class In>
void column_sums_in_registers(const In* first, std::int64_t stride, std::int64_t rows, int count, double* sums,
                              bool accumulate) {
  constexpr int kColumns = 8 * kVectors;
  __m512d acc[kVectors];
  for (int i = 0; i < kVectors; ++i) {
    const int left = std::clamp(count - 8 * i, 0, 8);
    acc[i] = accumulate ? _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << left) - 1), sums + 8 * i)
                        : _mm512_setzero_pd();
  }
  for (std::int64_t b = 0; b < rows; ++b) {
    const In* row = first + b * stride;
    if constexpr (std::is_same_v<In, double>) {
#pragma GCC unroll 16
      for (int i = 0; i < kVectors; ++i) {
        const int left = count - 8 * i;
        const __m512d v = left >= 8 ? _mm512_loadu_pd(row + 8 * i)
                                    : _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << left) - 1), row + 8 * i);
        acc[i] = _mm512_add_pd(acc[i], v);
      }
    } else {
      static_assert(kVectors % 2 == 0, "16 values a load");
#pragma GCC unroll 8
      for (int i = 0; i < kVectors / 2; ++i) {
        const int left = count - 16 * i;
        const __m512 v = left >= 16 ? load16_as_float(row + 16 * i) : load_first_as_float(row + 16 * i, left);
        acc[2 * i] = _mm512_add_pd(acc[2 * i], _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
        acc[2 * i + 1] = _mm512_add_pd(
            acc[2 * i + 1], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
      }
    }
  }
  if (count == kColumns) {
    for (int i = 0; i < kVectors; ++i) _mm512_storeu_pd(sums + 8 * i, acc[i]);
    return;
  }
  alignas(64) double all[kColumns];
  for (int i = 0; i < kVectors; ++i) _mm512_store_pd(all + 8 * i, acc[i]);
  std::copy_n(all, count, sums);
}

template <class In>
void column_sums_avx512(const In* first, std::int64_t stride, std::int64_t rows, std::int64_t n, double* sums) {
  constexpr int kLast = std::is_same_v<In, double> ? 1 : 2;  // vectors of the last group: one load
  const int groups = static_cast<int>(n / 128 + n % 128 / 32 + ceil_div(n % 32, 8 * kLast));
  for_each_sum_block<In>(rows, n, groups, [&](std::int64_t b0, std::int64_t block_rows) {
    const In* block = first + b0 * stride;
    std::int64_t k = 0;
    for (; k + 128 <= n; k += 128) column_sums_in_registers<16>(block + k, stride, block_rows, 128, sums + k, b0 > 0);
    for (; k + 32 <= n; k += 32) column_sums_in_registers<4>(block + k, stride, block_rows, 32, sums + k, b0 > 0);
    for (; k < n; k += 8 * kLast)
      column_sums_in_registers<kLast>(block + k, stride, block_rows,
                                      static_cast<int>(std::min<std::int64_t>(8 * kLast, n - k)), sums + k, b0 > 0);
  });
}
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

#ifdef GATHER_LINEAR_HAS_AVX2_HELPERS
// AVX2 with F16C: the sums of 4 * kVectors columns, each 4 in a register down all the rows (the
// float32, float16 and bfloat16 values read 8 at a time), added to those already there where
// `accumulate`.
template <int kVectors, class In>
__attribute__((target("avx2,f16c"))) void column_sums_in_registers_avx2(const In* first, std::int64_t stride,
                                                                        std::int64_t rows, double* sums,
                                                                        bool accumulate) {
  __m256d acc[kVectors];
  for (int i = 0; i < kVectors; ++i) acc[i] = accumulate ? _mm256_loadu_pd(sums + 4 * i) : _mm256_setzero_pd();
  for (std::int64_t b = 0; b < rows; ++b) {
    const In* row = first + b * stride;
    if constexpr (std::is_same_v<In, double>) {
#pragma GCC unroll 8
      for (int i = 0; i < kVectors; ++i) acc[i] = _mm256_add_pd(acc[i], _mm256_loadu_pd(row + 4 * i));
    } else {
      static_assert(kVectors % 2 == 0, "8 values a load");
#pragma GCC unroll 4
      for (int i = 0; i < kVectors / 2; ++i) {
        const __m256 v = load8_as_float(row + 8 * i);
        acc[2 * i] = _mm256_add_pd(acc[2 * i], _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        acc[2 * i + 1] = _mm256_add_pd(acc[2 * i + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
      }
    }
  }
  for (int i = 0; i < kVectors; ++i) _mm256_storeu_pd(sums + 4 * i, acc[i]);
}

// 32 columns at a time (8 registers of sums, fitting AVX2's 16), then 8, the last few portably.
template <class In>
void column_sums_avx2(const In* first, std::int64_t stride, std::int64_t rows, std::int64_t n, double* sums) {
  const int groups = static_cast<int>(n / 32 + n % 32 / 8 + (n % 8 != 0));
  for_each_sum_block<In>(rows, n, groups, [&](std::int64_t b0, std::int64_t block_rows) {
    const In* block = first + b0 * stride;
    std::int64_t k = 0;
    for (; k + 32 <= n; k += 32) column_sums_in_registers_avx2<8>(block + k, stride, block_rows, sums + k, b0 > 0);
    for (; k + 8 <= n; k += 8) column_sums_in_registers_avx2<2>(block + k, stride, block_rows, sums + k, b0 > 0);
    if (k < n) column_sums_portable(block + k, stride, block_rows, n - k, sums + k, b0 > 0);
  });
}
#endif

// Every level adds each column's values in the same order, in double: the same bits.
template <class In>
void column_sums(const In* first, std::int64_t stride, std::int64_t rows, std::int64_t n, double* sums,
                 SimdLevel level = SimdLevel::best) {
  static const bool avx512 = simd_level_supported(SimdLevel::avx512), avx2 = simd_level_supported(SimdLevel::avx2);
#ifdef GATHER_LINEAR_HAS_AVX512_HELPERS
  if (level == SimdLevel::avx512 || (level == SimdLevel::best && avx512))
    return column_sums_avx512(first, stride, rows, n, sums);
#endif
#ifdef GATHER_LINEAR_HAS_AVX2_HELPERS
  if (level == SimdLevel::avx2 || (level == SimdLevel::best && avx2))
    return column_sums_avx2(first, stride, rows, n, sums);
#endif
  column_sums_portable(first, stride, rows, n, sums);
}

// The bias gradient: grad_y's column sums, in double for every dtype, rounded once. (float32
// running sums down b had 10-100x the error of ATen's cascaded sum: 8e-5 of the largest sum at
// B = 2971, 2.5e-5 at B = 2^20, against ATen's 2e-7 to 9e-6; docs/performance/cpu.md, "The bias
// gradient in double".) The rows are cut into chunks fixed by B and K alone, never by the thread
// count, so every thread count gives the same bits: enough chunks that a few column blocks still
// make about kBiasTasks tasks (with K <= 256 the sums had run on one thread), of at least
// kBiasChunkRows rows. Each task sums its rows in order; the chunks' partial sums are then added
// in chunk order.
constexpr std::int64_t kBiasColumns = 256, kBiasChunkRows = 1024, kBiasTasks = 64;
thread_local Scratch bias_partials_scratch;

template <class In>
void bias_gradient(const BackwardProblem& bp) {
  const Problem& f = bp.forward;
  const In* grad_y = static_cast<const In*>(bp.grad_y);
  In* out = static_cast<In*>(bp.grad_bias);
  const std::int64_t column_blocks = ceil_div(f.K, kBiasColumns);
  const std::int64_t wanted_chunks = std::min(f.B / kBiasChunkRows, ceil_div(kBiasTasks, column_blocks));
  const std::int64_t chunk_rows = ceil_div(f.B, std::max<std::int64_t>(wanted_chunks, 1));
  const std::int64_t chunks = f.B > 0 ? ceil_div(f.B, chunk_rows) : 1;
  double* partials = chunks > 1 ? static_cast<double*>(bias_partials_scratch.bytes(
                                      static_cast<std::size_t>(chunks * f.K) * sizeof(double)))
                                : nullptr;
  const bool parallel = f.B * f.K >= kParallelElements;
#pragma omp parallel for if (parallel) schedule(static)
  for (std::int64_t task = 0; task < column_blocks * chunks; ++task) {
    const std::int64_t k0 = task / chunks * kBiasColumns, chunk = task % chunks;
    const std::int64_t n = std::min(kBiasColumns, f.K - k0);
    const std::int64_t b_end = std::min(f.B, (chunk + 1) * chunk_rows);
    const std::int64_t b0 = chunk * chunk_rows;
    double sum[kBiasColumns];  // one chunk: the sums, rounded straight into out
    double* sums = partials != nullptr ? partials + chunk * f.K + k0 : sum;
    column_sums(grad_y + b0 * bp.grad_y_stride_b + k0, bp.grad_y_stride_b, b_end - b0, n, sums);
    if (partials == nullptr)
      for (std::int64_t k = 0; k < n; ++k) out[k0 + k] = store_as<In>(sum[k]);
  }
  if (partials == nullptr) return;
#pragma omp parallel for if (parallel && f.K >= kBiasColumns) schedule(static)
  for (std::int64_t k = 0; k < f.K; ++k) {
    double total = 0;
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) total += partials[chunk * f.K + k];
    out[k] = store_as<In>(total);
  }
}

}  // namespace

void bias_column_sums(DType dtype, const void* first, std::int64_t stride, std::int64_t rows, std::int64_t n,
                      double* sums, SimdLevel level) {
  if (!simd_level_supported(level))
    throw Error(ErrorCode::unsupported, "level", "this processor does not support the requested SIMD level");
  visit_floating_dtype(dtype, [&]<class In>() { column_sums(static_cast<const In*>(first), stride, rows, n, sums, level); });
}

void run_backward(const BackwardProblem& p) {
  if (p.grad_x) visit_floating_dtype(p.forward.dtype, [&]<class In>() { input_gradient<In>(p); });
  if (p.grad_weight) visit_floating_dtype(p.forward.dtype, [&]<class In>() { weight_gradient<In>(p); });
  if (p.grad_bias) visit_floating_dtype(p.forward.dtype, [&]<class In>() { bias_gradient<In>(p); });
}

}  // namespace gather_linear::cpu
