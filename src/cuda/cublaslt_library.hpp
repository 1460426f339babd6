// cuBLASLt, opened on first use rather than linked. Merely loading its shared library (540 MB)
// costs a process about 0.15 s and 25,000 page faults, which every use of the library that never
// reaches the unfused baseline or the backward's GEMMs (the CPU backend above all, and each of
// CTest's test processes) would otherwise pay for nothing.
#pragma once

#include <cublasLt.h>

namespace gather_linear::cuda {

// The cuBLASLt functions the library calls.
#define GATHER_LINEAR_CUBLASLT_FUNCTIONS(X)                                                  \
  X(cublasLtCreate)                                                                          \
  X(cublasLtGetStatusName)                                                                   \
  X(cublasLtGetStatusString)                                                                 \
  X(cublasLtMatmulDescCreate)                                                                \
  X(cublasLtMatmulDescDestroy)                                                               \
  X(cublasLtMatmulDescSetAttribute)                                                          \
  X(cublasLtMatrixLayoutCreate)                                                              \
  X(cublasLtMatrixLayoutDestroy)                                                             \
  X(cublasLtMatrixLayoutSetAttribute)                                                        \
  X(cublasLtMatmulPreferenceCreate)                                                          \
  X(cublasLtMatmulPreferenceDestroy)                                                         \
  X(cublasLtMatmulPreferenceSetAttribute)                                                    \
  X(cublasLtMatmulAlgoGetHeuristic)                                                          \
  X(cublasLtMatmul)

// Each function under its own name and with its own signature: cublaslt().cublasLtMatmul(...).
struct CublasLt {
#define GATHER_LINEAR_CUBLASLT_DECLARE(name) decltype(&::name) name = nullptr;
  GATHER_LINEAR_CUBLASLT_FUNCTIONS(GATHER_LINEAR_CUBLASLT_DECLARE)
#undef GATHER_LINEAR_CUBLASLT_DECLARE
};

// Opens libcublasLt.so.<the major version built against> on the first call: the copy already in
// the process if there is one (PyTorch's, say), else where the dynamic linker looks, else in the
// CUDA toolkit's library directory of the build. Throws Error(cuda_error, "cuBLASLt", why) when
// it cannot, or when a function is missing. Thread-safe.
const CublasLt& cublaslt();

}  // namespace gather_linear::cuda
