#pragma once

namespace gather_linear::cuda {

// The library's per-device caches (attributes, cuBLASLt handles, raised shared-memory limits)
// have this many slots, indexed by device: check_device() refuses higher indices.
inline constexpr int kMaxDevices = 64;

// The oldest GPUs the build runs on (compute capability 8.0: cp.async, bfloat16 tensor cores).
inline constexpr int kMinComputeCapabilityMajor = 8;

// Streaming multiprocessors of a device, queried once.
int multiprocessor_count(int device);
// Compute capability major version of a device, queried once.
int compute_capability_major(int device);
// Compute capability minor version of a device, queried once.
int compute_capability_minor(int device);
// Peak bandwidth of a device's memory in bytes per second, from its memory clock and bus width
// (queried once).
double peak_memory_bandwidth(int device);

}  // namespace gather_linear::cuda
