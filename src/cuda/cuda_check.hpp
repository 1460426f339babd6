// Turning CUDA status codes into gather_linear::Error.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "gather_linear/error.hpp"

namespace gather_linear::cuda {

// Throws Error(cuda_error) naming `what` (the call or kernel) when `status` is not success. The
// runtime's last-error slot is cleared first, so that a later check_launch() does not report this
// failure again for a launch that succeeded (a sticky error stays, as it must).
inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(ErrorCode::cuda_error, what, std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status));
  }
}

// After a launch: a bad configuration shows up here, not at the next unrelated call.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace gather_linear::cuda
