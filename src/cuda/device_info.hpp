#pragma once

namespace gather_linear::cuda {

// Streaming multiprocessors of a device, queried once.
int multiprocessor_count(int device);
// Compute capability major version of a device, queried once.
int compute_capability_major(int device);
// Compute capability minor version of a device, queried once.
int compute_capability_minor(int device);

}  // namespace gather_linear::cuda
