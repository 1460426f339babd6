// The CPU backend's kernels (registered in cpu_kernels.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/problem.hpp"

namespace gather_linear::cpu {

// Instruction sets the gather-GEMM engine is compiled for; `best` picks at run time.
enum class SimdLevel { best, avx512, avx2, portable };
// How the engine computes: `packed` is the cache-blocked GEMM, `direct` dots each gathered row
// with each weight row, each weight row read once (for problems too small to repay packing),
// `row_blocks` the same a block of gathered rows at a time against every weight row (for few
// outputs: K up to 8), `weight_rows` the cache-blocked GEMM with y's tiles transposed, the
// weight read in place and A packed (for a weight large against the rows that reuse it);
// `automatic` picks by shape (gather_gemm.cpp). `row_blocks` and `direct` take `direct`'s
// element-wise form where the weight's rows do not run along a unit stride, `weight_rows` the
// packed path (and so where R*H or K is 0).
enum class GemmPath { automatic, packed, direct, row_blocks, weight_rows };

// Fused: the gathered rows are packed straight from x into a SIMD GEMM. float16/bfloat16
// accumulate in float32, float64 in float64. Throws gather_linear::Error if `level` is not
// supported by this processor.
void run_gather_gemm(const Problem& p, SimdLevel level = SimdLevel::best, GemmPath path = GemmPath::automatic);
bool simd_level_supported(SimdLevel level);

// Fused, bfloat16 on AMX tiles (bf16_gemm.cpp): float32 accumulation, y rounded once; float16 as
// the sum of three bfloat16 products per term (each value split exactly into two bfloat16 parts;
// with an infinity or NaN among x or the weight, on the SIMD engine). Throws gather_linear::Error
// unless amx_bf16_why_not(p) is empty.
void run_amx_bf16(const Problem& p);
// Empty when run_amx_bf16 can compute `p` (bfloat16 or float16, and a processor and OS with
// AMX-BF16).
std::string amx_bf16_why_not(const Problem& p);
bool amx_bf16_supported();

// Fused, bfloat16 on AVX512-BF16 dot products of pairs (bf16_gemm.cpp): float32 accumulation, y
// rounded once. Throws gather_linear::Error unless bf16_dot_why_not(p) is empty.
void run_bf16_dot(const Problem& p);
// Empty when run_bf16_dot can compute `p` (bfloat16, and a processor with AVX512-BF16).
std::string bf16_dot_why_not(const Problem& p);
bool bf16_dot_supported();
// True where run_bf16_dot takes its direct path for `p`: a short batch against a weight with a unit
// inner stride, each weight row read once in place rather than packed.
bool bf16_dot_reads_weight_in_place(const Problem& p);
// True where that direct path also beats AMX's (measured where both exist): up to 4 rows.
bool bf16_dot_beats_amx(const Problem& p);
// True where the float32 engine beats the dot kernel (without AMX) on a bfloat16 problem:
// reductions of up to 16, or of up to 256 on a single row, and past the dot kernel's direct path up
// to 16 outputs, or up to 64 with an odd H's reduction of up to 64.
bool engine_beats_dot(const Problem& p);
// True where the float32 engine beats AMX on a bfloat16 problem: reductions of up to 16, up to 8
// outputs, or short reductions with few outputs (R*H <= 32 with K <= 32, R*H <= 24 with K <= 64).
bool engine_beats_amx(const Problem& p);
// True where AMX's float16 split beats the float32 engine: 128 rows a thread or more, a reduction
// of 48 or more, 128 outputs or more, H * K of 4096 or more, x's slices and the weight's rows
// along unit strides.
bool amx_split_beats_engine(const Problem& p);
std::int64_t amx_split_min_rows();  // 128 a thread of OpenMP's
// True where the dot kernel's packed path outruns the float32 engine on bfloat16 widened to float32:
// on AMD's processors always, on Intel's (VDPBF16PS at a quarter of the FMA's issue rate) for few
// rows or little work.
bool bf16_dot_packed_beats_engine(const Problem& p);

// The backward's bias gradient before rounding (backward.cpp): sums[k], for k < n, is the sum over
// b < rows of first[b * stride + k] (of `dtype`), each value widened to double and added in order
// of b, at an instruction-set level (every level gives the same bits). Throws gather_linear::Error
// if `level` is not supported by this processor.
void bias_column_sums(DType dtype, const void* first, std::int64_t stride, std::int64_t rows, std::int64_t n,
                      double* sums, SimdLevel level);

// Exact reference: y_ref[b*K + k] in double precision, single-threaded, from the definition.
std::vector<double> reference_forward(const Problem& p);
// The same for the listed rows b only: out[i*K + k] belongs to row rows[i].
std::vector<double> reference_forward_rows(const Problem& p, std::span<const std::int64_t> rows);
// The reference rounded into y's dtype.
void run_reference(const Problem& p);

// The exact gradients, in double precision, from their definitions: x's (R, B, H), weight's
// (K, R*H) and bias's (K), row-major, each computed whether or not the problem asks for it.
struct ReferenceGradients {
  std::vector<double> x, weight, bias;
};
ReferenceGradients reference_backward(const BackwardProblem& p);

// Unfused baseline: concatenate into a (B, R*H) buffer, then one OpenBLAS GEMM plus bias.
void run_unfused_blas(const Problem& p);
// Empty when run_unfused_blas can express `p`, else why not.
std::string unfused_blas_why_not(const Problem& p);

}  // namespace gather_linear::cpu
