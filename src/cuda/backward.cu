// The CUDA backward: each gradient GEMM is one cuBLASLt call, reading x and writing gradients.x
// in their own layouts where it can (column-major, cuBLAS's convention, in which a row-major
// (rows, cols) matrix is its transpose):
//   gradients.x[r]^T (H x B)                     = W[:, r*H : r*H + H]^T (H x K) * grad_y^T (K x B)
//   gradients.weight[:, r*H : r*H + H]^T (H x K) = x[r]^T (H x B) * grad_y (B x K)
// Where the slices sit side by side (a head-major x, or its gradient) one GEMM covers them all.
// Otherwise the slices run as one GEMM batched over r, except where they are narrow and x is
// large (slices_lose), or the layout is one no GEMM can address: those take one GEMM on a
// concatenation of x (the weight's gradient), or one GEMM into a (B, R*H) scratch that is then
// split into gradients.x.
// The bias gradient sums grad_y's rows in a fixed order: split into blocks of rows, then the
// blocks' partial sums in order, so the result does not depend on scheduling.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/kernel_registry.hpp"
#include "cuda/cublaslt_matmul.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_info.hpp"
#include "cuda/device_types.cuh"
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
    out[view.offset(i)] = from_float<T>(0.f);
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

constexpr int kSumColumns = 64;      // columns per block, one per thread of a row lane
constexpr int kSumLanes = 4;         // row lanes per block
constexpr std::int64_t kSumRows = 256;  // rows per block: the first pass's split

// Block (blockIdx.x, blockIdx.y) sums rows [blockIdx.y * kSumRows, +kSumRows) of kSumColumns
// columns; into `partial` (one row per split) when there are several splits, else into `out`.
template <class T>
__global__ void column_sums_kernel(const T* __restrict__ grad_y, std::int64_t ld, std::int64_t B, std::int64_t K,
                                   float* __restrict__ partial, T* __restrict__ out) {
  __shared__ float lane_sums[kSumLanes][kSumColumns];
  const std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * kSumColumns + threadIdx.x;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.y) * kSumRows;
  const std::int64_t last = first + kSumRows < B ? first + kSumRows : B;
  float sum = 0.f;
  if (k < K)
    for (std::int64_t b = first + threadIdx.y; b < last; b += kSumLanes) sum += to_float(grad_y[b * ld + k]);
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || k >= K) return;
  float total = lane_sums[0][threadIdx.x];
  for (int lane = 1; lane < kSumLanes; ++lane) total += lane_sums[lane][threadIdx.x];
  if (partial != nullptr)
    partial[blockIdx.y * K + k] = total;
  else
    out[k] = from_float<T>(total);
}

template <class T>
__global__ void sum_partials_kernel(const float* __restrict__ partial, std::int64_t splits, std::int64_t K,
                                    T* __restrict__ out) {
  const std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= K) return;
  float total = 0.f;
  for (std::int64_t s = 0; s < splits; ++s) total += partial[s * K + k];
  out[k] = from_float<T>(total);
}

unsigned grid_for(std::int64_t items, int device) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((items + 255) / 256, 1, 16 * multiprocessor_count(device)));
}

void zero(void* out, Strided3d view, const Problem& f, CudaStream stream) {
  visit_device_dtype(f.dtype, [&]<class T>() {
    zero_kernel<T><<<grid_for(view.elements(), f.device.index), 256, 0, stream>>>(static_cast<T*>(out), view);
    check_launch("zero_kernel");
  });
}

void copy(const void* in, Strided3d in_view, void* out, Strided3d out_view, const Problem& f, CudaStream stream) {
  visit_device_dtype(f.dtype, [&]<class T>() {
    copy_kernel<T><<<grid_for(out_view.elements(), f.device.index), 256, 0, stream>>>(
        static_cast<const T*>(in), in_view, static_cast<T*>(out), out_view);
    check_launch("copy_kernel");
  });
}

// ---- the plan: which form each gradient takes, and the scratch it needs ---------------------

enum class InputGradientForm { zero, side_by_side, slices_h_unit, slices_b_unit, split };
enum class WeightGradientForm { zero, side_by_side, concatenated, slices_h_unit, slices_b_unit };

// R batched GEMMs of slices narrower than 128 (one tile) lost to one GEMM plus a copy of x or of
// its gradient wherever x held 2M elements or more (1.11-2.16x GEMM-only against 1.03-1.41x); on
// the seed problem (1536) the copy's extra launch lost instead (1.59x against 0.99x). H200,
// bench/results/backward_timing_h200*.csv; the crossover in between was not measured.
constexpr std::int64_t kCopyPaysFromElements = std::int64_t{1} << 20;
bool slices_lose(const Problem& f) { return f.H < 128 && f.B * f.RH >= kCopyPaysFromElements; }

InputGradientForm input_gradient_form(const BackwardProblem& p) {
  const Problem& f = p.forward;
  if (f.K == 0) return InputGradientForm::zero;
  const bool h_unit = f.H == 1 || p.grad_x_stride_h == 1;
  // Distinct elements (validated) put a unit-stride h's neighbours, b or r, at least H apart.
  if (h_unit && (f.R == 1 || p.grad_x_stride_r == f.H)) return InputGradientForm::side_by_side;
  if (slices_lose(f)) return InputGradientForm::split;
  if (h_unit) return InputGradientForm::slices_h_unit;
  if (f.B == 1 || p.grad_x_stride_b == 1) return InputGradientForm::slices_b_unit;
  return InputGradientForm::split;
}

WeightGradientForm weight_gradient_form(const BackwardProblem& p) {
  const Problem& f = p.forward;
  if (f.B == 0) return WeightGradientForm::zero;
  // x is an input: its strides may overlap (a broadcast row), which no GEMM operand can express.
  const bool h_unit = (f.H == 1 || f.x_stride_h == 1) && (f.B == 1 || f.x_stride_b >= f.H);
  if (h_unit && (f.R == 1 || f.x_stride_r == f.H) && (f.B == 1 || f.x_stride_b >= f.RH))
    return WeightGradientForm::side_by_side;
  if (slices_lose(f)) return WeightGradientForm::concatenated;
  if (h_unit) return WeightGradientForm::slices_h_unit;
  if ((f.B == 1 || f.x_stride_b == 1) && (f.H == 1 || f.x_stride_h >= f.B)) return WeightGradientForm::slices_b_unit;
  return WeightGradientForm::concatenated;
}

// Weight rows that overlap (stride(0) < R*H, e.g. one row broadcast) are no GEMM operand: the
// input gradient then reads a contiguous copy.
bool weight_needs_copy(const Problem& f) { return f.K > 1 && f.weight_stride_k < f.RH; }

std::int64_t column_sum_splits(const Problem& f) { return (f.B + kSumRows - 1) / kSumRows; }

std::size_t round_up_to_256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// Scratch: cuBLASLt's, then x's concatenation, then gradients.x as one (B, R*H) matrix before
// its split, then the weight's copy, then the partial column sums, each on a 256-byte boundary;
// only the parts this problem uses.
struct ScratchLayout {
  std::size_t concatenation = 0, unsplit = 0, weight_copy = 0, partial = 0, total = 0;
};

ScratchLayout scratch_layout(const BackwardProblem& p) {
  const Problem& f = p.forward;
  const std::size_t element = dtype_size(f.dtype);
  const bool input_gemm = p.grad_x != nullptr && input_gradient_form(p) != InputGradientForm::zero;
  const bool gemm = input_gemm || (p.grad_weight != nullptr && weight_gradient_form(p) != WeightGradientForm::zero);
  ScratchLayout s;
  std::size_t at = gemm ? kGemmWorkspaceBytes : 0;
  s.concatenation = at;
  if (p.grad_weight != nullptr && weight_gradient_form(p) == WeightGradientForm::concatenated)
    at += round_up_to_256(static_cast<std::size_t>(f.B * f.RH) * element);
  s.unsplit = at;
  if (p.grad_x != nullptr && input_gradient_form(p) == InputGradientForm::split)
    at += round_up_to_256(static_cast<std::size_t>(f.R * f.B * f.H) * element);
  s.weight_copy = at;
  if (input_gemm && weight_needs_copy(f)) at += round_up_to_256(static_cast<std::size_t>(f.K * f.RH) * element);
  s.partial = at;
  if (p.grad_bias != nullptr && column_sum_splits(f) > 1)
    at += round_up_to_256(static_cast<std::size_t>(column_sum_splits(f) * f.K) * sizeof(float));
  s.total = at;
  return s;
}

// ---- the three gradients ---------------------------------------------------------------

void input_gradient(const BackwardProblem& p, bool tf32, std::byte* scratch, const ScratchLayout& layout,
                    CudaStream stream) {
  const Problem& f = p.forward;
  const InputGradientForm form = input_gradient_form(p);
  if (form == InputGradientForm::zero) {
    zero(p.grad_x, {f.R, f.B, f.H, p.grad_x_stride_r, p.grad_x_stride_b, p.grad_x_stride_h}, f, stream);
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
    case InputGradientForm::zero: break;
  }
  run_gemm(g, f.device.index, scratch, stream);
  if (form == InputGradientForm::split)
    visit_device_dtype(f.dtype, [&]<class T>() {
      constexpr int kVec = kVec16<T>;
      const auto divisible = [](std::int64_t stride, std::int64_t extent) { return extent <= 1 || stride % kVec == 0; };
      const bool vectorizable = f.H % kVec == 0 && (f.H == 1 || p.grad_x_stride_h == 1) &&
                                divisible(p.grad_x_stride_r, f.R) && divisible(p.grad_x_stride_b, f.B) &&
                                aligned_to(p.grad_x, 16);
      const auto* in = static_cast<const T*>(out);
      auto* grad_x = static_cast<T*>(p.grad_x);
      if (vectorizable)
        split_kernel<T, kVec><<<grid_for(f.B * f.RH / kVec, f.device.index), 256, 0, stream>>>(
            in, f.B, f.H, f.RH, grad_x, p.grad_x_stride_r, p.grad_x_stride_b, p.grad_x_stride_h);
      else
        split_kernel<T, 1><<<grid_for(f.B * f.RH, f.device.index), 256, 0, stream>>>(
            in, f.B, f.H, f.RH, grad_x, p.grad_x_stride_r, p.grad_x_stride_b, p.grad_x_stride_h);
      check_launch("split_kernel");
    });
}

void weight_gradient(const BackwardProblem& p, bool tf32, std::byte* scratch, const ScratchLayout& layout,
                     CudaStream stream) {
  const Problem& f = p.forward;
  const WeightGradientForm form = weight_gradient_form(p);
  if (form == WeightGradientForm::zero) {
    zero(p.grad_weight, {1, f.K, f.RH, 0, p.grad_weight_stride_k, 1}, f, stream);
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
    case WeightGradientForm::zero: break;
  }
  run_gemm(g, f.device.index, scratch, stream);
}

void bias_gradient(const BackwardProblem& p, std::byte* scratch, const ScratchLayout& layout, CudaStream stream) {
  const Problem& f = p.forward;
  if (f.B == 0) {
    zero(p.grad_bias, {1, 1, f.K, 0, 0, 1}, f, stream);
    return;
  }
  const std::int64_t splits = column_sum_splits(f);
  float* partial = splits > 1 ? reinterpret_cast<float*>(scratch + layout.partial) : nullptr;
  visit_device_dtype(f.dtype, [&]<class T>() {
    const dim3 grid(static_cast<unsigned>((f.K + kSumColumns - 1) / kSumColumns), static_cast<unsigned>(splits));
    column_sums_kernel<T><<<grid, dim3(kSumColumns, kSumLanes), 0, stream>>>(
        static_cast<const T*>(p.grad_y), p.grad_y_stride_b, f.B, f.K, partial, static_cast<T*>(p.grad_bias));
    check_launch("column_sums_kernel");
    if (partial != nullptr) {
      sum_partials_kernel<T><<<static_cast<unsigned>((f.K + 255) / 256), 256, 0, stream>>>(
          partial, splits, f.K, static_cast<T*>(p.grad_bias));
      check_launch("sum_partials_kernel");
    }
  });
}

}  // namespace

std::size_t backward_workspace_bytes(const BackwardProblem& p) { return scratch_layout(p).total; }

void run_backward(const BackwardProblem& p, const Options& options, Workspace workspace, CudaStream stream) {
  // cuBLASLt's extents are 32-bit: refused here, before anything is enqueued, rather than by a
  // GEMM after another gradient has been written.
  constexpr std::int64_t kMaxExtent = 0x7fffffff;
  const Problem& f = p.forward;
  if (std::max({f.B, f.K, f.RH}) > kMaxExtent)
    throw Error(ErrorCode::unsupported, "x",
                "the CUDA backward needs B, K and R*H below 2^31, got B = " + std::to_string(f.B) +
                    ", K = " + std::to_string(f.K) + ", R*H = " + std::to_string(f.RH));
  const bool tf32 = options.fp32_precision == Fp32Precision::tf32;
  const ScratchLayout layout = scratch_layout(p);
  auto* scratch = static_cast<std::byte*>(workspace.data);
  if (p.grad_x) input_gradient(p, tf32, scratch, layout, stream);
  if (p.grad_weight) weight_gradient(p, tf32, scratch, layout, stream);
  if (p.grad_bias) bias_gradient(p, scratch, layout, stream);
}

}  // namespace gather_linear::cuda
