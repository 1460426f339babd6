#pragma once

#include <array>
#include <atomic>
#include <cstddef>

namespace gather_linear::cuda {

// The library's per-device caches (attributes, cuBLASLt handles, raised shared-memory limits)
// have this many slots, indexed by device: check_device() refuses higher indices.
inline constexpr int kMaxDevices = 64;

// A per-device count that never changes while the process runs (an attribute, an occupancy),
// asked of the driver once per device. Slots hold the count plus one, so that the zero they start
// with means "not asked yet" even where the count is 0. Two threads that ask at once may both ask;
// they store the same count.
class CountPerDevice {
 public:
  template <typename Ask>
  int get(int device, Ask&& ask) {
    std::atomic<int>& slot = slots_[static_cast<std::size_t>(device)];
    if (const int stored = slot.load(std::memory_order_acquire); stored != 0) return stored - 1;
    const int count = ask();
    slot.store(count + 1, std::memory_order_release);
    return count;
  }

 private:
  std::array<std::atomic<int>, kMaxDevices> slots_{};
};

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
