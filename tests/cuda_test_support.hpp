// GPU test helpers: device mirrors of HostTensor storage (gaps and poison included).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/kernel_registry.hpp"
#include "test_support.hpp"

namespace gather_linear::testing {

#define CUDA_ASSERT(call)                                                                     \
  do {                                                                                        \
    const cudaError_t status_ = (call);                                                       \
    ASSERT_EQ(status_, cudaSuccess) << #call << ": " << cudaGetErrorString(status_);          \
  } while (0)

inline int current_device() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) throw std::runtime_error("cudaGetDevice failed");
  return device;
}

// Owned memory on the device current at construction (nothing for zero bytes).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes), device_(current_device()) {
    if (bytes > 0 && cudaMalloc(&data_, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(device_, o.device_);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_) {
      const cuda::ScopedDevice on(device_);
      cudaFree(data_);
    }
  }
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  int device() const { return device_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = 0;
};

// A non-blocking stream, destroyed with the scope.
class TestStream {
 public:
  TestStream() {
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess)
      throw std::runtime_error("cudaStreamCreateWithFlags failed");
  }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  ~TestStream() { cudaStreamDestroy(stream_); }
  operator cudaStream_t() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// What `enqueue()` puts on `stream`, captured in global mode (a launch on the legacy default
// stream during the capture is an error) and instantiated; replay() runs it and waits for it.
class CapturedGraph {
 public:
  template <class Enqueue>
  CapturedGraph(cudaStream_t stream, Enqueue&& enqueue) : stream_(stream) {
    require(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {  // leave the stream out of capture for the tests after this one
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(stream, &partial) == cudaSuccess && partial != nullptr) cudaGraphDestroy(partial);
      throw;
    }
    require(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture");
    require(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  void replay() const {
    require(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch");
    require(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after a replay");
  }

 private:
  static void require(cudaError_t status, const char* what) {
    if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
  cudaStream_t stream_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// A copy of a HostTensor's whole storage on the device current at construction; the view keeps
// the host view's strides.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  explicit DeviceTensor(const HostTensor& host) : buffer_(host.storage.size()) {
    upload(host);
    view_ = host.view;
    const auto offset_bytes = host.offset * static_cast<std::int64_t>(dtype_size(host.view.dtype));
    view_.data = static_cast<std::byte*>(buffer_.data()) + offset_bytes;
    view_.device = Device::cuda(buffer_.device());
  }

  // From pageable memory cudaMemcpy may return before its last bytes reach the device, and the
  // tests launch on non-blocking streams, which do not wait for it: wait here.
  void upload(const HostTensor& host) const {
    const cuda::ScopedDevice on(buffer_.device());
    if (cudaMemcpy(buffer_.data(), host.storage.data(), buffer_.bytes(), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to device failed");
  }
  // On the buffer's device, whichever is current.
  void download(HostTensor& host) const {
    const cuda::ScopedDevice on(buffer_.device());
    if (cudaMemcpy(host.storage.data(), buffer_.data(), buffer_.bytes(), cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to host failed");
  }
  const TensorView& view() const { return view_; }

 private:
  DeviceBuffer buffer_;
  TensorView view_{};
};

struct DeviceOperands {
  DeviceTensor x, weight, bias, y;
  bool has_bias = false;

  explicit DeviceOperands(const Operands& o)
      : x(o.x), weight(o.weight), y(o.y), has_bias(!o.bias.storage.empty()) {
    if (has_bias) bias = DeviceTensor(o.bias);
  }
  std::optional<TensorView> bias_view() const { return has_bias ? std::optional(bias.view()) : std::nullopt; }
  void forward(const Options& options, CudaStream stream = nullptr) const {
    gather_linear::forward(x.view(), weight.view(), bias_view(), y.view(), options, stream);
  }
};

inline bool gpu_available() { return cuda_device_count() > 0; }

}  // namespace gather_linear::testing
