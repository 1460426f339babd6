// The CPU backward against the exact reference over shapes, dtypes and layouts of x and of its
// gradient; partial requests; determinism; and every bad argument named, with nothing written.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "backward_support.hpp"

namespace gather_linear {
namespace {

using namespace gather_linear::testing;

// Edges: unit sizes, odd H, R = 64, reductions (K for gradients.x, B for gradients.weight) past
// the engine's 256-deep slice and row counts past its tiles, the direct and the packed paths,
// and every empty dimension (an empty reduction writes zeros).
const Shape kShapes[] = {
    {1, 1, 1, 1},    {4, 12, 32, 56}, {1, 7, 5, 3},   {3, 1, 17, 1},    {2, 33, 13, 65}, {64, 5, 3, 7},
    {5, 97, 31, 37}, {8, 130, 16, 100}, {3, 300, 40, 20}, {2, 40, 30, 300}, {0, 4, 8, 5},  {3, 4, 0, 5},
    {3, 0, 8, 5},    {3, 4, 8, 0},
};
const DType kDtypes[] = {DType::float32, DType::float64, DType::float16, DType::bfloat16};

class CpuBackwardSweep : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(CpuBackwardSweep, EveryGradient) {
  const BackwardCase c = GetParam();
  BackwardOperands o = make_backward_operands(c, 1234);
  backward(o.grad_y.view, o.x.view, o.weight.view, o.gradients());
  expect_gradients_accurate(o, c, "cpu");
}

INSTANTIATE_TEST_SUITE_P(Sweep, CpuBackwardSweep, ::testing::ValuesIn(all_backward_cases(kShapes, kDtypes)),
                         [](const ::testing::TestParamInfo<BackwardCase>& info) { return case_name(info.param); });

// Large enough for several packed weight blocks and every thread, in each form.
TEST(CpuBackwardLarge, PackedBlocksAndThreads) {
  for (auto [x_layout, grad_x_layout] : {std::pair{BackwardLayout::contiguous, BackwardLayout::contiguous},
                                         std::pair{BackwardLayout::head_major, BackwardLayout::head_major}}) {
    const BackwardCase c{{4, 300, 64, 700}, DType::float32, x_layout, grad_x_layout};
    BackwardOperands o = make_backward_operands(c, 7);
    backward(o.grad_y.view, o.x.view, o.weight.view, o.gradients());
    expect_gradients_accurate(o, c, "cpu");
  }
}

// x's concatenation and the unsplit gradients.x past 64 MB each: buffers of the call's own rather
// than the thread's kept scratch.
TEST(CpuBackwardLarge, BuffersPastTheKeptScratch) {
  const BackwardCase c{{8, 4096, 640, 3}, DType::float32, BackwardLayout::contiguous, BackwardLayout::contiguous};
  BackwardOperands o = make_backward_operands(c, 9);
  backward(o.grad_y.view, o.x.view, o.weight.view, o.gradients());
  expect_gradients_accurate(o, c, "cpu");
}

// 300 random problems (random_problems.hpp: sizes and layouts no sweep lists, up to 2^21
// multiply-adds, random subsets of the gradients), each dtype in turn, against the exact reference.
TEST(CpuRandomProblems, BackwardMatchesTheReference) {
  for (std::uint32_t seed = 0; seed < 300; ++seed) {
    const DType dtype = kDtypes[seed % std::size(kDtypes)];
    RandomBackwardProblem p = random_backward_problem(seed, dtype, std::int64_t{1} << 21);
    backward(p.operands.grad_y.view, p.x_argument(p.operands.x.view), p.weight_argument(p.operands.weight.view),
             p.requested());
    expect_random_gradients_accurate(p, dtype, "cpu");
  }
}

// Only what is asked for is written: the others keep their poison.
TEST(CpuBackward, WritesOnlyTheRequestedGradients) {
  const BackwardCase c{{3, 20, 8, 10}, DType::float32, BackwardLayout::contiguous, BackwardLayout::contiguous};
  for (int mask = 0; mask < 8; ++mask) {
    BackwardOperands o = make_backward_operands(c, 11);
    const bool want_x = mask & 1, want_weight = mask & 2, want_bias = mask & 4;
    backward(o.grad_y.view, o.x.view, o.weight.view, o.gradients(want_x, want_weight, want_bias));
    EXPECT_EQ(first_unpoisoned(o.grad_x).has_value(), want_x) << "mask " << mask;
    EXPECT_EQ(first_unpoisoned(o.grad_weight).has_value(), want_weight) << "mask " << mask;
    EXPECT_EQ(first_unpoisoned(o.grad_bias).has_value(), want_bias) << "mask " << mask;
  }
}

// x is read only for gradients.weight and weight only for gradients.x: without that gradient
// the input may come as its shape alone (null data), as autograd keeps only what it needs.
TEST(CpuBackward, UnreadInputsMayComeWithoutData) {
  const BackwardCase c{{3, 20, 8, 10}, DType::float32, BackwardLayout::contiguous, BackwardLayout::contiguous};
  BackwardOperands all = make_backward_operands(c, 13);
  backward(all.grad_y.view, all.x.view, all.weight.view, all.gradients());
  for (bool want_x : {false, true}) {
    BackwardOperands o = make_backward_operands(c, 13);
    TensorView x = o.x.view, weight = o.weight.view;
    (want_x ? x : weight).data = nullptr;
    backward(o.grad_y.view, x, weight, o.gradients(want_x, !want_x, true));
    expect_requested_gradients_equal(o, all, want_x);
  }
}

TEST(CpuBackward, SameInputsSameBits) {
  const BackwardCase c{{8, 200, 64, 300}, DType::float32, BackwardLayout::contiguous, BackwardLayout::contiguous};
  BackwardOperands a = make_backward_operands(c, 3), b = make_backward_operands(c, 3);
  backward(a.grad_y.view, a.x.view, a.weight.view, a.gradients());
  backward(b.grad_y.view, b.x.view, b.weight.view, b.gradients());
  EXPECT_EQ(a.grad_x.storage, b.grad_x.storage);
  EXPECT_EQ(a.grad_weight.storage, b.grad_weight.storage);
  EXPECT_EQ(a.grad_bias.storage, b.grad_bias.storage);
}

// The bias gradient is each column's sum rounded once: a 1 followed by 65,539 values of 2^-24 (a
// half ulp of 1 in float32, so a float32 running sum never moves from 1) gives 1 + 65539 * 2^-24,
// rounded to the dtype. Over any thread count, the same bits: the rows' chunks are fixed by the
// shape. K = 1, 40 and 300 take every column group and, at 1 and 40 outputs, many chunks of rows.
TEST(CpuBackward, BiasGradientRoundsEachSumOnce) {
  constexpr std::int64_t B = 65540;
  const int default_threads = omp_get_max_threads();
  for (DType dtype : {DType::float32, DType::float16, DType::bfloat16}) {
    for (std::int64_t K : {1, 40, 300}) {
      const BackwardCase c{{1, B, 1, K}, dtype, BackwardLayout::contiguous, BackwardLayout::contiguous};
      BackwardOperands o = make_backward_operands(c, 7);
      const std::int64_t ld = o.grad_y.view.stride(0);
      o.grad_y.fill([&](std::size_t i) {
        const std::int64_t e = static_cast<std::int64_t>(i) - o.grad_y.offset;
        return e >= 0 && e / ld == (e % ld) % 7 ? 1.0 : 0x1p-24;  // column k's 1 in row k % 7
      });
      const double sum = 1.0 + static_cast<double>(B - 1) * 0x1p-24;
      HostTensor expected = contiguous_tensor(dtype, {1});
      expected.set(0, sum);  // rounded once, to nearest
      for (int threads : {1, 2, 3}) {
        o.grad_bias.fill_nan();
        omp_set_num_threads(threads);
        backward(o.grad_y.view, o.x.view, o.weight.view, o.gradients(false, false, true));
        for (std::int64_t k = 0; k < K; ++k)
          EXPECT_EQ(o.grad_bias.at({k}), expected.at({0})) << c << " column " << k << ", " << threads << " threads";
      }
    }
  }
  omp_set_num_threads(default_threads);
}

// The column sums at every instruction-set level this processor has: the same bits as summing
// each column in double in order of b, over widths that take every column group and its tails
// (128, 32 and 16 or 8 columns; masked last loads), padded rows and a row count of 0.
TEST(CpuBackward, BiasColumnSumsAtEverySimdLevel) {
  for (DType dtype : {DType::float32, DType::float64, DType::float16, DType::bfloat16}) {
    for (std::int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 100, 127, 128, 129, 200, 256}) {
      for (std::int64_t rows : {0, 1, 5, 300}) {
        const std::int64_t stride = n + 3;
        HostTensor grad_y(dtype, {std::max<std::int64_t>(rows, 1), n}, {stride, 1});
        grad_y.fill_uniform(static_cast<std::uint32_t>(n * 1000 + rows), -1e3, 1e3);
        std::vector<double> expected(static_cast<std::size_t>(n), 0.0);
        for (std::int64_t b = 0; b < rows; ++b)
          for (std::int64_t k = 0; k < n; ++k) expected[static_cast<std::size_t>(k)] += grad_y.at({b, k});
        for (auto level : {cpu::SimdLevel::avx512, cpu::SimdLevel::avx2, cpu::SimdLevel::portable}) {
          if (!cpu::simd_level_supported(level)) continue;
          std::vector<double> sums(static_cast<std::size_t>(n) + 1, std::numeric_limits<double>::quiet_NaN());
          cpu::bias_column_sums(dtype, grad_y.view.data, stride, rows, n, sums.data(), level);
          EXPECT_TRUE(std::isnan(sums.back())) << "wrote past the sums";
          sums.pop_back();
          EXPECT_EQ(sums, expected) << dtype_name(dtype) << " n " << n << " rows " << rows << " level "
                                    << static_cast<int>(level);
        }
      }
    }
  }
}

// ---- errors -------------------------------------------------------------------------------

struct BackwardValidation : ::testing::Test {
  BackwardOperands o = make_backward_operands(
      {{2, 3, 4, 5}, DType::float32, BackwardLayout::contiguous, BackwardLayout::contiguous}, 1);
  TensorView grad_y = o.grad_y.view, x = o.x.view, weight = o.weight.view;
  Gradients gradients = o.gradients();
  Options options;

  void expect_error(const std::string& argument, const std::string& fragment,
                    ErrorCode code = ErrorCode::invalid_argument) {
    expect_library_error([&] { backward(grad_y, x, weight, gradients, options); }, argument, fragment, code);
    EXPECT_EQ(first_unpoisoned(o.grad_x), std::nullopt) << "gradients.x was written";
    EXPECT_EQ(first_unpoisoned(o.grad_weight), std::nullopt) << "gradients.weight was written";
    EXPECT_EQ(first_unpoisoned(o.grad_bias), std::nullopt) << "gradients.bias was written";
  }
};

TEST_F(BackwardValidation, GradYShapeDtypeAndStrides) {
  grad_y.sizes[0] = 4;
  expect_error("grad_y", "expected size(0) == B = 3 (x.size(1)), got 4");
  grad_y = o.grad_y.view;
  grad_y.sizes[1] = 6;
  expect_error("grad_y", "expected size(1) == K = 5 (weight.size(0)), got 6");
  grad_y = o.grad_y.view;
  grad_y.dtype = DType::float16;
  expect_error("grad_y", "expected dtype float32 (the dtype of x), got float16");
  grad_y = o.grad_y.view;
  grad_y.strides[1] = 2;
  expect_error("grad_y", "expected unit inner stride");
  grad_y = o.grad_y.view;
  grad_y.strides[0] = 4;
  expect_error("grad_y", "expected stride(0) >= K = 5, got stride(0) = 4");
  grad_y = o.grad_y.view;
  grad_y.rank = 3;
  expect_error("grad_y", "expected rank 2 (B, K), got rank 3");
}

TEST_F(BackwardValidation, InputsAsForwardChecksThem) {
  weight.sizes[1] = 7;
  expect_error("weight", "expected size(1) == R*H = 2*4 = 8, got 7");
  weight = o.weight.view;
  x.dtype = DType::int32;
  expect_error("x", "unsupported dtype int32", ErrorCode::unsupported);
}

TEST_F(BackwardValidation, InputsReadMustHaveData) {
  x.data = nullptr;  // gradients.weight reads x
  expect_error("x", "null data pointer for a non-empty tensor (24 elements)");
  x = o.x.view;
  weight.data = nullptr;  // gradients.x reads weight
  expect_error("weight", "null data pointer for a non-empty tensor (40 elements)");
}

TEST_F(BackwardValidation, GradientShapesAndLayouts) {
  gradients.x->sizes[2] = 3;
  expect_error("gradients.x", "expected size(2) == 4 (the size of x), got 3");
  gradients = o.gradients();
  gradients.x->strides[1] = 0;
  expect_error("gradients.x", "elements overlap");
  gradients = o.gradients();
  gradients.x->strides = {4, 4, 1};  // the rows of b land on the slices of r
  expect_error("gradients.x", "elements overlap");
  gradients = o.gradients();
  gradients.weight->strides[1] = 2;
  expect_error("gradients.weight", "expected unit inner stride");
  gradients = o.gradients();
  gradients.weight->strides[0] = 7;
  expect_error("gradients.weight", "rows overlap: expected stride(0) >= R*H = 8, got stride(0) = 7");
  gradients = o.gradients();
  gradients.bias->sizes[0] = 4;
  expect_error("gradients.bias", "expected size(0) == 5 (weight.size(0)), got 4");
  gradients = o.gradients();
  gradients.bias->strides[0] = 2;
  expect_error("gradients.bias", "expected a contiguous tensor");
  gradients = o.gradients();
  gradients.weight->dtype = DType::float64;
  expect_error("gradients.weight", "expected dtype float32 (the dtype of x), got float64");
  gradients = o.gradients();
  gradients.bias->device = Device::cuda(0);
  expect_error("gradients.bias", "expected device cpu (the device of x), got cuda:0");
}

TEST_F(BackwardValidation, GradientsShareNoMemory) {
  gradients.x->data = x.data;
  expect_error("gradients.x", "overlaps x");
  gradients = o.gradients();
  gradients.weight->data = grad_y.data;
  expect_error("gradients.weight", "overlaps grad_y");
  gradients = o.gradients();
  gradients.bias->data = gradients.weight->data;
  expect_error("gradients.bias", "overlaps gradients.weight: an output must not share memory with another output");
}

TEST_F(BackwardValidation, KernelCannotBeForced) {
  options.kernel = "cpu_reference";
  expect_error("options.kernel", "backward() chooses its own kernels", ErrorCode::unsupported);
}

TEST_F(BackwardValidation, WorkspaceBytesValidatesToo) {
  EXPECT_EQ(backward_workspace_bytes(grad_y, x, weight, gradients), 0u);  // none on the CPU
  grad_y.sizes[0] = 4;
  EXPECT_THROW(backward_workspace_bytes(grad_y, x, weight, gradients), Error);
}

// The exact reference sums blocks of gradients side by side; each must still be its definition's
// sum in its order, bit for bit, on blocks' edges (extents around multiples of 4 and 8) and in
// every layout.
TEST(CpuReference, BlockedGradientsAreTheDefinitionsBitForBit) {
  const Shape shapes[] = {{1, 1, 1, 1}, {3, 5, 3, 9}, {2, 4, 4, 8}, {4, 9, 3, 17}};
  const DType dtypes[] = {DType::float32, DType::float64, DType::bfloat16, DType::float16};
  for (const BackwardCase& c : all_backward_cases(shapes, dtypes)) {
    const BackwardOperands o = make_backward_operands(c, 13);
    const auto [R, B, H, K] = c.shape;
    const cpu::ReferenceGradients g =
        cpu::reference_backward(validate_backward_args(o.grad_y.view, o.x.view, o.weight.view, o.gradients()));
    for (std::int64_t k = 0; k < K; ++k) {
      double bias = 0;
      for (std::int64_t b = 0; b < B; ++b) bias += o.grad_y.at({b, k});
      ASSERT_EQ(g.bias[static_cast<std::size_t>(k)], bias) << c << " k=" << k;
      for (std::int64_t column = 0; column < R * H; ++column) {
        double weight = 0;
        for (std::int64_t b = 0; b < B; ++b) weight += o.grad_y.at({b, k}) * o.x.at({column / H, b, column % H});
        ASSERT_EQ(g.weight[static_cast<std::size_t>(k * R * H + column)], weight) << c << " k=" << k << " c=" << column;
      }
    }
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h) {
          double x = 0;
          for (std::int64_t k = 0; k < K; ++k) x += o.grad_y.at({b, k}) * o.weight.at({k, r * H + h});
          ASSERT_EQ(g.x[static_cast<std::size_t>((r * B + b) * H + h)], x) << c << " r=" << r << " b=" << b << " h=" << h;
        }
  }
}

}  // namespace
}  // namespace gather_linear
