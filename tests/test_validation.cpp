// Every bad argument gets its own error naming the argument, with expected and actual values,
// and y (poisoned with NaN beforehand) is left untouched.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "test_support.hpp"

namespace gather_linear {
namespace {

using testing::contiguous_tensor;
using testing::expect_library_error;
using testing::HostTensor;

constexpr std::int64_t R = 2, B = 3, H = 4, K = 5;

struct ValidationFixture : ::testing::Test {
  HostTensor x = contiguous_tensor(DType::float32, {R, B, H});
  HostTensor weight = contiguous_tensor(DType::float32, {K, R * H});
  HostTensor bias = contiguous_tensor(DType::float32, {K});
  HostTensor y = contiguous_tensor(DType::float32, {B, K});
  TensorView xv, wv, yv;
  std::optional<TensorView> bv;
  Options options;

  void SetUp() override {
    x.fill_uniform(1);
    weight.fill_uniform(2);
    bias.fill_uniform(3);
    y.fill_nan();
    xv = x.view;
    wv = weight.view;
    bv = bias.view;
    yv = y.view;
  }

  // Runs forward and expects an Error for `argument` whose message contains `fragment`.
  void expect_error(const std::string& argument, const std::string& fragment,
                    ErrorCode code = ErrorCode::invalid_argument) {
    expect_library_error([&] { forward(xv, wv, bv, yv, options); }, argument, fragment, code);
    ASSERT_EQ(first_unpoisoned(y), std::nullopt) << "y was written";
  }
};

TEST_F(ValidationFixture, ValidCallWritesEveryOutput) {
  forward(xv, wv, bv, yv, options);
  for (std::size_t i = 0; i < y.elements(); ++i) EXPECT_FALSE(std::isnan(y.get(i)));
}

// output_sizes() checks x, weight and bias exactly as forward() does, and never looks at y.
TEST_F(ValidationFixture, OutputSizesChecksTheInputsAlone) {
  yv.rank = 1;  // y is not an argument of output_sizes
  EXPECT_EQ(output_sizes(xv, wv, bv), (std::array<std::int64_t, 2>{B, K}));
  EXPECT_EQ(output_sizes(xv, wv, std::nullopt), (std::array<std::int64_t, 2>{B, K}));
  const auto expect_same_error = [&](const std::string& argument, const std::string& fragment) {
    try {
      output_sizes(xv, wv, bv);
      ADD_FAILURE() << "output_sizes accepted a bad " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  SetUp();
  wv.sizes[1] = R * H + 1;
  expect_same_error("weight", "expected size(1) == R*H = 2*4 = 8, got 9");
  SetUp();
  bv->dtype = DType::bfloat16;
  expect_same_error("bias", "expected dtype float32 (the dtype of x), got bfloat16");
  SetUp();
  xv.rank = 2;
  expect_same_error("x", "expected rank 3 (R, B, H), got rank 2");
}

TEST_F(ValidationFixture, WrongRanks) {
  xv.rank = 2;
  expect_error("x", "expected rank 3 (R, B, H), got rank 2");
  SetUp();
  wv.rank = 3;
  expect_error("weight", "expected rank 2 (K, R*H), got rank 3");
  SetUp();
  bv->rank = 2;
  expect_error("bias", "expected rank 1 (K), got rank 2");
  SetUp();
  yv.rank = 1;
  expect_error("y", "expected rank 2 (B, K), got rank 1");
}

TEST_F(ValidationFixture, SizeMismatches) {
  wv.sizes[1] = R * H + 1;
  expect_error("weight", "expected size(1) == R*H = 2*4 = 8, got 9");
  SetUp();
  bv->sizes[0] = K - 1;
  expect_error("bias", "expected size(0) == K = 5 (weight.size(0)), got 4");
  SetUp();
  yv.sizes[0] = B + 1;
  expect_error("y", "expected size(0) == B = 3 (x.size(1)), got 4");
  SetUp();
  yv.sizes[1] = K + 2;
  expect_error("y", "expected size(1) == K = 5 (weight.size(0)), got 7");
}

TEST_F(ValidationFixture, DtypeMismatch) {
  wv.dtype = DType::float16;
  expect_error("weight", "expected dtype float32 (the dtype of x), got float16");
  SetUp();
  bv->dtype = DType::bfloat16;
  expect_error("bias", "expected dtype float32 (the dtype of x), got bfloat16");
  SetUp();
  yv.dtype = DType::float64;
  expect_error("y", "expected dtype float32 (the dtype of x), got float64");
}

TEST_F(ValidationFixture, UnsupportedDtype) {
  for (TensorView* v : {&xv, &wv, &yv}) v->dtype = DType::int32;
  bv->dtype = DType::int32;
  expect_error("x", "unsupported dtype int32; expected float32, float16, bfloat16 or float64", ErrorCode::unsupported);
}

TEST_F(ValidationFixture, DeviceMismatch) {
  yv.device = Device::cuda(0);
  expect_error("y", "expected device cpu (the device of x), got cuda:0");
  SetUp();
  wv.device = Device::cuda(1);
  expect_error("weight", "expected device cpu (the device of x), got cuda:1");
}

TEST_F(ValidationFixture, HostMemoryLabelledCuda) {
  for (TensorView* v : {&xv, &wv, &yv}) v->device = Device::cuda(0);
  bv->device = Device::cuda(0);
  // Without a GPU: "no CUDA device"; with one: "expected CUDA device memory ... got host memory".
  try {
    forward(xv, wv, bv, yv, options);
    FAIL() << "host pointers passed as CUDA memory were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "x") << e.what();
  }
  ASSERT_EQ(first_unpoisoned(y), std::nullopt) << "y was written";
}

TEST_F(ValidationFixture, NullPointers) {
  xv.data = nullptr;
  expect_error("x", "null data pointer for a non-empty tensor (24 elements)");
  SetUp();
  bv->data = nullptr;
  expect_error("bias", "null data pointer");
}

TEST_F(ValidationFixture, NullPointerOfEmptyTensorIsFine) {
  HostTensor empty_y = contiguous_tensor(DType::float32, {0, K});
  HostTensor empty_x = contiguous_tensor(DType::float32, {R, 0, H});
  TensorView x0 = empty_x.view, y0 = empty_y.view;
  x0.data = nullptr;
  y0.data = nullptr;
  EXPECT_NO_THROW(forward(x0, wv, bv, y0, options));
}

TEST_F(ValidationFixture, NegativeSizesAndStrides) {
  xv.sizes[2] = -1;
  expect_error("x", "expected non-negative sizes, got size(2) = -1");
  SetUp();
  xv.strides[0] = -12;
  expect_error("x", "expected non-negative strides, got stride(0) = -12");
}

TEST_F(ValidationFixture, SizeProductsOverflow) {
  xv.sizes = {std::int64_t{1} << 32, 3, std::int64_t{1} << 32};
  wv.sizes[1] = 0;  // never reached: R*H overflows first
  expect_error("x", "sizes overflow int64: R*H");
  SetUp();
  xv.sizes = {2, std::int64_t{1} << 62, 4};
  expect_error("x", "sizes overflow int64: R*H*B");
  SetUp();
  xv.strides = {std::int64_t{1} << 62, 4, 1};
  expect_error("x", "sizes and strides overflow int64");
  SetUp();
  xv.strides = {std::numeric_limits<std::int64_t>::max(), H, 1};  // largest offset INT64_MAX: one past it overflows
  expect_error("x", "sizes and strides overflow int64");
}

// The CPU has one device: its index means nothing, whatever a caller puts there.
TEST_F(ValidationFixture, CpuDeviceIndexIsIgnored) {
  xv.device = {DeviceType::cpu, -1};
  wv.device = {DeviceType::cpu, 3};
  forward(xv, wv, bv, yv, options);
  for (std::size_t i = 0; i < y.elements(); ++i) EXPECT_FALSE(std::isnan(y.get(i)));
}

TEST_F(ValidationFixture, WeightNeedsUnitInnerStride) {
  wv.strides = {R * H * 2, 2};
  expect_error("weight", "expected unit inner stride (stride(1) == 1), got stride(1) = 2");
}

TEST_F(ValidationFixture, OutputLayout) {
  yv.strides = {K, 2};
  expect_error("y", "expected unit inner stride (stride(1) == 1), got stride(1) = 2");
  SetUp();
  yv.strides = {K - 1, 1};
  expect_error("y", "rows overlap: expected stride(0) >= K = 5, got stride(0) = 4");
  SetUp();
  bv->strides[0] = 2;
  expect_error("bias", "expected a contiguous bias (stride(0) == 1), got stride(0) = 2");
}

TEST_F(ValidationFixture, MisalignedPointer) {
  xv.data = static_cast<std::byte*>(xv.data) + 2;
  expect_error("x", "is not aligned to its 4-byte element size");
}

TEST_F(ValidationFixture, OutputOverlapsInput) {
  HostTensor shared = contiguous_tensor(DType::float32, {R * B * H + B * K});
  shared.fill_nan();
  xv.data = shared.storage.data();
  yv.data = shared.storage.data() + (R * B * H - 1) * sizeof(float);  // shares x's last element
  try {
    forward(xv, wv, bv, yv, options);
    FAIL() << "overlap accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "y");
    EXPECT_NE(std::string(e.what()).find("overlaps x"), std::string::npos) << e.what();
  }
  ASSERT_EQ(first_unpoisoned(shared), std::nullopt) << "the shared storage was written";
  SetUp();
  yv.data = weight.storage.data();
  expect_error("y", "overlaps weight");
}

TEST_F(ValidationFixture, UnknownOrMisplacedKernel) {
  options.kernel = "no_such_kernel";
  expect_error("options.kernel",
               "unknown kernel 'no_such_kernel'; expected auto or one of: cpu_amx_bf16, cpu_bf16_dot, cpu_gather_gemm");
  for (const auto& k : available_kernels()) {
    if (k.device != DeviceType::cuda) continue;
    SetUp();
    options.kernel = k.name;
    expect_error("options.kernel", "runs on cuda, but the tensors are on cpu", ErrorCode::unsupported);
  }
}

TEST(TensorViewFactories, RejectMismatchedListsAndLargeRanks) {
  float data = 0;
  try {
    (void)TensorView::strided(&data, DType::float32, Device::cpu(), {1, 2}, {1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "strides");
  }
  try {
    (void)TensorView::contiguous(&data, DType::float32, Device::cpu(), {1, 1, 1, 1, 1, 1, 1, 1, 1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "sizes");
  }
}

TEST(EmptyProblems, ZeroReductionGivesBiasOrZeros) {
  for (bool with_bias : {true, false}) {
    HostTensor x = contiguous_tensor(DType::float32, {0, 3, 4});
    HostTensor w = contiguous_tensor(DType::float32, {5, 0});
    HostTensor bias = contiguous_tensor(DType::float32, {5});
    HostTensor y = contiguous_tensor(DType::float32, {3, 5});
    bias.fill_uniform(7);
    y.fill_nan();
    forward(x.view, w.view, with_bias ? std::optional(bias.view) : std::nullopt, y.view);
    for (std::int64_t b = 0; b < 3; ++b)
      for (std::int64_t k = 0; k < 5; ++k)
        EXPECT_EQ(y.at({b, k}), with_bias ? bias.at({k}) : 0.0) << "b=" << b << " k=" << k;
  }
}

}  // namespace
}  // namespace gather_linear
