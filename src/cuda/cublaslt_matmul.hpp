// What the cuBLASLt-based paths share: one handle per device, status checks, and strided batched
// GEMMs whose plans (descriptors, layouts, the heuristic's algorithm) are made once per shape and
// kept for the shapes used most recently.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>

#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cuda {

// cuBLASLt's scratch for one GEMM (what cuBLAS suggests for Hopper), owned by the caller so that
// GEMMs on different streams never share it; 256-byte aligned.
constexpr std::size_t kGemmWorkspaceBytes = std::size_t{32} << 20;

// Throws Error(cuda_error) naming `what` unless `status` is success.
void check_lt(cublasStatus_t status, const char* what);
// The device's cuBLASLt handle, created on first use and kept for the process.
cublasLtHandle_t cublaslt_handle(int device);
cudaDataType_t cuda_data_type(DType dtype);
// The largest power of two up to 256 that divides the address (cuBLASLt's alignment preferences).
int alignment_bytes(const void* p);

// One operand of a column-major GEMM (cuBLAS's convention): `ld` elements between columns,
// `batch_stride` elements between the matrices of a batch (0: every batch reads the same one).
struct GemmOperand {
  const void* data = nullptr;
  bool transposed = false;
  std::int64_t ld = 0;
  std::int64_t batch_stride = 0;
};

// D[i] = op(A[i]) * op(B[i]) (+ bias) for i < batch: D is m x n, the reduction k deep. Inputs,
// bias and D in `dtype`, float32 accumulation (TF32 for float32 inputs when `tf32`). Every extent
// below 2^31.
struct StridedBatchedGemm {
  DType dtype = DType::float32;
  bool tf32 = false;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  GemmOperand a, b;
  const void* bias = nullptr;  // m elements, one per row of D, on a 16-byte boundary; null: none
  void* d = nullptr;
  std::int64_t ldd = 0, batch_stride_d = 0;
};

// Enqueues the GEMM on `stream`, with `scratch` (kGemmWorkspaceBytes) as cuBLASLt's workspace.
// m, n, k and batch must be positive.
void run_gemm(const StridedBatchedGemm& gemm, int device, void* scratch, CudaStream stream);

}  // namespace gather_linear::cuda
