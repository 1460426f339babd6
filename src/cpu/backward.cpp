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

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "core/kernel_registry.hpp"
#include "core/numeric.hpp"
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

// sum[k] += row[k] for k < n, each element widened to Acc.
template <class In, class Acc>
void add_row(const In* row, Acc* sum, std::int64_t n) {
  for (std::int64_t k = 0; k < n; ++k) sum[k] += load_as<Acc>(row[k]);
}

#if defined(__x86_64__) && defined(__GNUC__)
// float16 through F16C, 8 columns at a time: the same sums (each lane one column's, over b in
// order), where core/numeric.hpp's portable widening, one element at a time, had made float16's
// bias gradient take about 4x float32's time (4.4 against 1.2 ms at B = 4096, K = 2048 on two
// cores of the AMX VM).
__attribute__((target("avx,f16c"))) void add_row_f16c(const Half* row, float* sum, std::int64_t n) {
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 widened = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k)));
    _mm256_storeu_ps(sum + k, _mm256_add_ps(_mm256_loadu_ps(sum + k), widened));
  }
  for (; k < n; ++k) sum[k] += _cvtsh_ss(row[k].bits);
}

template <>
void add_row(const Half* row, float* sum, std::int64_t n) {
  static const bool f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  if (f16c) return add_row_f16c(row, sum, n);
  for (std::int64_t k = 0; k < n; ++k) sum[k] += to_float(row[k]);
}
#endif

// Blocks of columns to the OpenMP threads, each summed row by row: every column's sum runs over b
// in order whatever the thread count, and the inner loop runs along contiguous k.
template <class In>
void bias_gradient(const BackwardProblem& bp) {
  using Acc = std::conditional_t<std::is_same_v<In, double>, double, float>;
  constexpr std::int64_t kColumns = 256;
  const Problem& f = bp.forward;
  const In* grad_y = static_cast<const In*>(bp.grad_y);
  In* out = static_cast<In*>(bp.grad_bias);
#pragma omp parallel for if (f.B * f.K >= kParallelElements) schedule(static)
  for (std::int64_t k0 = 0; k0 < f.K; k0 += kColumns) {
    const std::int64_t n = std::min(kColumns, f.K - k0);
    Acc sum[kColumns] = {};
    for (std::int64_t b = 0; b < f.B; ++b) {
      const In* row = grad_y + b * bp.grad_y_stride_b + k0;
      add_row(row, sum, n);
    }
    for (std::int64_t k = 0; k < n; ++k) out[k0 + k] = store_as<In>(sum[k]);
  }
}

}  // namespace

void run_backward(const BackwardProblem& p) {
  if (p.grad_x) visit_floating_dtype(p.forward.dtype, [&]<class In>() { input_gradient<In>(p); });
  if (p.grad_weight) visit_floating_dtype(p.forward.dtype, [&]<class In>() { weight_gradient<In>(p); });
  if (p.grad_bias) visit_floating_dtype(p.forward.dtype, [&]<class In>() { bias_gradient<In>(p); });
}

}  // namespace gather_linear::cpu
