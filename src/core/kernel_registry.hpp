// What each backend tells the dispatcher about its kernels.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "core/problem.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear {

struct KernelEntry {
  KernelInfo info;
  bool deterministic;
  // Empty when the kernel can compute `p` under `options`; otherwise why not (for the error a
  // forced kernel gets).
  std::string (*why_not)(const Problem& p, const Options& options);
  // Device scratch the kernel needs; null means none.
  std::size_t (*workspace_bytes)(const Problem& p);
  // Enqueues the work (CUDA) or does it (CPU). Only called when why_not() is empty. `workspace`
  // holds at least workspace_bytes(p) bytes.
  void (*run)(const Problem& p, const Options& options, Workspace workspace, CudaStream stream);
};

namespace cpu {
std::span<const KernelEntry> kernels();
// The CPU kernel the dispatcher uses when none is forced.
const KernelEntry& choose_kernel(const Problem& p, const Options& options);
// Computes the requested gradients (cpu/backward.cpp).
void run_backward(const BackwardProblem& p);
}  // namespace cpu

namespace cuda {
std::span<const KernelEntry> kernels();  // empty in a build without CUDA
const KernelEntry& choose_kernel(const Problem& p, const Options& options);
// Checks that the problem's device exists; throws gather_linear::Error otherwise.
void check_device(const Problem& p);
// check_device(), and that every pointer is device memory on that device.
void check_device_arguments(const Problem& p);
void check_device_arguments(const BackwardProblem& p);
// The backward (cuda/backward.cu): what it refuses (throws gather_linear::Error, before any
// scratch is sized), its scratch, and the work, enqueued on `stream`.
void check_backward_supported(const BackwardProblem& p);
std::size_t backward_workspace_bytes(const BackwardProblem& p, Fp32Precision precision);
void run_backward(const BackwardProblem& p, const Options& options, Workspace workspace, CudaStream stream);
// Device scratch owned by the library for callers that bring none: one buffer per (device,
// stream), so that work on different streams never shares one (the per-thread default stream
// counts once per host thread). It only grows (while the stream is being captured it cannot, and
// throws an Error naming options.workspace), and a buffer it outgrows stays allocated, since a
// CUDA graph captured on that stream may still use it. A stream handle that comes back naming a
// new stream (the old one destroyed) gets new buffers; the old ones are freed.
Workspace cached_workspace(int device, CudaStream stream, std::size_t bytes);
int device_count();

// Makes `device` current for the scope (kernels launch, and the CUDA runtime's per-device calls
// act, on the current device) and restores the previous one.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;  // -1: it was current already, nothing to restore
};
}  // namespace cuda

}  // namespace gather_linear
