// The unfused baseline, what PyTorch eager runs: materialise A = cat(x[0..R), dim=-1) as a
// (B, R*H) buffer, then one cuBLASLt GEMM with the bias in its epilogue. It is the CLI's
// comparator and the dispatcher's fallback wherever no fused kernel wins.
//
// cuBLASLt is column-major, so y (B, K) row-major is computed as y^T = W * A^T:
//   op(A) = W^T viewed column-major (R*H x K, ld = weight row stride), transposed  -> K x R*H
//   B     = A^T column-major (R*H x B, ld = R*H)
//   D     = y^T column-major (K x B, ld = y row stride), bias along K (the epilogue's rows).
// Plans (descriptors, layouts and the heuristic's algorithm) are cached per shape, so a call
// costs one cuBLASLt launch. cuBLASLt's own scratch is part of the caller's workspace, after the
// concatenation: one buffer shared by every stream would let two streams' GEMMs race on it.
#include <cublasLt.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

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
    y[b * y_stride_b + k] = bias ? bias[k] : from_float<T>(0.f);
  }
}

// ---- cuBLASLt ---------------------------------------------------------------------------

using PlanKey = std::tuple<int, DType, bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           int, int, int>;

struct Plan {
  std::mutex mutex;  // the bias pointer lives in the shared descriptor
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, y = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
    for (auto layout : {w, a, y})
      if (layout) cublasLtMatrixLayoutDestroy(layout);
  }
};

Plan& plan_for(const Problem& p, const void* concatenated, bool tf32, cublasLtHandle_t handle) {
  const std::int64_t ldw = p.K == 1 ? p.RH : p.weight_stride_k, ldy = p.B == 1 ? p.K : p.y_stride_b;
  const PlanKey key{p.device.index, p.dtype, tf32 && p.dtype == DType::float32, p.bias != nullptr, p.B, p.K, p.RH, ldw,
                    ldy, alignment_bytes(p.weight), alignment_bytes(concatenated), alignment_bytes(p.y)};
  static std::mutex cache_mutex;
  static std::map<PlanKey, std::unique_ptr<Plan>> cache;
  std::lock_guard lock(cache_mutex);
  std::unique_ptr<Plan>& slot = cache[key];
  if (slot) return *slot;

  auto plan = std::make_unique<Plan>();
  const cudaDataType_t type = cuda_data_type(p.dtype);
  const cublasComputeType_t compute = std::get<2>(key) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check_lt(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const auto set_op = [&](cublasLtMatmulDescAttributes_t attribute, const auto& value, const char* what) {
    check_lt(cublasLtMatmulDescSetAttribute(plan->op, attribute, &value, sizeof(value)), what);
  };
  set_op(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T, "TRANSA");
  set_op(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N, "TRANSB");
  set_op(CUBLASLT_MATMUL_DESC_EPILOGUE, p.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, "EPILOGUE");
  const auto layout = [&](cublasLtMatrixLayout_t* out, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                          const char* what) {
    const auto r = static_cast<std::uint64_t>(rows), c = static_cast<std::uint64_t>(cols);
    check_lt(cublasLtMatrixLayoutCreate(out, type, r, c, ld), what);
  };
  layout(&plan->w, p.RH, p.K, ldw, "layout W");
  layout(&plan->a, p.RH, p.B, p.RH, "layout A");
  layout(&plan->y, p.K, p.B, ldy, "layout y");

  cublasLtMatmulPreference_t preference;
  check_lt(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  const auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value) {
    cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value));
  };
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t{kGemmWorkspaceBytes});
  const std::uint32_t align_w = std::get<9>(key), align_a = std::get<10>(key), align_y = std::get<11>(key);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_w);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_y);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_y);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, plan->op, plan->w, plan->a, plan->y, plan->y,
                                                              preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  check_lt(status, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) throw Error(ErrorCode::unsupported, "cublasLt", "no cuBLASLt algorithm for this problem");
  plan->algo = result.algo;
  slot = std::move(plan);
  return *slot;
}

}  // namespace

void concatenate(const Problem& p, void* out, CudaStream stream) {
  visit_device_dtype(p.dtype, [&]<class T>() {
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
    visit_device_dtype(p.dtype, [&]<class T>() {
      broadcast_bias_kernel<T><<<grid_stride_blocks(p.B * p.K, p.device.index), 256, 0, stream>>>(
          static_cast<const T*>(p.bias), p.B, p.K, p.y_stride_b, static_cast<T*>(p.y));
      check_launch("broadcast_bias_kernel");
    });
    return;
  }
  const cublasLtHandle_t handle = cublaslt_handle(p.device.index);
  Plan& plan = plan_for(p, concatenated, precision == Fp32Precision::tf32, handle);
  const float one = 1.f, zero = 0.f;
  std::lock_guard lock(plan.mutex);
  if (p.bias)
    check_lt(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)),
             "BIAS_POINTER");
  check_lt(cublasLtMatmul(handle, plan.op, &one, p.weight, plan.w, concatenated, plan.a, &zero, p.y, plan.y, p.y,
                          plan.y, &plan.algo, gemm_workspace, kGemmWorkspaceBytes, stream),
           "cublasLtMatmul");
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
  if (p.dtype == DType::float64) return "float64 is not supported on CUDA";
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
