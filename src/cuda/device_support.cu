// Device-side argument checks, the library's workspace cache and the device guard.
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/kernel_registry.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_info.hpp"

namespace gather_linear::cuda {
namespace {

void check_pointer(const void* data, const char* name, int device) {
  if (data == nullptr) return;  // no bias
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

}  // namespace

namespace {

// A device attribute, queried once per device (attributes never change while a process runs).
template <cudaDeviceAttr kAttribute>
int cached_attribute(int device) {
  static CountPerDevice values;
  return values.get(device, [device] {
    int value = 0;
    check(cudaDeviceGetAttribute(&value, kAttribute, device), "cudaDeviceGetAttribute");
    return value;
  });
}

}  // namespace

int multiprocessor_count(int device) { return cached_attribute<cudaDevAttrMultiProcessorCount>(device); }

int compute_capability_major(int device) { return cached_attribute<cudaDevAttrComputeCapabilityMajor>(device); }

int compute_capability_minor(int device) { return cached_attribute<cudaDevAttrComputeCapabilityMinor>(device); }

double peak_memory_bandwidth(int device) {
  const double clock_hz = 1e3 * cached_attribute<cudaDevAttrMemoryClockRate>(device);  // reported in kHz
  const double bus_bytes = cached_attribute<cudaDevAttrGlobalMemoryBusWidth>(device) / 8.0;
  return 2 * clock_hz * bus_bytes;  // two transfers a clock
}

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
    throw Error(ErrorCode::unsupported, "x",
                "tensors are on " + to_string(p.device) + " but no CUDA device is available");
  if (p.device.index >= count)
    throw Error(ErrorCode::invalid_argument, "x",
                "device " + to_string(p.device) + " does not exist (" + std::to_string(count) + " CUDA devices)");
  if (p.device.index >= kMaxDevices)
    throw Error(ErrorCode::unsupported, "x",
                "tensors are on " + to_string(p.device) + "; the library supports devices 0 to " +
                    std::to_string(kMaxDevices - 1));
  // Refused here rather than failing at launch: the build has no code older GPUs can run.
  if (const int major = compute_capability_major(p.device.index); major < kMinComputeCapabilityMajor)
    throw Error(ErrorCode::unsupported, "x",
                "tensors are on " + to_string(p.device) + ", of compute capability " + std::to_string(major) + "." +
                    std::to_string(compute_capability_minor(p.device.index)) + "; the library needs " +
                    std::to_string(kMinComputeCapabilityMajor) + ".0 or newer");
}

void check_device_arguments(const Problem& p) {
  check_device(p);
  // An empty tensor is never dereferenced, so its pointer may be anything (even a freed one).
  if (p.B > 0 && p.RH > 0) check_pointer(p.x, "x", p.device.index);
  if (p.K > 0 && p.RH > 0) check_pointer(p.weight, "weight", p.device.index);
  if (p.K > 0) check_pointer(p.bias, "bias", p.device.index);
  if (p.B > 0 && p.K > 0) check_pointer(p.y, "y", p.device.index);
}

void check_device_arguments(const BackwardProblem& p) {
  const Problem& f = p.forward;
  check_device(f);
  if (f.B > 0 && f.RH > 0) check_pointer(f.x, "x", f.device.index);
  if (f.K > 0 && f.RH > 0) check_pointer(f.weight, "weight", f.device.index);
  if (f.B > 0 && f.K > 0) check_pointer(p.grad_y, "grad_y", f.device.index);
  // Null when absent or empty.
  check_pointer(p.grad_x, "gradients.x", f.device.index);
  check_pointer(p.grad_weight, "gradients.weight", f.device.index);
  check_pointer(p.grad_bias, "gradients.bias", f.device.index);
}

Workspace cached_workspace(int device, CudaStream stream, std::size_t bytes) {
  struct Scratch {
    unsigned long long stream_id = 0;  // cudaStreamGetId of the stream that owns the buffers
    Workspace buffer{};
    std::vector<void*> outgrown;  // kept while that stream lives: see the declaration
    bool captured = false;        // handed to a capture: a graph may use the buffers at any time
  };
  static std::mutex mutex;
  static std::map<std::tuple<int, CudaStream, std::thread::id>, Scratch> scratch_of;
  static std::vector<void*> kept_for_graphs;  // never freed
  // cudaStreamPerThread names a different stream in every host thread.
  const std::thread::id owner = stream == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id{};
  // During a capture neither the stream's id may be asked (that would invalidate the capture) nor
  // memory allocated: the buffer the handle had before the capture began is used, or none. (Its
  // owner cannot be checked then: if that was a destroyed stream under the same handle, the
  // graph gets the buffer, which is then never freed.)
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) (void)cudaGetLastError();
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  unsigned long long stream_id = 0;
  if (!capturing) check(cudaStreamGetId(stream, &stream_id), "cudaStreamGetId");
  std::lock_guard lock(mutex);
  Scratch& scratch = scratch_of[{device, stream, owner}];
  // A handle (or a thread) seen before can name a new stream once the old one is destroyed: its
  // buffers may still be in use by work the old stream had queued, so they are not reused.
  const bool new_stream = !capturing && scratch.stream_id != stream_id;
  if (new_stream || scratch.buffer.bytes < bytes) {
    if (capturing)
      throw Error(ErrorCode::invalid_argument, "options.workspace",
                  "the stream is being captured into a CUDA graph and the library has no " + std::to_string(bytes) +
                      "-byte scratch for it yet; pass options.workspace or options.workspace_allocator "
                      "(workspace_bytes() says how much), or run one forward on this stream before capturing");
    const ScopedDevice on_device(device);
    if (new_stream) {
      // cudaFree waits for the device to finish, so also for the old stream's queued work.
      if (scratch.buffer.data != nullptr) scratch.outgrown.push_back(scratch.buffer.data);
      for (void* data : scratch.outgrown)
        if (scratch.captured)
          kept_for_graphs.push_back(data);
        else
          check(cudaFree(data), "cudaFree(workspace)");
      scratch = {stream_id, {}, {}, false};
    }
    // Grow at least twofold, so that what is kept stays below the current buffer's size.
    const std::size_t grown = std::max(bytes, 2 * scratch.buffer.bytes);
    void* data = nullptr;
    check(cudaMalloc(&data, grown), "cudaMalloc(workspace)");
    if (scratch.buffer.data != nullptr) scratch.outgrown.push_back(scratch.buffer.data);
    scratch.buffer = {data, grown};
  }
  scratch.captured = scratch.captured || capturing;
  return scratch.buffer;
}

ScopedDevice::ScopedDevice(int device) {
  int current = 0;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current == device) return;
  check(cudaSetDevice(device), "cudaSetDevice");
  previous_ = current;
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

}  // namespace gather_linear::cuda
