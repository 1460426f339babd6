// The unfused baseline, what PyTorch eager runs: materialise A = cat(x[0..R), dim=-1) as a
// (B, R*H) buffer, then one cuBLASLt GEMM with the bias in its epilogue. It is the CLI's
// comparator and the dispatcher's fallback wherever no fused kernel wins.
//
// cuBLASLt is column-major, so y (B, K) row-major is computed as y^T = W * A^T:
//   op(A) = W^T viewed column-major (R*H x K, ld = weight row stride), transposed  -> K x R*H
//   B     = A^T column-major (R*H x B, ld = R*H)
//   D     = y^T column-major (K x B, ld = y row stride), bias along K (the epilogue's rows).
// The GEMM is run_gemm's (cublaslt_matmul.hpp), whose plans are cached per shape, so a call
// costs one cuBLASLt launch. cuBLASLt's own scratch is part of the caller's workspace, after the
// concatenation: one buffer shared by every stream would let two streams' GEMMs race on it.
#include <string>

#include "core/kernel_registry.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_types.cuh"
#include "cuda/unfused_cublaslt.hpp"

namespace gather_linear::cuda {
namespace {

// ---- concatenation ----------------------------------------------------------------------

template <class T, int VEC>
__global__ void concatenate_kernel(const T* __restrict__ x, std::int64_t x_stride_r, std::int64_t x_stride_b,
                                   std::int64_t x_stride_h, std::int64_t B, std::int64_t H, std::int64_t RH,
                                   T* __restrict__ out) {
  const std::int64_t groups = B * RH / VEC;
  for (std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t e = g * VEC, b = e / RH, c = e - b * RH, r = c / H, h = c - r * H;
    if constexpr (VEC == 1) {
      out[e] = x[r * x_stride_r + b * x_stride_b + h * x_stride_h];
    } else {
      const T* source = x + r * x_stride_r + b * x_stride_b + h;
      *reinterpret_cast<uint4*>(out + e) = __ldg(reinterpret_cast<const uint4*>(source));
    }
  }
}

template <class T>
__global__ void broadcast_bias_kernel(const T* __restrict__ bias, std::int64_t B, std::int64_t K,
                                      std::int64_t y_stride_b, T* __restrict__ y) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < B * K;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / K, k = i - b * K;
    y[b * y_stride_b + k] = bias ? bias[k] : from_accumulator<T>(0);
  }
}

}  // namespace

void concatenate(const Problem& p, void* out, CudaStream stream) {
  visit_any_device_dtype(p.dtype, [&]<class T>() {
    const T* x = static_cast<const T*>(p.x);
    T* dst = static_cast<T*>(out);
    constexpr int kVec = kVec16<T>;
    if (slices_vectorizable(p.x, p.R, p.B, p.H, p.x_stride_r, p.x_stride_b, p.x_stride_h, kVec))
      concatenate_kernel<T, kVec><<<grid_stride_blocks(p.B * p.RH / kVec, p.device.index), 256, 0, stream>>>(
          x, p.x_stride_r, p.x_stride_b, p.x_stride_h, p.B, p.H, p.RH, dst);
    else
      concatenate_kernel<T, 1><<<grid_stride_blocks(p.B * p.RH, p.device.index), 256, 0, stream>>>(
          x, p.x_stride_r, p.x_stride_b, p.x_stride_h, p.B, p.H, p.RH, dst);
    check_launch("concatenate_kernel");
  });
}

void gemm_on_concatenated(const Problem& p, const void* concatenated, Fp32Precision precision, void* gemm_workspace,
                          CudaStream stream) {
  if (p.RH == 0) {  // no GEMM: y is the broadcast bias (or zeros)
    visit_any_device_dtype(p.dtype, [&]<class T>() {
      broadcast_bias_kernel<T><<<grid_stride_blocks(p.B * p.K, p.device.index), 256, 0, stream>>>(
          static_cast<const T*>(p.bias), p.B, p.K, p.y_stride_b, static_cast<T*>(p.y));
      check_launch("broadcast_bias_kernel");
    });
    return;
  }
  // y^T (K x B) = W (K x R*H) * A^T (R*H x B), the bias along y^T's rows.
  StridedBatchedGemm g;
  g.dtype = p.dtype;
  g.tf32 = precision == Fp32Precision::tf32;
  g.m = p.K, g.n = p.B, g.k = p.RH;
  g.a = {p.weight, true, p.K == 1 ? p.RH : p.weight_stride_k, 0};
  g.b = {concatenated, false, p.RH, 0};
  g.bias = p.bias;
  g.d = p.y, g.ldd = p.B == 1 ? p.K : p.y_stride_b;
  run_gemm(g, p.device.index, gemm_workspace, stream);
}

namespace {

// A bias that does not start on a 16-byte boundary (a view one element into a tensor) goes to
// cuBLASLt's bias epilogue as an aligned copy in the workspace. cuBLASLt 13.0 on the H200 took
// such a bias as it is (2 and 4 bytes off, measured), but its documentation promises nothing,
// and a fault there would be sticky: the copy is cheap insurance for other GPUs and versions.
bool bias_needs_copy(const Problem& p) { return p.bias != nullptr && p.RH > 0 && !aligned_to(p.bias, 16); }

// The workspace holds the concatenation, then the bias's aligned copy (where one is needed), then
// cuBLASLt's scratch, each starting on a 256-byte boundary.
std::size_t bias_copy_offset(const Problem& p) {
  return round_up_to_256(static_cast<std::size_t>(p.B * p.RH) * dtype_size(p.dtype));
}
std::size_t gemm_workspace_offset(const Problem& p) {
  const std::size_t bias_copy = bias_needs_copy(p) ? static_cast<std::size_t>(p.K) * dtype_size(p.dtype) : 0;
  return bias_copy_offset(p) + round_up_to_256(bias_copy);
}

}  // namespace

std::size_t unfused_workspace_bytes(const Problem& p) {
  return p.RH > 0 ? gemm_workspace_offset(p) + kGemmWorkspaceBytes : 0;
}

std::string unfused_why_not(const Problem& p) {
  if (p.K > 1 && p.weight_stride_k < p.RH)
    return "weight rows overlap (stride(0) < R*H), which cuBLASLt cannot express";
  return {};
}

void run_unfused(const Problem& p, Fp32Precision precision, Workspace workspace, CudaStream stream) {
  auto* scratch = static_cast<std::byte*>(workspace.data);
  Problem gemm = p;
  if (p.RH > 0) concatenate(p, scratch, stream);
  if (bias_needs_copy(p)) {
    void* aligned_bias = scratch + bias_copy_offset(p);
    check(cudaMemcpyAsync(aligned_bias, p.bias, static_cast<std::size_t>(p.K) * dtype_size(p.dtype),
                          cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync(bias)");
    gemm.bias = aligned_bias;
  }
  gemm_on_concatenated(gemm, scratch, precision, p.RH > 0 ? scratch + gemm_workspace_offset(p) : nullptr, stream);
}

}  // namespace gather_linear::cuda
