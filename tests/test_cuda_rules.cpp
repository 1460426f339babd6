// The CUDA backend's host-side rules that need no GPU, so that CI (without one) runs them.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/kernel_registry.hpp"
#include "core/problem.hpp"
#include "cuda/backward.hpp"
#include "cuda/cublaslt_library.hpp"
#include "cuda/device_info.hpp"
#include "cuda/gett_kernel.hpp"
#include "test_support.hpp"

namespace gather_linear {
namespace {

// A split reduction's parts are equal runs of R's slices, each whole K tiles of tile_k elements;
// where H neither divides tile_k nor is a multiple of it (slices the GETT refuses) only the
// unsplit form, one part, is allowed. Every slice width up to 300 (H = 100 against a 64-deep tile
// once reached a division by zero), both tile depths, every count from -1 to R + 1.
TEST(GettRules, ReductionSplitsHoldWholeKTiles) {
  for (int tile_k : {32, 64})
    for (std::int64_t H = 0; H <= 300; ++H)
      for (std::int64_t R = 1; R <= 16; ++R)
        for (int splits = -1; splits <= R + 1; ++splits) {
          Problem p;
          p.R = R;
          p.H = H;
          p.RH = R * H;
          const bool slices_fit_tiles = H % tile_k == 0 || tile_k % H == 0;
          const bool expected = splits == 1 || (splits >= 1 && R % splits == 0 && slices_fit_tiles &&
                                                (R / splits * H) % tile_k == 0);
          EXPECT_EQ(cuda::gett::can_split_reduction(p, splits, tile_k), expected)
              << "R=" << R << " H=" << H << " tile_k=" << tile_k << " splits=" << splits;
        }
}

// The per-device caches of occupancies and attributes ask the driver once per device, a count of
// 0 included (a GETT configuration whose clusters do not fit a device reports 0; a cache that took
// 0 for "not asked yet" asked again on every plan), and keep the devices apart.
TEST(CudaRules, CountPerDeviceAsksOncePerDeviceEvenForZero) {
  cuda::CountPerDevice counts;
  int asked = 0;
  const auto ask_for = [&asked](int count) {
    return [&asked, count] {
      ++asked;
      return count;
    };
  };
  for (int call = 0; call < 3; ++call) EXPECT_EQ(counts.get(0, ask_for(0)), 0);
  EXPECT_EQ(asked, 1);
  for (int call = 0; call < 3; ++call) EXPECT_EQ(counts.get(cuda::kMaxDevices - 1, ask_for(30)), 30);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(counts.get(0, ask_for(7)), 0);  // the first answer stays
  EXPECT_EQ(counts.get(1, ask_for(7)), 7);
  EXPECT_EQ(asked, 3);
}

// float64 has no tensor-core kernel of ours: the latency kernel takes reductions up to 128 long
// and up to 32,768 outputs (where it measured faster than cuBLAS's DGEMM), unfused the rest; what
// cuBLASLt cannot read (weight rows that overlap) the latency kernel up to 262,144 outputs, the
// SIMT kernel beyond. The float64 branch asks nothing of a device, so these run without one.
TEST(CudaRules, Float64DispatchByReductionAndOutputs) {
  struct Expected {
    std::int64_t R, B, H, K, weight_stride_k;  // weight_stride_k < 0: contiguous rows
    const char* chosen;
  };
  const Expected expected[] = {
      {4, 12, 32, 56, -1, "cuda_latency"},         {2, 8, 64, 64, -1, "cuda_latency"},
      {4, 128, 32, 256, -1, "cuda_latency"},       {4, 129, 32, 256, -1, "cuda_unfused_cublaslt"},
      {1, 12, 129, 56, -1, "cuda_unfused_cublaslt"}, {8, 32, 64, 128, -1, "cuda_unfused_cublaslt"},
      {8, 1024, 128, 1024, -1, "cuda_unfused_cublaslt"},
      // Overlapping weight rows (cuBLASLt cannot read them): latency kernel, SIMT for many outputs.
      {4, 12, 32, 56, 0, "cuda_latency"},          {8, 32, 64, 128, 0, "cuda_latency"},
      {32, 16, 128, 4096, 0, "cuda_latency"},      {8, 512, 128, 512, 0, "cuda_latency"},
      {8, 513, 128, 512, 0, "cuda_simt_tiled"},    {8, 1024, 128, 1024, 0, "cuda_simt_tiled"}};
  for (const auto& e : expected) {
    const Problem p =
        testing::problem_without_operands({e.R, e.B, e.H, e.K}, DType::float64, Device::cuda(0), e.weight_stride_k);
    EXPECT_EQ(std::string(cuda::choose_kernel(p, Options{}).info.name), e.chosen)
        << "R=" << e.R << " B=" << e.B << " H=" << e.H << " K=" << e.K << " weight_stride_k=" << p.weight_stride_k;
  }
}

// A backward problem of contiguous operands for the rules that read only sizes, strides and which
// gradients are requested: every pointer is a marker never read.
BackwardProblem marker_backward_problem(const testing::Shape& shape, DType dtype, bool want_x, bool want_weight,
                                        bool want_bias) {
  alignas(256) static std::byte marker[256];
  BackwardProblem p;
  p.forward = testing::problem_without_operands(shape, dtype, Device::cuda(0));
  p.forward.x = p.forward.weight = marker;
  p.grad_y = marker, p.grad_y_stride_b = shape.K;
  if (want_x) {
    p.grad_x = marker;
    p.grad_x_stride_r = shape.B * shape.H, p.grad_x_stride_b = shape.H, p.grad_x_stride_h = 1;
  }
  if (want_weight) p.grad_weight = marker, p.grad_weight_stride_k = p.forward.RH;
  if (want_bias) p.grad_bias = marker;
  return p;
}

// Where the CUDA backward takes every requested gradient in one launch (one_launch_wins): small
// problems, by B*K*R*H (R*H rounded up to 32 where gradients.x's tiles keep to rows), K, B and
// dtype, where gradients.x or
// gradients.weight is requested (the bias's column sums alone are one launch already).
TEST(CudaRules, BackwardOneLaunchWhereSmall) {
  struct Expected {
    testing::Shape shape;
    DType dtype;
    bool want_x, want_weight, want_bias;
    bool one_launch;
  };
  const Expected expected[] = {
      {{4, 12, 32, 56}, DType::bfloat16, true, true, true, true},
      {{4, 12, 32, 56}, DType::float32, false, true, false, true},
      {{4, 12, 32, 56}, DType::float32, false, false, true, false},  // the bias alone
      {{1, 1, 1, 1}, DType::float16, true, false, false, true},
      // 16-bit and float64: up to 2^20 with K <= 256.
      {{8, 8, 64, 128}, DType::bfloat16, true, true, true, true},     // 2^19
      {{4, 32, 32, 256}, DType::bfloat16, true, true, true, true},    // 2^20
      {{4, 64, 32, 128}, DType::float16, true, true, true, true},
      {{2, 512, 32, 32}, DType::float64, true, true, true, true},
      {{8, 12, 64, 256}, DType::bfloat16, true, true, true, false},   // 1.5 * 2^20
      {{8, 12, 64, 256}, DType::float64, true, true, true, false},
      {{4, 16, 32, 257}, DType::bfloat16, true, true, true, false},   // K = 257
      {{4, 8, 32, 1024}, DType::float64, true, true, true, false},
      // float32: up to 2^21 with K <= 1024.
      {{4, 32, 32, 256}, DType::float32, true, true, true, true},
      {{4, 12, 32, 1024}, DType::float32, true, true, true, true},
      {{2, 512, 32, 64}, DType::float32, false, true, false, true},   // 2^21
      {{2, 16, 32, 2048}, DType::float32, true, true, true, false},   // K = 2048
      {{4, 16, 64, 1024}, DType::float32, true, true, true, false},   // 2^22
      {{8, 1024, 128, 1024}, DType::float32, true, true, true, false},
      // B <= 1024 in float32 (16 loads in flight a warp), B <= 512 in the other dtypes.
      {{1, 1024, 16, 16}, DType::float32, true, true, true, true},
      {{2, 1024, 32, 32}, DType::float32, true, true, true, true},     // 2^21
      {{1, 1025, 16, 16}, DType::float32, true, true, true, false},
      {{1, 512, 16, 16}, DType::bfloat16, true, false, false, true},
      {{1, 513, 16, 16}, DType::bfloat16, true, false, false, false},
      {{1, 513, 16, 16}, DType::float64, true, true, true, false},
      // Products count R*H rounded up to 32 where gradients.x is requested and its tiles keep to
      // rows (K * ceil(32 / R*H) > 2^13: a tile's lanes), else R*H itself.
      {{1, 512, 1, 1024}, DType::float32, true, true, true, false},   // 2^24 lanes' products, 2^19 real
      {{1, 512, 1, 1024}, DType::float32, false, true, true, true},   // no gradients.x: 2^19
      {{1, 64, 1, 1024}, DType::float32, true, true, true, true},     // 2^21 lanes' products
      {{1, 1024, 2, 1024}, DType::float32, true, true, true, false},  // K * 16 = 2^14: 2^25
      {{1, 256, 8, 1024}, DType::float32, true, true, true, true},    // K * 4 = 2^12: 2^21
      {{1, 256, 9, 1024}, DType::float32, true, true, true, false},   // 2^21 * 9 / 8
      {{3, 200, 5, 700}, DType::float32, true, true, true, false},    // 2.1e6 > 2^21
      {{2, 512, 8, 64}, DType::float32, true, true, true, true},      // 2^19
      {{1, 256, 8, 256}, DType::bfloat16, true, true, true, true},    // 2^19
      {{1, 512, 1, 256}, DType::bfloat16, true, true, true, true},    // K * 32 = 2^13: 2^17
      {{1, 512, 1, 257}, DType::bfloat16, true, true, true, false},   // K = 257
      {{1, 512, 3, 256}, DType::float64, true, true, true, true},     // K * 11 < 2^13: 3 * 2^17
      {{1, 128, 7, 256}, DType::bfloat16, true, true, true, true},
      {{1, 600, 16, 16}, DType::float32, true, true, true, true},
  };
  for (const Expected& e : expected) {
    const BackwardProblem p = marker_backward_problem(e.shape, e.dtype, e.want_x, e.want_weight, e.want_bias);
    EXPECT_EQ(cuda::choose_forms(p, Fp32Precision::ieee).one_launch, e.one_launch)
        << "R=" << e.shape.R << " B=" << e.shape.B << " H=" << e.shape.H << " K=" << e.shape.K << " "
        << dtype_name(e.dtype) << " gradients " << e.want_x << e.want_weight << e.want_bias;
  }
}

// The one launch indexes a gradient's outputs in 32 bits: forced onto it, a gradient of 2^31
// outputs or more (here gradients.x, B*R*H = 2^31) is refused by name before anything runs, and
// one of 2^31 - 1 outputs is planned; so are gradients each below 2^31 outputs whose blocks
// together pass a grid's 2^31 - 1.
TEST(CudaRules, OneLaunchTakesGradientsBelow2To31Outputs) {
  const auto plan_forced_one_launch = [](const BackwardProblem& p) {
    cuda::BackwardForms forms = cuda::choose_forms(p, Fp32Precision::ieee);
    forms.one_launch = true;
    return cuda::plan_backward(p, forms);
  };
  const auto input_gradient_only = [](const testing::Shape& shape) {
    return marker_backward_problem(shape, DType::float32, /*want_x=*/true, false, false);
  };
  testing::expect_library_error(
      [&] { (void)plan_forced_one_launch(input_gradient_only({1, std::int64_t{1} << 16, std::int64_t{1} << 15, 1})); },
      "grad_y", "up to 2^31 - 1 outputs a gradient, got B*R*H = 2147483648", ErrorCode::unsupported);
  EXPECT_TRUE(plan_forced_one_launch(input_gradient_only({1, 1, 0x7fffffff, 1})).forms.one_launch);
  // One tile of gradients.x a block at R*H = 1: 2^31 - 1 of them, and 2^26 of gradients.weight.
  testing::expect_library_error(
      [&] {
        (void)plan_forced_one_launch(
            marker_backward_problem({1, 0x7fffffff, 1, 0x7fffffff}, DType::float32, true, true, false));
      },
      "grad_y", "up to 2^31 - 1 blocks, got 2214592511", ErrorCode::unsupported);
}

// cuBLASLt is opened on the first call that needs it, not linked: a process that has not called it
// (this one, before the first cublaslt()) has no copy loaded. Where the toolkit is installed, as on
// every machine that builds the library, every function the library calls then resolves, and works
// without a GPU.
TEST(CublasLtLibrary, OpensOnFirstUseAndResolvesEveryFunction) {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  EXPECT_EQ(dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD), nullptr) << soname << " loaded before its first use";
  const cuda::CublasLt& lt = cuda::cublaslt();
#define EXPECT_RESOLVED(name) EXPECT_NE(lt.name, nullptr) << #name;
  GATHER_LINEAR_CUBLASLT_FUNCTIONS(EXPECT_RESOLVED)
#undef EXPECT_RESOLVED
  EXPECT_STREQ(lt.cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  void* loaded = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(loaded, nullptr) << soname << " not loaded after cublaslt()";
  if (loaded != nullptr) dlclose(loaded);  // NOLOAD took a reference
}

}  // namespace
}  // namespace gather_linear
