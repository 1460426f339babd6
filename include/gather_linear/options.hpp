// Per-call options: precision policy, determinism, kernel override, caller-provided workspace.
#pragma once

#include <cstddef>
#include <string_view>

namespace gather_linear {

// Follows PyTorch's float32 matmul precision: `ieee` ("highest") keeps float32 accuracy,
// `tf32` ("high") lets float32 inputs run on tensor cores with 10-bit mantissas.
enum class Fp32Precision { ieee, tf32 };

// Device scratch owned by the caller (e.g. from a framework's caching allocator), for the kernels
// that need one (the unfused baseline's concatenation buffer and cuBLASLt's scratch;
// workspace_bytes() says how much), aligned to 256 bytes. When absent the library keeps one
// buffer per (device, stream) that grows on demand (and is freed when a later stream comes back
// under the same handle, after the old stream's work). Growing it allocates, which a stream being
// captured into a CUDA graph refuses (forward() then throws an Error naming options.workspace):
// run one forward on that stream before capturing (the graph then keeps using the stream's
// buffer, so replay it on that stream), or pass a workspace.
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// Alternatively the caller hands over its allocator: called only when the chosen kernel needs
// scratch and Options::workspace is empty, it returns at least `bytes` bytes on the tensors'
// device, aligned to 256 bytes, that stay valid for the work this call enqueues on its stream (a
// caching allocator's stream semantics). This lets a framework binding supply scratch without
// asking workspace_bytes() first, which would validate the arguments a second time.
struct WorkspaceAllocator {
  void* (*allocate)(std::size_t bytes, void* context) = nullptr;
  void* context = nullptr;
};

struct Options {
  Fp32Precision fp32_precision = Fp32Precision::ieee;
  // When true only kernels whose summation order is fixed are chosen: the same inputs give
  // the same bits on every run.
  bool deterministic = true;
  // "auto" lets the dispatcher choose; any name from available_kernels() forces that kernel
  // (an error if it cannot run the problem).
  std::string_view kernel = "auto";
  Workspace workspace{};
  WorkspaceAllocator workspace_allocator{};
  // CUDA tensors' pointers are checked with the CUDA runtime (device memory, on the views'
  // device) before anything runs. A framework whose tensors already guarantee that (PyTorch's
  // do) may set this to skip the four queries, a measurable part of a small forward's host time.
  bool device_pointers_verified = false;
};

}  // namespace gather_linear
