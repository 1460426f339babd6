// The CUDA backward. Small problems take every requested gradient in one launch of our own
// kernel (one_launch_backward_kernel; where: one_launch_wins). Otherwise each gradient GEMM is
// one cuBLASLt call, reading x and writing gradients.x in their own layouts where it can
// (column-major, cuBLAS's convention, in which a row-major (rows, cols) matrix is its transpose):
//   gradients.x[r]^T (H x B)                     = W[:, r*H : r*H + H]^T (H x K) * grad_y^T (K x B)
//   gradients.weight[:, r*H : r*H + H]^T (H x K) = x[r]^T (H x B) * grad_y (B x K)
// Where the slices sit side by side (a head-major x, or its gradient) one GEMM covers them all.
// Otherwise the slices run as one GEMM batched over r, except where a copy costs less
// (copy_beats_slices) or the layout is one no GEMM can address: those take one GEMM on a
// concatenation of x (the weight's gradient), or one GEMM into a (B, R*H) scratch that is then
// split into gradients.x. Exact float32's gradients.x at scale runs instead on the forward's
// 3xTF32 tensor-core kernel, which reads both operands along the reduction: grad_y as it lies,
// the weight transposed into scratch first.
// The bias gradient sums grad_y's rows in a fixed order: split into blocks of rows, then the
// blocks' partial sums in order, so the result does not depend on scheduling.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/kernel_registry.hpp"
#include "cuda/backward.hpp"
#include "cuda/cublaslt_matmul.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_types.cuh"
#include "cuda/mma_gemm_kernel.hpp"
#include "cuda/mma_weight_gradient.hpp"
#include "cuda/unfused_cublaslt.hpp"

namespace gather_linear::cuda {
namespace {

// ---- kernels ----------------------------------------------------------------------------

struct Strided3d {
  std::int64_t size0, size1, size2, stride0, stride1, stride2;
  __host__ __device__ std::int64_t offset(std::int64_t i) const {
    const std::int64_t i2 = i % size2, i1 = (i / size2) % size1, i0 = i / (size2 * size1);
    return i0 * stride0 + i1 * stride1 + i2 * stride2;
  }
  __host__ __device__ std::int64_t elements() const { return size0 * size1 * size2; }
};

template <class T>
__global__ void zero_kernel(T* __restrict__ out, Strided3d view) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < view.elements();
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[view.offset(i)] = from_accumulator<T>(0);
}

// Copies between two views of the same sizes.
template <class T>
__global__ void copy_kernel(const T* __restrict__ in, Strided3d in_view, T* __restrict__ out, Strided3d out_view) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < out_view.elements();
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[out_view.offset(i)] = in[in_view.offset(i)];
}

// Row b of a (B, R*H) matrix into gradients.x[:, b, :]: VEC elements (16 bytes) at a time where
// h has a unit stride and every slice starts on a 16-byte boundary, else one at a time.
template <class T, int VEC>
__global__ void split_kernel(const T* __restrict__ in, std::int64_t B, std::int64_t H, std::int64_t RH,
                             T* __restrict__ out, std::int64_t stride_r, std::int64_t stride_b, std::int64_t stride_h) {
  const std::int64_t groups = B * RH / VEC;
  for (std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t e = g * VEC, b = e / RH, c = e - b * RH, r = c / H, h = c - r * H;
    if constexpr (VEC == 1)
      out[r * stride_r + b * stride_b + h * stride_h] = in[e];
    else
      *reinterpret_cast<uint4*>(out + r * stride_r + b * stride_b + h) = *reinterpret_cast<const uint4*>(in + e);
  }
}

// out[j * rows + i] = in[i * ld + j]: a (rows x cols) float32 matrix transposed (the weight, for
// gradients.x on the tensor cores). 32 x 32 tiles pass through shared memory so that reads and
// writes both coalesce.
constexpr int kTransposeTile = 32, kTransposePasses = 8;

__global__ void __launch_bounds__(kTransposeTile* kTransposePasses)
    transpose_kernel(const float* __restrict__ in, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                     float* __restrict__ out) {
  __shared__ float tile[kTransposeTile][kTransposeTile + 1];
  const std::int64_t row_tiles = (rows + kTransposeTile - 1) / kTransposeTile;
  const std::int64_t tiles = row_tiles * ((cols + kTransposeTile - 1) / kTransposeTile);
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const std::int64_t i0 = t % row_tiles * kTransposeTile, j0 = t / row_tiles * kTransposeTile;
    for (int p = threadIdx.y; p < kTransposeTile; p += kTransposePasses)
      if (i0 + p < rows && j0 + threadIdx.x < cols) tile[p][threadIdx.x] = in[(i0 + p) * ld + j0 + threadIdx.x];
    __syncthreads();
    for (int p = threadIdx.y; p < kTransposeTile; p += kTransposePasses)
      if (j0 + p < cols && i0 + threadIdx.x < rows) out[(j0 + p) * rows + i0 + threadIdx.x] = tile[threadIdx.x][p];
    __syncthreads();
  }
}

void transpose(const void* in, std::int64_t rows, std::int64_t cols, std::int64_t ld, void* out, int device,
               CudaStream stream) {
  const std::int64_t tiles =
      (rows + kTransposeTile - 1) / kTransposeTile * ((cols + kTransposeTile - 1) / kTransposeTile);
  const auto blocks = static_cast<unsigned>(std::clamp<std::int64_t>(tiles, 1, 8 * multiprocessor_count(device)));
  transpose_kernel<<<blocks, dim3(kTransposeTile, kTransposePasses), 0, stream>>>(static_cast<const float*>(in), rows,
                                                                                 cols, ld, static_cast<float*>(out));
  check_launch("transpose_kernel");
}

// The bias gradient sums grad_y's columns in two passes: each split of the rows into a partial
// sum (float32; double for float64), then the partial sums (the same kernel on that matrix, one
// split). A block is kSumLanes rows of 32 threads; each thread owns VEC adjacent columns (one
// 16-byte load per row where the rows allow it) and sums every kSumLanes-th row of its block's
// split; the block then adds its lanes in order. Neither that order nor the split depends on
// VEC, so both paths give the same bits.
constexpr int kSumLanes = 8;
constexpr int kSumThreadsPerRow = 32;

template <class In, class Out, int VEC>
__global__ void __launch_bounds__(kSumLanes* kSumThreadsPerRow)
    column_sums_kernel(const In* __restrict__ rows, std::int64_t ld, std::int64_t B, std::int64_t K,
                       std::int64_t rows_per_split, Accumulator<Out>* __restrict__ partial, Out* __restrict__ out) {
  using Acc = Accumulator<Out>;
  static_assert(std::is_same_v<Accumulator<In>, Acc>, "the partial sums keep the output's accumulator");
  constexpr int kColumns = kSumThreadsPerRow * VEC;
  __shared__ Acc lane_sums[kSumLanes][kColumns];
  const std::int64_t first_column = static_cast<std::int64_t>(blockIdx.x) * kColumns;
  const std::int64_t k0 = first_column + threadIdx.x * VEC;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.y) * rows_per_split;
  const std::int64_t last = first + rows_per_split < B ? first + rows_per_split : B;
  Acc sum[VEC] = {};
  if (k0 + VEC <= K) {
#pragma unroll 8
    for (std::int64_t b = first + threadIdx.y; b < last; b += kSumLanes) {
      Acc v[VEC];
      load_as_accumulator<In, VEC>(rows + b * ld + k0, v);
#pragma unroll
      for (int i = 0; i < VEC; ++i) sum[i] += v[i];
    }
  } else {  // the row's last, partial group
    for (std::int64_t b = first + threadIdx.y; b < last; b += kSumLanes)
      for (int i = 0; i < VEC && k0 + i < K; ++i) sum[i] += to_accumulator(rows[b * ld + k0 + i]);
  }
#pragma unroll
  for (int i = 0; i < VEC; ++i) lane_sums[threadIdx.y][threadIdx.x * VEC + i] = sum[i];
  __syncthreads();
  for (int c = threadIdx.y * kSumThreadsPerRow + threadIdx.x; c < kColumns; c += kSumLanes * kSumThreadsPerRow) {
    const std::int64_t k = first_column + c;
    if (k >= K) break;
    Acc total = lane_sums[0][c];
    for (int lane = 1; lane < kSumLanes; ++lane) total += lane_sums[lane][c];
    if (partial != nullptr)
      partial[blockIdx.y * K + k] = total;
    else
      out[k] = from_accumulator<Out>(total);
  }
}

// Enqueues the column sums of `rows` (B x K, rows ld apart) in splits of rows_per_split rows:
// into `partial` (a row per split) when there are several, else into `out`.
template <class In, class Out>
void launch_column_sums(const In* rows, std::int64_t ld, std::int64_t B, std::int64_t K, std::int64_t rows_per_split,
                        Accumulator<Out>* partial, Out* out, CudaStream stream) {
  const auto launch = [&]<int VEC>() {
    const dim3 grid(static_cast<unsigned>((K + kSumThreadsPerRow * VEC - 1) / (kSumThreadsPerRow * VEC)),
                    static_cast<unsigned>((B + rows_per_split - 1) / rows_per_split));
    column_sums_kernel<In, Out, VEC><<<grid, dim3(kSumThreadsPerRow, kSumLanes), 0, stream>>>(
        rows, ld, B, K, rows_per_split, partial, out);
  };
  constexpr int kVec = kVec16<In>;
  if (aligned_to(rows, 16) && (B == 1 || ld % kVec == 0))
    launch.template operator()<kVec>();
  else
    launch.template operator()<1>();
  check_launch("column_sums_kernel");
}

// Small problems' gradients in one launch, without cuBLAS or scratch. Each gradient is cut into
// tiles of 32 outputs; lane j of a tile's warps owns output j. gradients.weight (as (K, R*H)) and
// the bias are tiled in row-major order, so that where R*H is no multiple of 32 a tile runs on
// into the next row and no lane idles but past the gradient's end; their lanes read adjacent
// elements of grad_y's row (coalesced). gradients.x (as (B, R*H)) is tiled so too where that is
// short work (one_launch_input_tiles_across_rows); otherwise its tiles keep to a row, lanes idle
// past the row's end, since a tile across rows reads one element of grad_y a row. A tile's
// reduction is split between `splits` warps (1 to 32, more for longer reductions: see
// one_launch_splits), warp s taking every splits-th index from s, 8 or 16 loads in flight
// (one_launch_unroll); the partial sums then meet in shared memory, added in warp order, so each
// sum's order depends on the shape alone. A block has as many warps as the longest requested
// reduction splits into (at least kOneLaunchMinWarps) and holds warps / splits tiles of one
// gradient. Blocks number gradients.x's tiles first, then gradients.weight's, then the bias's; a
// requested gradient whose reduction is empty (K = 0 or B = 0) is written as zeros.
constexpr int kOneLaunchMinWarps = 8;
constexpr int kOneLaunchMaxWarps = 32;

// Loads a warp keeps in flight: 8, or 16 in float32 with B > 8. The kernel of 16 holds 64
// registers a thread (one 1024-thread block a multiprocessor, against two for the kernel of 8)
// and splits each reduction between half as many warps. On an H100 (all three gradients,
// backward_one_launch_unroll_h100_session70_b.csv) it took 0.63-0.94x the kernel of 8's time in
// float32 where B = 12-1024 (9 shapes; 7.7 us against 12.1 at (4, 12, 32, 1024)), but 1.19x and
// 1.57x at B = 8 and 2 with K = 128 and 1024 (0.95x at B = 1), and 1.02-1.53x in bfloat16.
int one_launch_unroll(const Problem& f) { return f.dtype == DType::float32 && f.B > 8 ? 16 : 8; }

// Whether gradients.x's tiles run across rows. Such a tile's load touches up to ceil(32 / R*H) + 1
// rows of grad_y, a sector each, and its K loads queue on one multiprocessor's L1: about
// K * ceil(32 / R*H) cycles, short work up to 2^13 (4 us). On an H100 (all three gradients,
// backward_one_launch_flat_tiles_h100_session72.csv) tiles across rows took 0.32-0.77x the time
// of tiles within rows where R*H = 1-16 and that count is 1024-8192 (7 cells); at 32768 (K = 1024,
// R*H = 1) 3.0x with B = 64, two tiles carrying the work, and 0.75x with B = 512, a cell the
// rule leaves to the forms either way (13 us against 20 and 26). With this choice
// (backward_one_launch_input_tiles_h100_session73.csv) the seven took 0.32-0.78x the former
// layout's time, the other nine timed against it 0.98-1.02x.
bool one_launch_input_tiles_across_rows(const Problem& f) {
  return f.K * ((32 + f.RH - 1) / std::max<std::int64_t>(f.RH, 1)) <= 8192;
}

// Warps per tile for a reduction this long: enough that each warp's share is one round of
// `unroll` loads, up to kOneLaunchMaxWarps (a long reduction's rounds are each a memory latency,
// so they, not the loads, set its time).
int one_launch_splits(std::int64_t length, int unroll) {
  int splits = 1;
  while (splits < kOneLaunchMaxWarps && splits * unroll < length) splits *= 2;
  return splits;
}

struct OneLaunchSegment {
  std::int64_t tiles = 0, blocks = 0;  // tiles of 32 outputs; blocks of warps / splits tiles
  int splits = 1;
};

struct OneLaunchArgs {
  const void* x;
  const void* weight;
  const void* grad_y;
  void* grad_x;
  void* grad_weight;
  void* grad_bias;
  std::int64_t B, H, K, RH;
  std::int64_t x_stride_r, x_stride_b, x_stride_h, weight_stride_k, grad_y_stride_b;
  std::int64_t grad_x_stride_r, grad_x_stride_b, grad_x_stride_h, grad_weight_stride_k;
  int input_row_tiles;  // gradients.x's tiles a row; 0 where they run across rows
  int warps;            // per block
  int unroll;           // loads in flight a warp: the kernel's kUnroll
  OneLaunchSegment input, weight_gradient, bias;
  std::int64_t blocks() const { return input.blocks + weight_gradient.blocks + bias.blocks; }
};

// sum over i < length of a[i * a_step] * b[i * b_step] (b null: of a[i * a_step]), over the
// indices split, split + splits, ... that this warp owns.
template <int kUnroll, class T>
__device__ __forceinline__ Accumulator<T> warp_share_of_sum(const T* a, std::int64_t a_step, const T* b,
                                                            std::int64_t b_step, std::int64_t length, int split,
                                                            int splits) {
  using Acc = Accumulator<T>;
  Acc sum = 0;
  for (std::int64_t i0 = split; i0 < length; i0 += static_cast<std::int64_t>(splits) * kUnroll) {
    Acc u[kUnroll], v[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const std::int64_t i = i0 + static_cast<std::int64_t>(j) * splits;
      u[j] = i < length ? to_accumulator(__ldg(a + i * a_step)) : Acc(0);
      v[j] = b == nullptr ? Acc(1) : i < length ? to_accumulator(__ldg(b + i * b_step)) : Acc(0);
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) sum = fused_multiply_add(u[j], v[j], sum);
  }
  return sum;
}

// A minimum of two blocks a multiprocessor holds the kernel of 8 at 32 registers (ptxas spills
// the output's address around the reduction loops, not in them); a minimum of one lets the kernel
// of 16 take 64.
template <class T, int kUnroll>
__global__ void __launch_bounds__(32 * kOneLaunchMaxWarps, kUnroll == 8 ? 2 : 1)
    one_launch_backward_kernel(const OneLaunchArgs a) {
  using Acc = Accumulator<T>;
  __shared__ Acc partial[kOneLaunchMaxWarps][32];
  const int lane = threadIdx.x, warp = threadIdx.y;
  const T* grad_y = static_cast<const T*>(a.grad_y);
  wait_for_prerequisite_grid();
  allow_dependent_launch();
  // This block's gradient, and this warp's tile and share of its reduction.
  std::int64_t block = blockIdx.x;
  int gradient = 0;
  const OneLaunchSegment* segment = &a.input;
  if (block >= a.input.blocks) {
    block -= a.input.blocks, gradient = 1, segment = &a.weight_gradient;
    if (block >= a.weight_gradient.blocks) block -= a.weight_gradient.blocks, gradient = 2, segment = &a.bias;
  }
  const int splits = segment->splits, split = warp % splits;
  const std::int64_t tile = block * (a.warps / splits) + warp / splits;
  T* out = nullptr;  // this lane's output; null past the gradient's end
  Acc sum = 0;
  if (tile < segment->tiles) {
    // This lane's output. A gradient's outputs number below 2^31 (plan_backward), so its
    // indices divide in 32 bits, which keeps the kernel of 8 at 32 registers.
    const auto t = static_cast<std::uint32_t>(tile), e = t * 32 + lane;
    const auto RH = static_cast<std::uint32_t>(a.RH), H = static_cast<std::uint32_t>(a.H);
    if (gradient == 0) {  // gradients.x[r, b, h] = sum_k grad_y[b, k] * W[k, r*H + h]
      const auto row_tiles = static_cast<std::uint32_t>(a.input_row_tiles);
      const std::uint32_t b = row_tiles == 0 ? e / RH : t / row_tiles,
                          c = row_tiles == 0 ? e - b * RH : (t - b * row_tiles) * 32 + lane;
      if (b < a.B && c < RH) {
        const std::uint32_t r = c / H, h = c - r * H;
        out = static_cast<T*>(a.grad_x) + r * a.grad_x_stride_r + b * a.grad_x_stride_b + h * a.grad_x_stride_h;
        sum = warp_share_of_sum<kUnroll>(grad_y + b * a.grad_y_stride_b, 1, static_cast<const T*>(a.weight) + c,
                                         a.weight_stride_k, a.K, split, splits);
      }
    } else if (gradient == 1) {  // gradients.weight[k, r*H + h] = sum_b grad_y[b, k] * x[r, b, h]
      if (e < a.K * a.RH) {
        const std::uint32_t k = e / RH, c = e - k * RH, r = c / H, h = c - r * H;
        out = static_cast<T*>(a.grad_weight) + k * a.grad_weight_stride_k + c;
        sum = warp_share_of_sum<kUnroll>(grad_y + k, a.grad_y_stride_b,
                                         static_cast<const T*>(a.x) + r * a.x_stride_r + h * a.x_stride_h,
                                         a.x_stride_b, a.B, split, splits);
      }
    } else {  // gradients.bias[k] = sum_b grad_y[b, k]
      if (const std::uint32_t k = e; k < a.K) {
        out = static_cast<T*>(a.grad_bias) + k;
        sum = warp_share_of_sum<kUnroll, T>(grad_y + k, a.grad_y_stride_b, nullptr, 0, a.B, split, splits);
      }
    }
  }
  partial[warp][lane] = sum;
  __syncthreads();
  if (split == 0 && out != nullptr) {
    Acc total = partial[warp][lane];
    for (int s = 1; s < splits; ++s) total += partial[warp + s][lane];
    *out = from_accumulator<T>(total);
  }
}

OneLaunchArgs one_launch_args(const BackwardProblem& p) {
  const Problem& f = p.forward;
  OneLaunchArgs a{f.x, f.weight, p.grad_y, p.grad_x, p.grad_weight, p.grad_bias, f.B, f.H, f.K, f.RH,
                  f.x_stride_r, f.x_stride_b, f.x_stride_h, f.weight_stride_k, p.grad_y_stride_b,
                  p.grad_x_stride_r, p.grad_x_stride_b, p.grad_x_stride_h, p.grad_weight_stride_k};
  a.input_row_tiles = one_launch_input_tiles_across_rows(f) ? 0 : static_cast<int>((f.RH + 31) / 32);
  a.unroll = one_launch_unroll(f);
  const int input_splits = one_launch_splits(f.K, a.unroll), batch_splits = one_launch_splits(f.B, a.unroll);
  a.warps = std::max({kOneLaunchMinWarps, p.grad_x != nullptr ? input_splits : 1,
                      p.grad_weight != nullptr || p.grad_bias != nullptr ? batch_splits : 1});
  const auto segment = [&](bool requested, std::int64_t tiles, int splits) -> OneLaunchSegment {
    if (!requested || tiles == 0) return {};
    const int per_block = a.warps / splits;
    return {tiles, (tiles + per_block - 1) / per_block, splits};
  };
  a.input = segment(p.grad_x != nullptr, a.input_row_tiles == 0 ? (f.B * f.RH + 31) / 32 : f.B * a.input_row_tiles,
                    input_splits);
  a.weight_gradient = segment(p.grad_weight != nullptr, (f.K * f.RH + 31) / 32, batch_splits);
  a.bias = segment(p.grad_bias != nullptr, (f.K + 31) / 32, batch_splits);
  return a;
}

void one_launch_backward(const BackwardProblem& p, CudaStream stream) {
  const Problem& f = p.forward;
  const OneLaunchArgs a = one_launch_args(p);
  const std::int64_t blocks = a.blocks();
  if (blocks == 0) return;
  visit_any_device_dtype(f.dtype, [&]<class T>() {
    auto* kernel = one_launch_backward_kernel<T, 8>;
    if constexpr (std::is_same_v<T, float>)
      if (a.unroll == 16) kernel = one_launch_backward_kernel<T, 16>;
    launch_maybe_programmatic(kernel, a, dim3(static_cast<unsigned>(blocks)), dim3(32, static_cast<unsigned>(a.warps)),
                              0, stream, f.device.index, /*programmatic=*/true, "one_launch_backward_kernel");
  });
}

void zero(void* out, Strided3d view, const Problem& f, CudaStream stream) {
  visit_any_device_dtype(f.dtype, [&]<class T>() {
    zero_kernel<T><<<grid_stride_blocks(view.elements(), f.device.index), 256, 0, stream>>>(static_cast<T*>(out), view);
    check_launch("zero_kernel");
  });
}

void copy(const void* in, Strided3d in_view, void* out, Strided3d out_view, const Problem& f, CudaStream stream) {
  visit_any_device_dtype(f.dtype, [&]<class T>() {
    copy_kernel<T><<<grid_stride_blocks(out_view.elements(), f.device.index), 256, 0, stream>>>(
        static_cast<const T*>(in), in_view, static_cast<T*>(out), out_view);
    check_launch("copy_kernel");
  });
}

// ---- the plan: which form each gradient takes, and the scratch it needs ---------------------

// Whether one GEMM plus a copy (x into its concatenation, or gradients.x out of a (B, R*H)
// scratch) beats R GEMMs of the slices in one batched call. Measured on an H200 with every form
// forced (`backward_timing --forms`, contiguous x): backward_forms_h200.csv (H 32 to 128, R 4
// and 16, B 12 to 16384, K 512 and 4096), backward_forms_h200_r.csv (bfloat16, R 8, 26 and 32,
// H 32 and 64, B 512 to 16384, K 1024 and 4096), backward_forms_h200_b.csv (bfloat16, R 4 to
// 32, H 32 and 64, B 512 to 2048 with K 2048 and 4096, B 4096 and 8192 with K 512 and 1024) and
// backward_forms_h200_long.csv (bfloat16, R 2 to 8, H 32 and 64, B 8192 to 32768, K 512 and
// 1024).
// - float32: cuBLASLt's batched kernels lost badly (gradients.x up to 14x, gradients.weight up
//   to 9x slower than the copy), while the copy cost at most 1.1x (gradients.x) or, from 2^16
//   elements of x, 1.22x (gradients.weight); but gradients.weight's batches of full-width slices
//   (H >= 128) won by up to 5% from K = 1024 (K = 1024 in backward_timing_h200.csv). Below
//   K = 512 (gradients.x: the reduction's depth) only the seed problem was measured, where the
//   batch won (backward_timing_h200.csv).
// - 16-bit: batches won while the copy's extra launch mattered, and for full-width slices
//   (H >= 128). For narrow slices, over the 194 shapes of the four files:
//   - gradients.x's copy won from 2^19 elements of x with K >= 2048 and B >= 1024 (B = 512 was
//     a draw or lost by up to 25%). Below K = 2048 it needs a long batch: R >= 8 with B >= 8192
//     (B >= 4096 for K = 1024), or R >= 4 with B >= 16384 (B >= 32768 for K = 512). The chosen
//     form's time over the better one's: mean 1.042, worst 1.31 under the rule before; mean
//     1.009, worst 1.23 now.
//   - gradients.weight's copy won from 2^18 elements with K >= 2048. Below K = 2048 it won
//     where the batch is short: from 2^19 elements for R <= 4 with B >= 8192 (R = 2 ran up to
//     2.2x slower batched), from 2^21 for R <= 8; and from 2^21 for long narrow slices (H = 32,
//     B >= 8192). Batches of R >= 16 slices of H = 64 won by 15-35%. Mean 1.042, worst 2.24
//     before; mean 1.014, worst 1.28 now.
bool copy_beats_slices(const Problem& f, bool input_gradient) {
  const std::int64_t x_elements = f.B * f.RH;
  if (f.dtype == DType::float32 || f.dtype == DType::float64)  // float64: float32's rule, not measured apart
    return input_gradient ? f.K >= 512 : x_elements >= (std::int64_t{1} << 16) && (f.H < 128 || f.K < 1024);
  if (f.H >= 128) return false;
  if (input_gradient) {
    if (x_elements < (std::int64_t{1} << 19)) return false;
    if (f.K >= 2048) return f.B >= 1024;
    if (f.R >= 8 && (f.B >= 8192 || (f.K >= 1024 && f.B >= 4096))) return true;
    return f.R >= 4 && f.B >= (f.K >= 1024 ? 16384 : 32768);
  }
  if (x_elements < (std::int64_t{1} << 18)) return false;
  if (f.K >= 2048) return true;
  if (x_elements >= (std::int64_t{1} << 19) && f.R <= 4 && f.B >= 8192) return true;
  return x_elements >= (std::int64_t{1} << 21) && (f.R <= 8 || (f.H <= 32 && f.B >= 8192));
}

// ---- gradients.x on the tensor cores (exact float32) ----------------------------------------

// gradients.x's slices side by side with a unit stride in h (a head-major x's gradient): one
// (B, R*H) matrix with rows grad_x_stride_b apart.
bool input_gradient_side_by_side(const BackwardProblem& p) {
  const Problem& f = p.forward;
  return (f.H == 1 || p.grad_x_stride_h == 1) && (f.R == 1 || p.grad_x_stride_r == f.H);
}

// gradients.x[b, r*H + h] = sum_k grad_y[b, k] * W^T[r*H + h, k]: the forward's problem with
// grad_y as its x (one slice of K) and the transposed weight as its weight, into `out` (rows
// ld_out apart).
Problem input_gradient_gemm(const BackwardProblem& p, const void* transposed_weight, void* out, std::int64_t ld_out) {
  const Problem& f = p.forward;
  Problem g;
  g.R = 1, g.B = f.B, g.H = f.K, g.RH = f.K, g.K = f.RH;
  g.dtype = f.dtype, g.device = f.device;
  g.x = p.grad_y, g.x_stride_b = p.grad_y_stride_b, g.x_stride_h = 1;
  g.weight = transposed_weight, g.weight_stride_k = f.K;
  g.y = out, g.y_stride_b = ld_out;
  return g;
}

// Stands for a scratch part's address before the scratch exists: every part starts on a
// 256-byte boundary.
const void* const kScratchPart = reinterpret_cast<const void*>(std::uintptr_t{256});

std::string input_tensor_cores_why_not(const BackwardProblem& p) {
  if (p.forward.dtype != DType::float32) return "takes float32 only";
  return mma_gemm_why_not(input_gradient_gemm(p, kScratchPart, nullptr, p.forward.RH));
}

// Exact float32's gradients.x on the tensor cores (backward_timing --forms on an H100,
// backward_forms_tensor_cores_h100_session67.csv): from 2^20 outputs with K >= 1024, 0.86-0.97x
// the time of the cuBLAS form the rules below would take (11 shapes; 0.88-1.00x the better of
// split and slices). Fewer outputs leave SMs idle (2^17 to 2^19: 1.4-2.1x); short reductions
// lose to the batched slices (K = 256 and 512: 1.21x and 1.09x).
bool input_takes_tensor_cores(const BackwardProblem& p) {
  const Problem& f = p.forward;
  return f.B * f.RH >= 786432 && f.K >= 1024 && input_tensor_cores_why_not(p).empty();
}

InputGradientForm input_gradient_form(const BackwardProblem& p, Fp32Precision precision) {
  const Problem& f = p.forward;
  if (f.K == 0) return InputGradientForm::zero;
  if (precision == Fp32Precision::ieee && input_takes_tensor_cores(p)) return InputGradientForm::tensor_cores;
  const bool h_unit = f.H == 1 || p.grad_x_stride_h == 1;
  // Distinct elements (validated) put a unit-stride h's neighbours, b or r, at least H apart.
  if (input_gradient_side_by_side(p)) return InputGradientForm::side_by_side;
  if (copy_beats_slices(f, /*input_gradient=*/true)) return InputGradientForm::split;
  if (h_unit) return InputGradientForm::slices_h_unit;
  if (f.B == 1 || p.grad_x_stride_b == 1) return InputGradientForm::slices_b_unit;
  return InputGradientForm::split;
}

// Exact float32's gradients.weight on the tensor cores (backward_timing --forms, the kernel
// against the better of cuBLAS's batched slices and concatenation): on an H100, 0.77-0.92x its
// time on 23 shapes from 2^28 multiply-adds B*K*R*H up to 2^37
// (backward_forms_weight_tensor_cores_h100_session75.csv); on an H200's grid of 24 shapes from 2^23
// to 2^27.7 (backward_forms_weight_tensor_cores_grid_h200_session75.csv), 0.77-0.94x from 2^27
// (one tie, 1.001x, at 512 tiles over 64 rows) and 0.93-1.47x below it, where few output tiles
// or a short reduction leave multiprocessors idle or the launch costs as much as the work.
bool weight_takes_tensor_cores(const BackwardProblem& p) {
  const Problem& f = p.forward;
  return static_cast<double>(f.B) * static_cast<double>(f.K) * static_cast<double>(f.RH) >=
             static_cast<double>(kWeightTensorCoreMultiplyAdds) &&
         mma_weight_gradient_why_not(p).empty();
}

WeightGradientForm weight_gradient_form(const BackwardProblem& p, Fp32Precision precision) {
  const Problem& f = p.forward;
  if (f.B == 0) return WeightGradientForm::zero;
  if (precision == Fp32Precision::ieee && weight_takes_tensor_cores(p)) return WeightGradientForm::tensor_cores;
  // x is an input: its strides may overlap (a broadcast row), which no GEMM operand can express.
  const bool h_unit = (f.H == 1 || f.x_stride_h == 1) && (f.B == 1 || f.x_stride_b >= f.H);
  if (h_unit && (f.R == 1 || f.x_stride_r == f.H) && (f.B == 1 || f.x_stride_b >= f.RH))
    return WeightGradientForm::side_by_side;
  if (copy_beats_slices(f, /*input_gradient=*/false)) return WeightGradientForm::concatenated;
  if (h_unit) return WeightGradientForm::slices_h_unit;
  if ((f.B == 1 || f.x_stride_b == 1) && (f.H == 1 || f.x_stride_h >= f.B)) return WeightGradientForm::slices_b_unit;
  return WeightGradientForm::concatenated;
}

// Where one launch of one_launch_backward_kernel beats the forms' cuBLAS calls and column sums
// (backward_timing --one-launch on an H100, all three gradients, contiguous and head-major x;
// backward_one_launch_h100_session69.csv and the session-71 files named below), by K, B and
// lane products B*K*R*H, with R*H rounded up to 32 where gradients.x is requested and its tiles
// keep to rows (their lanes idle past a row's end: uncounted, cells with R*H = 1-8 had taken
// 1.1-4.4x the forms' time, 57.6 us against 13.1 at (1, 512, 1, 1024) in float32;
// backward_one_launch_narrow_h100_session71.csv). Over 21 cells with R*H = 1-155 no multiple of
// 32 this count sides with the faster in 19: it takes (1, 8, 1, 1024) float32 at 1.08x, and
// leaves (3, 200, 5, 700) float32, just past 2^21, to the forms at 2.1x
// (backward_one_launch_input_tiles_h100_session73.csv). By the count:
// - 16-bit and float64 up to 2^20 with K <= 256: 0.40-0.93x the forms' time; from 1.5 * 2^20,
//   or at 2^20 with K = 1024, 1.09-2.96x (cuBLAS's 16-bit GEMMs take half its float32 ones' time);
// - float32 up to 2^21 with K <= 1024: 0.13-0.94x (0.13x at K = 1024, B = 12, where cuBLASLt's
//   heuristic picks a 55 us SGEMM); past 2^21 1.0-2.6x, mostly, or at K = 4096 1.8x (where B > 8,
//   with 16 loads in flight: backward_one_launch_rule_grid_h100_session71.csv);
// - a reduction over B = 1024: in 16-bit and float64 (32 warps of 4 rounds of 8 loads) 0.98-2.1x;
//   in float32 (2 rounds of 16) over B = 600-1024, 0.44-0.81x up to 2^21.
bool one_launch_wins(const BackwardProblem& p) {
  const Problem& f = p.forward;
  if (p.grad_x == nullptr && p.grad_weight == nullptr) return false;  // the column sums are one launch already
  const bool float32 = f.dtype == DType::float32;
  if (f.B > (float32 ? 1024 : 512) || f.K > (float32 ? 1024 : 256)) return false;
  const bool padded_rows = p.grad_x != nullptr && !one_launch_input_tiles_across_rows(f);
  const std::int64_t lane_products = f.B * f.K * (padded_rows ? (f.RH + 31) / 32 * 32 : f.RH);
  return lane_products <= (std::int64_t{1} << (float32 ? 21 : 20));
}

// Weight rows that overlap (stride(0) < R*H, e.g. one row broadcast) are no GEMM operand: the
// input gradient then reads a contiguous copy.
bool weight_needs_copy(const Problem& f) { return f.K > 1 && f.weight_stride_k < f.RH; }

// How the bias gradient splits grad_y's rows: into about 1024 blocks (a wave of an H200 at 8
// blocks per multiprocessor) counting the vectorized path's column blocks, 64 to 256 rows each
// (and few enough splits for a grid's second dimension). It depends on the shape alone, so the
// sum's order does.
struct ColumnSumSplit {
  std::int64_t rows, splits;
};

ColumnSumSplit column_sum_split(const Problem& f) {
  const auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  const auto round_up = [&](std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; };
  const std::int64_t widest_block = kSumThreadsPerRow * 16 / static_cast<std::int64_t>(dtype_size(f.dtype));
  const std::int64_t column_blocks = ceil_div(f.K, widest_block);
  std::int64_t rows = std::clamp<std::int64_t>(round_up(ceil_div(f.B * column_blocks, 1024), kSumLanes), 64, 256);
  rows = std::max(rows, round_up(ceil_div(f.B, 65535), kSumLanes));
  return {rows, ceil_div(f.B, rows)};
}

// ---- the three gradients ---------------------------------------------------------------

// gradients.x from its (B, R*H) matrix `unsplit`.
void split(const BackwardProblem& p, const void* unsplit, CudaStream stream) {
  const Problem& f = p.forward;
  visit_any_device_dtype(f.dtype, [&]<class T>() {
    constexpr int kVec = kVec16<T>;
    const bool vectorizable = slices_vectorizable(p.grad_x, f.R, f.B, f.H, p.grad_x_stride_r, p.grad_x_stride_b,
                                                  p.grad_x_stride_h, kVec);
    const auto* in = static_cast<const T*>(unsplit);
    auto* grad_x = static_cast<T*>(p.grad_x);
    if (vectorizable)
      split_kernel<T, kVec><<<grid_stride_blocks(f.B * f.RH / kVec, f.device.index), 256, 0, stream>>>(
          in, f.B, f.H, f.RH, grad_x, p.grad_x_stride_r, p.grad_x_stride_b, p.grad_x_stride_h);
    else
      split_kernel<T, 1><<<grid_stride_blocks(f.B * f.RH, f.device.index), 256, 0, stream>>>(
          in, f.B, f.H, f.RH, grad_x, p.grad_x_stride_r, p.grad_x_stride_b, p.grad_x_stride_h);
    check_launch("split_kernel");
  });
}

void tensor_core_input_gradient(const BackwardProblem& p, std::byte* scratch, const ScratchLayout& layout,
                                CudaStream stream) {
  const Problem& f = p.forward;
  std::byte* transposed_weight = scratch + layout.weight_copy;
  transpose(f.weight, f.K, f.RH, f.weight_stride_k, transposed_weight, f.device.index, stream);
  const bool in_place = input_gradient_side_by_side(p);
  void* out = in_place ? p.grad_x : scratch + layout.unsplit;
  const std::int64_t ld_out = in_place && f.B > 1 ? p.grad_x_stride_b : f.RH;
  run_mma_gemm(input_gradient_gemm(p, transposed_weight, out, ld_out), Fp32Precision::ieee, stream);
  if (!in_place) split(p, out, stream);
}

void input_gradient(const BackwardProblem& p, InputGradientForm form, bool tf32, std::byte* scratch,
                    const ScratchLayout& layout, CudaStream stream) {
  const Problem& f = p.forward;
  if (form == InputGradientForm::zero) {
    zero(p.grad_x, {f.R, f.B, f.H, p.grad_x_stride_r, p.grad_x_stride_b, p.grad_x_stride_h}, f, stream);
    return;
  }
  if (form == InputGradientForm::tensor_cores) {
    tensor_core_input_gradient(p, scratch, layout, stream);
    return;
  }
  const void* weight = f.weight;
  std::int64_t ldw = f.K == 1 ? f.RH : f.weight_stride_k;
  if (weight_needs_copy(f)) {
    weight = scratch + layout.weight_copy;
    copy(f.weight, {1, f.K, f.RH, 0, f.weight_stride_k, 1}, scratch + layout.weight_copy, {1, f.K, f.RH, 0, f.RH, 1},
         f, stream);
    ldw = f.RH;
  }
  StridedBatchedGemm g;
  g.dtype = f.dtype;
  g.tf32 = tf32;
  g.k = f.K;
  const GemmOperand grad_y{p.grad_y, false, p.grad_y_stride_b, 0};  // K x B
  void* out = form == InputGradientForm::split ? scratch + layout.unsplit : p.grad_x;
  switch (form) {
    case InputGradientForm::side_by_side:
    case InputGradientForm::split:  // (R*H x B) = W^T (R*H x K) * grad_y^T
      g.m = f.RH, g.n = f.B;
      g.a = {weight, false, ldw, 0};
      g.b = grad_y;
      g.d = out;
      g.ldd = form == InputGradientForm::split || f.B == 1 ? f.RH : p.grad_x_stride_b;
      break;
    case InputGradientForm::slices_h_unit:  // per r: (H x B) = W_r^T (H x K) * grad_y^T
      g.m = f.H, g.n = f.B, g.batch = f.R;
      g.a = {weight, false, ldw, f.H};
      g.b = grad_y;
      g.d = out, g.ldd = f.B == 1 ? f.H : p.grad_x_stride_b, g.batch_stride_d = p.grad_x_stride_r;
      break;
    case InputGradientForm::slices_b_unit:  // per r: (B x H) = grad_y (B x K) * W_r (K x H)
      g.m = f.B, g.n = f.H, g.batch = f.R;
      g.a = {p.grad_y, true, p.grad_y_stride_b, 0};
      g.b = {weight, true, ldw, f.H};
      g.d = out, g.ldd = f.H == 1 ? f.B : p.grad_x_stride_h, g.batch_stride_d = p.grad_x_stride_r;
      break;
    case InputGradientForm::zero:
    case InputGradientForm::tensor_cores: break;
  }
  run_gemm(g, f.device.index, scratch, stream);
  if (form == InputGradientForm::split) split(p, out, stream);
}

void weight_gradient(const BackwardProblem& p, WeightGradientForm form, bool tf32, std::byte* scratch,
                     const ScratchLayout& layout, CudaStream stream) {
  const Problem& f = p.forward;
  if (form == WeightGradientForm::zero) {
    zero(p.grad_weight, {1, f.K, f.RH, 0, p.grad_weight_stride_k, 1}, f, stream);
    return;
  }
  if (form == WeightGradientForm::tensor_cores) {
    run_mma_weight_gradient(p, mma_weight_gradient_launch(p), scratch + layout.weight_partial_sums, stream);
    return;
  }
  StridedBatchedGemm g;
  g.dtype = f.dtype;
  g.tf32 = tf32;
  g.k = f.B;
  g.n = f.K;
  g.b = {p.grad_y, true, p.grad_y_stride_b, 0};  // (B x K)
  g.d = p.grad_weight, g.ldd = p.grad_weight_stride_k;
  switch (form) {
    case WeightGradientForm::side_by_side:  // (R*H x K) = cat^T (R*H x B) * grad_y
      g.m = f.RH;
      g.a = {f.x, false, f.B == 1 ? f.RH : f.x_stride_b, 0};
      break;
    case WeightGradientForm::concatenated:
      concatenate(f, scratch + layout.concatenation, stream);
      g.m = f.RH;
      g.a = {scratch + layout.concatenation, false, f.RH, 0};
      break;
    case WeightGradientForm::slices_h_unit:  // per r: (H x K) = x[r]^T (H x B) * grad_y
      g.m = f.H, g.batch = f.R, g.batch_stride_d = f.H;
      g.a = {f.x, false, f.B == 1 ? f.H : f.x_stride_b, f.x_stride_r};
      break;
    case WeightGradientForm::slices_b_unit:  // x[r] read as a column-major (B x H), transposed
      g.m = f.H, g.batch = f.R, g.batch_stride_d = f.H;
      g.a = {f.x, true, f.H == 1 ? f.B : f.x_stride_h, f.x_stride_r};
      break;
    case WeightGradientForm::zero:
    case WeightGradientForm::tensor_cores: break;
  }
  run_gemm(g, f.device.index, scratch, stream);
}

void bias_gradient(const BackwardProblem& p, std::byte* scratch, const ScratchLayout& layout, CudaStream stream) {
  const Problem& f = p.forward;
  if (f.B == 0) {
    zero(p.grad_bias, {1, 1, f.K, 0, 0, 1}, f, stream);
    return;
  }
  const ColumnSumSplit split = column_sum_split(f);
  visit_any_device_dtype(f.dtype, [&]<class T>() {
    using Acc = Accumulator<T>;
    Acc* partial = split.splits > 1 ? reinterpret_cast<Acc*>(scratch + layout.partial) : nullptr;
    auto* grad_bias = static_cast<T*>(p.grad_bias);
    launch_column_sums(static_cast<const T*>(p.grad_y), p.grad_y_stride_b, f.B, f.K, split.rows, partial, grad_bias,
                       stream);
    if (partial != nullptr)
      launch_column_sums(static_cast<const Acc*>(partial), f.K, split.splits, f.K, split.splits, nullptr, grad_bias,
                         stream);
  });
}

}  // namespace

BackwardForms choose_forms(const BackwardProblem& p, Fp32Precision precision) {
  BackwardForms forms;
  if (p.grad_x != nullptr) forms.input = input_gradient_form(p, precision);
  if (p.grad_weight != nullptr) forms.weight = weight_gradient_form(p, precision);
  forms.one_launch = one_launch_wins(p);
  return forms;
}

BackwardPlan plan_backward(const BackwardProblem& p, const BackwardForms& forms) {
  const Problem& f = p.forward;
  if (forms.one_launch) {
    // Below 2^31 outputs a gradient the kernel's indices fit 32 bits; the three gradients' blocks
    // together can still pass a grid's 2^31 - 1 (R*H = 1, a tile of gradients.x a block).
    constexpr std::int64_t kMax = 0x7fffffff;
    if (std::max({f.B * f.RH, f.K * f.RH, f.K}) > kMax)
      throw Error(ErrorCode::unsupported, "grad_y",
                  "the one-launch backward takes up to 2^31 - 1 outputs a gradient, got B*R*H = " +
                      std::to_string(f.B * f.RH) + ", K*R*H = " + std::to_string(f.K * f.RH) + ", K = " +
                      std::to_string(f.K));
    if (const std::int64_t blocks = one_launch_args(p).blocks(); blocks > kMax)
      throw Error(ErrorCode::unsupported, "grad_y",
                  "the one-launch backward takes up to 2^31 - 1 blocks, got " + std::to_string(blocks));
    return {.forms = forms};
  }
  const std::size_t element = dtype_size(f.dtype);
  const bool input_gemm = p.grad_x != nullptr && forms.input != InputGradientForm::zero;
  const bool weight_gemm = p.grad_weight != nullptr && forms.weight != WeightGradientForm::zero;
  const bool input_tensor_cores = input_gemm && forms.input == InputGradientForm::tensor_cores;
  if (input_tensor_cores)
    if (std::string why = input_tensor_cores_why_not(p); !why.empty())
      throw Error(ErrorCode::unsupported, "gradients.x", "the tensor-core form " + why);
  const bool weight_tensor_cores = weight_gemm && forms.weight == WeightGradientForm::tensor_cores;
  if (weight_tensor_cores)
    if (std::string why = mma_weight_gradient_why_not(p); !why.empty())
      throw Error(ErrorCode::unsupported, "gradients.weight", "the tensor-core form " + why);
  BackwardPlan plan{.forms = forms};
  ScratchLayout& s = plan.scratch;
  const bool cublas = (input_gemm && !input_tensor_cores) || (weight_gemm && !weight_tensor_cores);
  std::size_t at = cublas ? kGemmWorkspaceBytes : 0;
  s.concatenation = at;
  if (weight_gemm && forms.weight == WeightGradientForm::concatenated)
    at += round_up_to_256(static_cast<std::size_t>(f.B * f.RH) * element);
  s.unsplit = at;
  if (input_gemm && (forms.input == InputGradientForm::split ||
                     (input_tensor_cores && !input_gradient_side_by_side(p))))
    at += round_up_to_256(static_cast<std::size_t>(f.R * f.B * f.H) * element);
  s.weight_copy = at;
  if (input_gemm && (input_tensor_cores || weight_needs_copy(f)))
    at += round_up_to_256(static_cast<std::size_t>(f.K * f.RH) * element);
  s.partial = at;
  if (p.grad_bias != nullptr && f.B > 0)
    if (const std::int64_t splits = column_sum_split(f).splits; splits > 1)
      at += round_up_to_256(static_cast<std::size_t>(splits * f.K) *
                            visit_any_device_dtype(f.dtype, [&]<class T>() { return sizeof(Accumulator<T>); }));
  s.weight_partial_sums = at;
  if (weight_tensor_cores)
    at += round_up_to_256(mma_weight_gradient_scratch_bytes(p, mma_weight_gradient_launch(p)));
  s.total = at;
  return plan;
}

void run_backward(const BackwardProblem& p, const BackwardPlan& plan, const Options& options, Workspace workspace,
                  CudaStream stream) {
  const bool tf32 = options.fp32_precision == Fp32Precision::tf32;
  if (plan.forms.one_launch) {
    one_launch_backward(p, stream);
    return;
  }
  auto* scratch = static_cast<std::byte*>(workspace.data);
  if (p.grad_x) input_gradient(p, plan.forms.input, tf32, scratch, plan.scratch, stream);
  if (p.grad_weight) weight_gradient(p, plan.forms.weight, tf32, scratch, plan.scratch, stream);
  if (p.grad_bias) bias_gradient(p, scratch, plan.scratch, stream);
}

void check_backward_supported(const BackwardProblem& p) {
  // cuBLASLt's extents are 32-bit. The bias gradient alone uses no GEMM and 64-bit indices.
  constexpr std::int64_t kMaxExtent = 0x7fffffff;
  const Problem& f = p.forward;
  if ((p.grad_x != nullptr || p.grad_weight != nullptr) && std::max({f.B, f.K, f.RH}) > kMaxExtent)
    throw Error(ErrorCode::unsupported, "x",
                "the CUDA backward's gradients.x and gradients.weight need B, K and R*H below 2^31, got B = " +
                    std::to_string(f.B) + ", K = " + std::to_string(f.K) + ", R*H = " + std::to_string(f.RH));
}

std::size_t backward_workspace_bytes(const BackwardProblem& p, Fp32Precision precision) {
  return plan_backward(p, choose_forms(p, precision)).scratch.total;
}

void run_backward(const BackwardProblem& p, const Options& options, Workspace workspace, CudaStream stream) {
  run_backward(p, plan_backward(p, choose_forms(p, options.fp32_precision)), options, workspace, stream);
}

}  // namespace gather_linear::cuda
