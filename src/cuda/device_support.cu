// Device-side argument checks and the per-device workspace cache.
#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "core/kernel_registry.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_info.hpp"

namespace gather_linear::cuda {
namespace {

void check_pointer(const void* data, const char* name, int device) {
  if (data == nullptr) return;  // empty tensors (validated) are never dereferenced
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls are unaffected
    throw Error(ErrorCode::invalid_argument, name, "pointer is not known to the CUDA runtime");
  }
  if (attributes.type == cudaMemoryTypeUnregistered || attributes.type == cudaMemoryTypeHost)
    throw Error(ErrorCode::invalid_argument, name,
                "expected CUDA device memory on cuda:" + std::to_string(device) + ", got host memory");
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != device)
    throw Error(ErrorCode::invalid_argument, name,
                "expected memory on cuda:" + std::to_string(device) + ", got memory on cuda:" +
                    std::to_string(attributes.device));
}

struct DeviceWorkspace {
  std::mutex mutex;
  void* data = nullptr;
  std::size_t bytes = 0;
};

constexpr int kMaxDevices = 64;

}  // namespace

namespace {

// A device attribute, queried once per device (attributes never change while a process runs).
// Slots hold value + 1, so that 0 means "not queried yet" even for attributes that are 0.
template <cudaDeviceAttr kAttribute>
int cached_attribute(int device) {
  static std::array<std::atomic<int>, kMaxDevices> cached{};
  std::atomic<int>& slot = cached[static_cast<std::size_t>(device) % kMaxDevices];
  const int stored = slot.load(std::memory_order_relaxed);
  if (stored != 0) return stored - 1;
  int value = 0;
  check(cudaDeviceGetAttribute(&value, kAttribute, device), "cudaDeviceGetAttribute");
  slot.store(value + 1, std::memory_order_relaxed);
  return value;
}

}  // namespace

int multiprocessor_count(int device) { return cached_attribute<cudaDevAttrMultiProcessorCount>(device); }

int compute_capability_major(int device) { return cached_attribute<cudaDevAttrComputeCapabilityMajor>(device); }

int compute_capability_minor(int device) { return cached_attribute<cudaDevAttrComputeCapabilityMinor>(device); }

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

void check_device(const Problem& p) {
  const int count = device_count();
  if (count == 0)
    throw Error(ErrorCode::unsupported, "x", "tensors are on " + to_string(p.device) + " but no CUDA device is available");
  if (p.device.index >= count)
    throw Error(ErrorCode::invalid_argument, "x",
                "device " + to_string(p.device) + " does not exist (" + std::to_string(count) + " CUDA devices)");
}

void check_device_arguments(const Problem& p) {
  check_device(p);
  check_pointer(p.x, "x", p.device.index);
  check_pointer(p.weight, "weight", p.device.index);
  check_pointer(p.bias, "bias", p.device.index);
  check_pointer(p.y, "y", p.device.index);
}

Workspace cached_workspace(int device, std::size_t bytes) {
  static std::array<DeviceWorkspace, kMaxDevices> cache;
  if (device < 0 || device >= kMaxDevices)
    throw Error(ErrorCode::unsupported, "x", "device index beyond the workspace cache's " + std::to_string(kMaxDevices));
  DeviceWorkspace& w = cache[static_cast<std::size_t>(device)];
  std::lock_guard lock(w.mutex);
  if (w.bytes < bytes) {
    int current = 0;
    check(cudaGetDevice(&current), "cudaGetDevice");
    check(cudaSetDevice(device), "cudaSetDevice");
    // cudaFree waits for the device, so work still reading the old buffer finishes first.
    if (w.data != nullptr) check(cudaFree(w.data), "cudaFree(workspace)");
    w.data = nullptr;
    w.bytes = 0;
    check(cudaMalloc(&w.data, bytes), "cudaMalloc(workspace)");
    w.bytes = bytes;
    check(cudaSetDevice(current), "cudaSetDevice");
  }
  return {w.data, w.bytes};
}

}  // namespace gather_linear::cuda
