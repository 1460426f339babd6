#pragma once

namespace gather_linear::cuda {

// Streaming multiprocessors of a device, queried once.
int multiprocessor_count(int device);

}  // namespace gather_linear::cuda
