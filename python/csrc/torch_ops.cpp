// The operators' schemas, shared by every backend. The CPU and CUDA kernels, the autograd kernel
// and the autocast kernels register in their own files (cpu_kernels.cpp, cuda_kernels.cpp,
// autograd.cpp, autocast.cpp); the fake (meta) kernels are Python, in gather_linear/ops.py.
//
// This shared library uses libtorch's C++ API only, never Python's C API: it is loaded with
// torch.ops.load_library, and one build serves every Python version of the same torch.
#include <torch/library.h>

TORCH_LIBRARY(gather_linear, m) {
  // Tells torch which module holds the Python fake kernel, so that a process that loaded this
  // library without importing the package gets an error naming it instead of a missing kernel.
  m.set_python_module("gather_linear.ops");
  // y = bias + cat([x[r] for r in range(R)], -1) @ weight.T, with x (R, B, H), weight (K, R*H),
  // bias (K) or None; y is (B, K) with x's dtype and device.
  m.def("forward(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor", {at::Tag::pt2_compliant_tag});
  // The gradients of forward's x, weight and bias given grad_y (B, K), those whose output_mask
  // entry is set, in that order: the library's backward, which autograd calls. x is needed only
  // for weight's gradient and weight only for x's; x_size is x's (R, B, H). x's gradient is laid
  // out (B, R, H). Not differentiable itself (a double backward composes ATen ops instead).
  m.def("backward(Tensor grad_y, Tensor? x, Tensor? weight, SymInt[3] x_size, bool[3] output_mask) -> Tensor[]",
        {at::Tag::pt2_compliant_tag});
}
