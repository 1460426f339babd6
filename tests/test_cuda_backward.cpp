// The CUDA backward against the exact reference: every form of its GEMMs (slices side by side, a
// unit stride in h or in b, a staged gradient, a concatenated x, a copied weight), the one-launch
// kernel of small problems, the bias gradient's one- and two-pass sums, TF32, graph capture with
// new inputs, determinism, and the device-specific errors. Gradients are NaN-poisoned first.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "backward_support.hpp"
#include "cuda/backward.hpp"
#include "cuda/mma_weight_gradient.hpp"
#include "cuda_test_support.hpp"

namespace gather_linear {
namespace {

using namespace gather_linear::testing;

// Device mirrors of BackwardOperands.
struct DeviceBackwardOperands {
  DeviceTensor x, weight, grad_y, grad_x, grad_weight, grad_bias;

  explicit DeviceBackwardOperands(const BackwardOperands& o)
      : x(o.x), weight(o.weight), grad_y(o.grad_y), grad_x(o.grad_x), grad_weight(o.grad_weight),
        grad_bias(o.grad_bias) {}
  Gradients gradients(bool want_x = true, bool want_weight = true, bool want_bias = true) const {
    Gradients g;
    if (want_x) g.x = grad_x.view();
    if (want_weight) g.weight = grad_weight.view();
    if (want_bias) g.bias = grad_bias.view();
    return g;
  }
  void backward(const Options& options = {}, CudaStream stream = nullptr) const {
    gather_linear::backward(grad_y.view(), x.view(), weight.view(), gradients(), options, stream);
  }
  void download(BackwardOperands& o) const {
    grad_x.download(o.grad_x);
    grad_weight.download(o.grad_weight);
    grad_bias.download(o.grad_bias);
  }
};

class CudaBackwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// Runs the backward on fresh operands and checks it.
void expect_backward_accurate(const BackwardCase& c, const Options& options = {}, std::uint32_t seed = 1234) {
  BackwardOperands o = make_backward_operands(c, seed);
  DeviceBackwardOperands d(o);
  d.backward(options);
  const cudaError_t status = cudaDeviceSynchronize();
  ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status) << " " << c;
  d.download(o);
  expect_gradients_accurate(o, c, "cuda", options.fp32_precision);
}

// The CPU sweep's edges, plus rows past the bias sum's first split (64 to 256 rows) and
// tile-sized shapes.
const Shape kShapes[] = {
    {1, 1, 1, 1},      {4, 12, 32, 56},   {1, 7, 5, 3},     {3, 1, 17, 1},   {2, 33, 13, 65},
    {64, 5, 3, 7},     {5, 97, 31, 37},   {8, 130, 16, 100}, {3, 300, 40, 20}, {2, 40, 30, 300},
    {0, 4, 8, 5},      {3, 4, 0, 5},      {3, 0, 8, 5},     {3, 4, 8, 0},    {2, 257, 8, 65},
    {4, 513, 64, 128}, {3, 128, 16, 128}, {2, 33, 130, 20},  // the last: slices batched over r
};
const DType kDtypes[] = {DType::float32, DType::float64, DType::float16, DType::bfloat16};

class CudaBackwardSweep : public CudaBackwardTest, public ::testing::WithParamInterface<BackwardCase> {};

// Runs the backward through the plan of the given (forced) forms and waits for it. The scratch
// is NaN bytes first: a part that a step leaves unwritten reaches the gradients as NaN.
void run_forced_forms(const BackwardProblem& p, const cuda::BackwardForms& forms) {
  const cuda::BackwardPlan plan = cuda::plan_backward(p, forms);
  DeviceBuffer scratch(plan.scratch.total);
  if (plan.scratch.total > 0) CUDA_ASSERT(cudaMemset(scratch.data(), 0xff, plan.scratch.total));
  cuda::run_backward(p, plan, Options{}, {scratch.data(), plan.scratch.total}, nullptr);
  const cudaError_t status = cudaDeviceSynchronize();
  ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
}

// The same through a plan whose one-launch choice is forced either way (the other forms are
// the library's).
void expect_forced_backward_accurate(const BackwardCase& c, bool one_launch) {
  BackwardOperands o = make_backward_operands(c, 1234);
  DeviceBackwardOperands d(o);
  const BackwardProblem p = validate_backward_args(d.grad_y.view(), d.x.view(), d.weight.view(), d.gradients());
  cuda::BackwardForms forms = cuda::choose_forms(p, Fp32Precision::ieee);
  forms.one_launch = one_launch;
  ASSERT_NO_FATAL_FAILURE(run_forced_forms(p, forms)) << c;
  d.download(o);
  expect_gradients_accurate(o, c, one_launch ? "cuda, one launch" : "cuda, cuBLAS forms");
}

// The library's choice, then one launch and the cuBLAS forms each forced.
TEST_P(CudaBackwardSweep, EveryGradient) {
  expect_backward_accurate(GetParam());
  expect_forced_backward_accurate(GetParam(), true);
  expect_forced_backward_accurate(GetParam(), false);
}

INSTANTIATE_TEST_SUITE_P(Sweep, CudaBackwardSweep, ::testing::ValuesIn(all_backward_cases(kShapes, kDtypes)),
                         [](const ::testing::TestParamInfo<BackwardCase>& info) { return case_name(info.param); });

// Large shapes in the forms the library chooses for them.
TEST_F(CudaBackwardTest, LargeShapesAndTheConcatenatedForm) {
  const Shape shapes[] = {{4, 4096, 64, 64}, {8, 1024, 128, 1024}, {2, 4096, 64, 256}};
  for (const Shape& s : shapes)
    for (DType dtype : {DType::float32, DType::float64, DType::bfloat16})
      for (auto layout : {BackwardLayout::contiguous, BackwardLayout::head_major, BackwardLayout::b_unit})
        expect_backward_accurate({s, dtype, layout, layout});
}

// Every form a layout admits, forced through the internal plan (the library's own choice
// depends on size and dtype, so the sweep alone need not reach each one).
TEST_F(CudaBackwardTest, EveryFormForced) {
  using cuda::InputGradientForm, cuda::WeightGradientForm;
  struct Forced {
    BackwardLayout layout;  // of x and of gradients.x
    InputGradientForm input;
    WeightGradientForm weight;
    const char* name;
  };
  const Forced forced[] = {
      {BackwardLayout::contiguous, InputGradientForm::slices_h_unit, WeightGradientForm::slices_h_unit, "slices h"},
      {BackwardLayout::contiguous, InputGradientForm::split, WeightGradientForm::concatenated, "split, concatenated"},
      {BackwardLayout::b_unit, InputGradientForm::slices_b_unit, WeightGradientForm::slices_b_unit, "slices b"},
      {BackwardLayout::b_unit, InputGradientForm::split, WeightGradientForm::concatenated, "split, concatenated"},
      {BackwardLayout::head_major, InputGradientForm::side_by_side, WeightGradientForm::side_by_side, "side_by_side"},
      {BackwardLayout::head_major, InputGradientForm::split, WeightGradientForm::concatenated, "split, concatenated"},
  };
  for (const Shape& s : {Shape{3, 40, 16, 24}, Shape{2, 33, 130, 20}, Shape{4, 300, 8, 600}})
    for (DType dtype : {DType::float32, DType::float64, DType::bfloat16})
      for (const Forced& f : forced) {
        const BackwardCase c{s, dtype, f.layout, f.layout};
        BackwardOperands o = make_backward_operands(c, 21);
        DeviceBackwardOperands d(o);
        const BackwardProblem p = validate_backward_args(d.grad_y.view(), d.x.view(), d.weight.view(), d.gradients());
        cuda::BackwardForms forms;
        forms.input = f.input, forms.weight = f.weight;
        ASSERT_NO_FATAL_FAILURE(run_forced_forms(p, forms)) << c;
        d.download(o);
        expect_gradients_accurate(o, c, std::string("cuda, forced ") + f.name);
      }
}

// A tensor-core form (exact float32) forced on the float32 cases where `refusal(c)` is empty, and
// on the others refused by the plan (naming `gradient`, the message holding `refusal(c)`) and the
// library's form run instead; then forced on float64 and bfloat16, refused as "float32 only".
// The other gradients take the library's forms.
template <class Force, class Refusal>
void expect_tensor_core_form_forced(const std::vector<BackwardCase>& cases, const char* gradient, Force force,
                                    Refusal refusal) {
  const auto plan_of = [](const DeviceBackwardOperands& d) {
    const BackwardProblem p = validate_backward_args(d.grad_y.view(), d.x.view(), d.weight.view(), d.gradients());
    cuda::BackwardForms forms = cuda::choose_forms(p, Fp32Precision::ieee);
    forms.one_launch = false;
    return std::pair{p, forms};
  };
  for (const BackwardCase& c : cases) {
    BackwardOperands o = make_backward_operands(c, 22);
    DeviceBackwardOperands d(o);
    auto [p, forms] = plan_of(d);
    const std::string why_not = refusal(c);
    if (why_not.empty()) {
      force(forms);
    } else {
      cuda::BackwardForms refused = forms;
      force(refused);
      expect_library_error([&] { (void)cuda::plan_backward(p, refused); }, gradient, why_not, ErrorCode::unsupported);
    }
    ASSERT_NO_FATAL_FAILURE(run_forced_forms(p, forms)) << c;
    d.download(o);
    expect_gradients_accurate(o, c, std::string("cuda, ") + gradient + (why_not.empty() ? " on" : " refused") +
                                        " tensor cores");
  }
  for (DType dtype : {DType::float64, DType::bfloat16}) {
    const BackwardCase c{{3, 40, 16, 24}, dtype, BackwardLayout::contiguous, BackwardLayout::contiguous};
    BackwardOperands o = make_backward_operands(c, 22);
    DeviceBackwardOperands d(o);
    auto [p, forms] = plan_of(d);
    force(forms);
    expect_library_error([&] { (void)cuda::plan_backward(p, forms); }, gradient, "float32 only",
                         ErrorCode::unsupported);
  }
}

// gradients.x's tensor-core form (exact float32 on the forward's 3xTF32 kernel) on every layout
// pair: it needs grad_y in 16-byte chunks (K a multiple of four, rows on 16-byte boundaries).
TEST_F(CudaBackwardTest, TensorCoreFormForced) {
  const Shape shapes[] = {{3, 40, 16, 24}, {2, 33, 130, 20}, {4, 300, 8, 600}, {2, 33, 13, 65}, {1, 130, 72, 132}};
  const DType float32[] = {DType::float32};
  expect_tensor_core_form_forced(
      all_backward_cases(shapes, float32), "gradients.x",
      [](cuda::BackwardForms& forms) { forms.input = cuda::InputGradientForm::tensor_cores; },
      [](const BackwardCase& c) -> std::string {
        const bool fits = c.shape.K % 4 == 0 && c.x_layout != BackwardLayout::strided &&
                          c.x_layout != BackwardLayout::misaligned;
        return fits ? "" : "16-byte";
      });
}

// gradients.weight's tensor-core form (exact float32, mma_weight_gradient.hpp) on every layout
// pair: it reads x and grad_y in 16-byte chunks (H and K multiples of four, x contiguous along H,
// rows on 16-byte boundaries; broadcast rows of x too). Partial output tiles on both sides,
// reductions of 1 to 2100 rows (partial k-tiles, several promotions, split into parts where the
// output tiles are few).
TEST_F(CudaBackwardTest, WeightTensorCoreFormForced) {
  const Shape shapes[] = {{3, 40, 16, 24}, {2, 33, 132, 20}, {4, 300, 8, 600}, {2, 33, 13, 65}, {1, 130, 72, 132},
                          {5, 1, 4, 4},    {3, 257, 20, 260}, {2, 64, 6, 8},   {2, 20, 8, 30},
                          {2, 600, 8, 16}, {1, 2100, 16, 40}};  // the last two: the reduction split, 2 and 8 parts
  const DType float32[] = {DType::float32};
  expect_tensor_core_form_forced(
      all_backward_cases(shapes, float32), "gradients.weight",
      [](cuda::BackwardForms& forms) { forms.weight = cuda::WeightGradientForm::tensor_cores; },
      [](const BackwardCase& c) -> std::string {
        // (b_unit's h stride is B: a unit stride where B = 1.)
        const bool x_fits = c.shape.H % 4 == 0 && (c.x_layout == BackwardLayout::contiguous ||
                                                   c.x_layout == BackwardLayout::head_major ||
                                                   c.x_layout == BackwardLayout::broadcast_rows ||
                                                   (c.x_layout == BackwardLayout::b_unit && c.shape.B == 1));
        return !x_fits ? "x in 16-byte chunks" : c.shape.K % 4 != 0 ? "grad_y in 16-byte chunks" : "";
      });
}

// gradients.weight's tensor-core kernel in each tile (128 x 64 and 64 x 64), its reduction whole
// and split into 3 parts (unevenly; at B = 1 two parts have no rows), forced whatever the library
// would choose, on partial tiles at every edge: gradients.x and the bias through the library's
// forms first, then gradients.weight, still NaN, by the kernel alone; the scratch NaN bytes first.
TEST_F(CudaBackwardTest, WeightTensorCoreTilesAndPartsForced) {
  using cuda::MmaTile;
  const Shape shapes[] = {{3, 70, 44, 200}, {1, 33, 64, 132}, {2, 300, 36, 388}, {4, 1, 8, 4}};
  for (const Shape& s : shapes)
    for (auto layout : {BackwardLayout::contiguous, BackwardLayout::head_major, BackwardLayout::broadcast_rows})
      for (MmaTile tile : {MmaTile::rows128_cols64, MmaTile::rows64_cols64})
        for (int parts : {1, 3}) {
          const BackwardCase c{s, DType::float32, layout, BackwardLayout::contiguous};
          BackwardOperands o = make_backward_operands(c, 25);
          DeviceBackwardOperands d(o);
          const BackwardProblem all =
              validate_backward_args(d.grad_y.view(), d.x.view(), d.weight.view(), d.gradients());
          const BackwardProblem x_and_bias =
              validate_backward_args(d.grad_y.view(), d.x.view(), d.weight.view(), d.gradients(true, false, true));
          cuda::BackwardForms forms = cuda::choose_forms(x_and_bias, Fp32Precision::ieee);
          forms.one_launch = false;
          ASSERT_NO_FATAL_FAILURE(run_forced_forms(x_and_bias, forms)) << c;
          ASSERT_EQ(cuda::mma_weight_gradient_why_not(all), "") << c;
          const cuda::WeightGradientLaunch launch{.tile = tile, .parts = parts};
          const std::size_t scratch_bytes = cuda::mma_weight_gradient_scratch_bytes(all, launch);
          DeviceBuffer scratch(scratch_bytes);
          if (scratch_bytes > 0) CUDA_ASSERT(cudaMemset(scratch.data(), 0xff, scratch_bytes));
          cuda::run_mma_weight_gradient(all, launch, scratch.data(), nullptr);
          CUDA_ASSERT(cudaDeviceSynchronize());
          d.download(o);
          expect_gradients_accurate(o, c,
                                    std::string("cuda, ") + (tile == MmaTile::rows128_cols64 ? "128 x 64" : "64 x 64") +
                                        " weight tiles, " + std::to_string(parts) + " parts");
        }
}

// A problem (all three gradients requested) and whether the library's forms for it take a
// gradient's tensor-core form.
struct TensorCoreExpectation {
  Shape shape;
  DType dtype;
  Fp32Precision precision;
  BackwardLayout layout;
  bool tensor_cores;
};

cuda::BackwardForms chosen_forms(const BackwardCase& c, Fp32Precision precision) {
  BackwardOperands o = make_backward_operands(c, 23);
  DeviceBackwardOperands d(o);
  return cuda::choose_forms(validate_backward_args(d.grad_y.view(), d.x.view(), d.weight.view(), d.gradients()),
                            precision);
}

// Where exact float32 takes the tensor-core form for gradients.x (from 786,432 outputs with
// K >= 1024, grad_y in 16-byte chunks), and that TF32, other dtypes and short reductions do not;
// at one such size the backward through the library's choice against the reference.
TEST_F(CudaBackwardTest, ExactFloat32InputGradientOnTheTensorCores) {
  const TensorCoreExpectation expectations[] = {
      {{8, 1024, 128, 1024}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, true},
      {{8, 1024, 128, 1024}, DType::float32, Fp32Precision::ieee, BackwardLayout::head_major, true},
      {{8, 1024, 128, 1024}, DType::float32, Fp32Precision::tf32, BackwardLayout::contiguous, false},
      {{8, 1024, 128, 1024}, DType::bfloat16, Fp32Precision::ieee, BackwardLayout::contiguous, false},
      {{8, 1024, 128, 1024}, DType::float32, Fp32Precision::ieee, BackwardLayout::misaligned, false},
      {{6, 1024, 128, 1024}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, true},
      {{6, 1023, 128, 1024}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, false},
      {{8, 1024, 128, 1020}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, false},
      {{8, 1024, 128, 1028}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, true},
      {{8, 1024, 128, 1026}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, false},
  };
  for (const TensorCoreExpectation& e : expectations) {
    const BackwardCase c{e.shape, e.dtype, e.layout, e.layout};
    EXPECT_EQ(chosen_forms(c, e.precision).input == cuda::InputGradientForm::tensor_cores, e.tensor_cores) << c;
  }
  for (BackwardLayout layout : {BackwardLayout::contiguous, BackwardLayout::head_major, BackwardLayout::b_unit})
    expect_backward_accurate({{6, 1024, 128, 1028}, DType::float32, layout, layout});
}

// The library sends exact float32's gradients.weight to the tensor cores from
// kWeightTensorCoreMultiplyAdds multiply-adds B*K*R*H where x and grad_y lie in 16-byte chunks
// (never under TF32, never for 16-bit dtypes), and the backward it then runs matches the
// reference on the layouts it takes.
TEST_F(CudaBackwardTest, ExactFloat32WeightGradientOnTheTensorCores) {
  // At the bound exactly (K*R*H = 32 * 32), and just under it.
  const std::int64_t edge_rows = cuda::kWeightTensorCoreMultiplyAdds / (32 * 32);
  const TensorCoreExpectation expectations[] = {
      {{8, 1024, 128, 1024}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, true},
      {{8, 1024, 128, 1024}, DType::float32, Fp32Precision::ieee, BackwardLayout::head_major, true},
      {{8, 1024, 128, 1024}, DType::float32, Fp32Precision::ieee, BackwardLayout::broadcast_rows, true},
      {{8, 1024, 128, 1024}, DType::float32, Fp32Precision::tf32, BackwardLayout::contiguous, false},
      {{8, 1024, 128, 1024}, DType::bfloat16, Fp32Precision::ieee, BackwardLayout::contiguous, false},
      {{8, 1024, 128, 1024}, DType::float32, Fp32Precision::ieee, BackwardLayout::misaligned, false},
      {{8, 1024, 128, 1024}, DType::float32, Fp32Precision::ieee, BackwardLayout::b_unit, false},
      {{8, 1024, 126, 1024}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, false},
      {{8, 1024, 128, 1022}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, false},
      {{1, edge_rows, 32, 32}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, true},
      {{1, edge_rows, 32, 28}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, false},
      {{4, 128, 64, 256}, DType::float32, Fp32Precision::ieee, BackwardLayout::contiguous, false},
  };
  for (const TensorCoreExpectation& e : expectations) {
    // (gradients.x contiguous: a broadcast x's rows overlap, which no gradient may.)
    const BackwardCase c{e.shape, e.dtype, e.layout,
                         e.layout == BackwardLayout::misaligned ? e.layout : BackwardLayout::contiguous};
    const cuda::BackwardForms forms = chosen_forms(c, e.precision);
    EXPECT_FALSE(forms.one_launch) << c;
    EXPECT_EQ(forms.weight == cuda::WeightGradientForm::tensor_cores, e.tensor_cores) << c;
  }
  for (BackwardLayout layout : {BackwardLayout::contiguous, BackwardLayout::head_major, BackwardLayout::broadcast_rows})
    expect_backward_accurate({{6, 1024, 128, 1028}, DType::float32, layout, BackwardLayout::contiguous});
}

// 600 random problems (random_problems.hpp: sizes and layouts no sweep lists, random subsets of
// the gradients), in turn exact float32, TF32, float64, float16 and bfloat16, every fourth up to
// 2^27 multiply-adds and the rest up to 2^21, each on a stream of the test's, against the exact
// reference.
TEST_F(CudaBackwardTest, RandomProblemsMatchTheReference) {
  const TestStream stream;
  for (std::uint32_t seed = 0; seed < 600; ++seed) {
    const auto [dtype, precision] = kRandomModes[seed % std::size(kRandomModes)];
    const std::int64_t budget = std::int64_t{1} << (seed % 4 == 3 ? 27 : 21);
    RandomBackwardProblem p = random_backward_problem(seed, dtype, budget);
    const DeviceBackwardOperands d(p.operands);
    Options options;
    options.fp32_precision = precision;
    const std::string label = std::string("cuda") + (precision == Fp32Precision::tf32 ? " tf32" : "");
    backward(d.grad_y.view(), p.x_argument(d.x.view()), p.weight_argument(d.weight.view()),
             d.gradients(p.want_x, p.want_weight, p.want_bias), options, stream);
    const cudaError_t status = cudaStreamSynchronize(stream);
    ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status) << " " << label << " " << p.description;
    d.download(p.operands);
    expect_random_gradients_accurate(p, dtype, label, precision);
  }
}

TEST_F(CudaBackwardTest, Tf32WhenAllowed) {
  Options tf32;
  tf32.fp32_precision = Fp32Precision::tf32;
  for (auto layout : {BackwardLayout::contiguous, BackwardLayout::head_major})
    expect_backward_accurate({{8, 512, 64, 512}, DType::float32, layout, layout}, tf32);
}

// Weight rows that overlap (stride 0: one row shared by every k) are read through a copy.
TEST_F(CudaBackwardTest, OverlappingWeightRows) {
  for (DType dtype : {DType::float32, DType::float64, DType::bfloat16}) {
    const BackwardCase c{{3, 40, 8, 20}, dtype, BackwardLayout::contiguous, BackwardLayout::contiguous};
    BackwardOperands o = make_backward_operands(c, 5);
    o.weight = HostTensor(dtype, {20, 24}, {0, 1});
    o.weight.fill_uniform(9);
    DeviceBackwardOperands d(o);
    d.backward();
    CUDA_ASSERT(cudaDeviceSynchronize());
    d.download(o);
    expect_gradients_accurate(o, c, "cuda, weight rows with stride 0");
  }
}

TEST_F(CudaBackwardTest, WritesOnlyTheRequestedGradients) {
  const BackwardCase c{{3, 20, 8, 10}, DType::bfloat16, BackwardLayout::contiguous, BackwardLayout::contiguous};
  for (int mask = 0; mask < 8; ++mask) {
    BackwardOperands o = make_backward_operands(c, 11);
    DeviceBackwardOperands d(o);
    const bool want_x = mask & 1, want_weight = mask & 2, want_bias = mask & 4;
    gather_linear::backward(d.grad_y.view(), d.x.view(), d.weight.view(), d.gradients(want_x, want_weight, want_bias));
    CUDA_ASSERT(cudaDeviceSynchronize());
    d.download(o);
    EXPECT_EQ(first_unpoisoned(o.grad_x).has_value(), want_x) << "mask " << mask;
    EXPECT_EQ(first_unpoisoned(o.grad_weight).has_value(), want_weight) << "mask " << mask;
    EXPECT_EQ(first_unpoisoned(o.grad_bias).has_value(), want_bias) << "mask " << mask;
  }
}

// An input no requested gradient reads may come as its shape alone (null data), past the
// device-pointer checks too: the same bits as a call that had it.
TEST_F(CudaBackwardTest, UnreadInputsMayComeWithoutData) {
  const BackwardCase c{{3, 40, 16, 24}, DType::bfloat16, BackwardLayout::contiguous, BackwardLayout::contiguous};
  BackwardOperands all = make_backward_operands(c, 17);
  const DeviceBackwardOperands everything(all);
  everything.backward();
  CUDA_ASSERT(cudaDeviceSynchronize());
  everything.download(all);
  for (bool want_x : {false, true}) {
    BackwardOperands o = make_backward_operands(c, 17);
    DeviceBackwardOperands d(o);
    TensorView x = d.x.view(), weight = d.weight.view();
    (want_x ? x : weight).data = nullptr;
    gather_linear::backward(d.grad_y.view(), x, weight, d.gradients(want_x, !want_x, true));
    CUDA_ASSERT(cudaDeviceSynchronize());
    d.download(o);
    expect_requested_gradients_equal(o, all, want_x);
  }
}

// Only the bias gradient: no cuBLAS, so racecheck sees the column sums alone. K = 128 rows are
// read 16 bytes at a time, K = 130 rows (not 16-byte multiples) an element at a time.
TEST_F(CudaBackwardTest, BiasGradientAlone) {
  for (DType dtype : {DType::float32, DType::float64, DType::bfloat16})
    for (std::int64_t K : {128, 130})
      for (std::int64_t B : {1, 255, 256, 257, 3000}) {
        const BackwardCase c{{2, B, 4, K}, dtype, BackwardLayout::contiguous, BackwardLayout::contiguous};
        BackwardOperands o = make_backward_operands(c, 2);
        DeviceBackwardOperands d(o);
        gather_linear::backward(d.grad_y.view(), d.x.view(), d.weight.view(), d.gradients(false, false, true));
        CUDA_ASSERT(cudaDeviceSynchronize());
        d.download(o);
        const BackwardProblem p = validate_backward_args(o.grad_y.view, o.x.view, o.weight.view, o.gradients());
        // float32 (float64: double) sums; bfloat16 adds its rounding of each sum (2^-9 of it at most)
        EXPECT_LE(relative_error_of_view(o.grad_bias, cpu::reference_backward(p).bias),
                  dtype == DType::bfloat16 ? 4e-3 : exact_tolerance(dtype))
            << c;
      }
}

// The same values 16-byte aligned (read a vector at a time) and one element off (read an element
// at a time) sum in the same order: the same bits.
TEST_F(CudaBackwardTest, BiasGradientBitsDoNotDependOnAlignment) {
  constexpr std::int64_t B = 3000, K = 256;
  const Device device = Device::cuda(0);
  HostTensor values = contiguous_tensor(DType::bfloat16, {B, K}, 0);
  values.fill_uniform(5);
  const std::size_t bytes = static_cast<std::size_t>(B * K) * sizeof(BFloat16);
  DeviceBuffer aligned(bytes), shifted(bytes + sizeof(BFloat16)), sums(2 * K * sizeof(BFloat16));
  std::byte* const shifted_rows = static_cast<std::byte*>(shifted.data()) + sizeof(BFloat16);
  CUDA_ASSERT(cudaMemcpy(aligned.data(), values.storage.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_ASSERT(cudaMemcpy(shifted_rows, values.storage.data(), bytes, cudaMemcpyHostToDevice));
  const TensorView x = TensorView::contiguous(nullptr, DType::bfloat16, device, {1, B, 1});  // read by neither
  const TensorView weight = TensorView::contiguous(nullptr, DType::bfloat16, device, {K, 1});
  for (int i = 0; i < 2; ++i) {
    Gradients gradients;
    gradients.bias = TensorView::contiguous(static_cast<std::byte*>(sums.data()) + i * K * sizeof(BFloat16),
                                            DType::bfloat16, device, {K});
    const void* rows = i == 0 ? aligned.data() : shifted_rows;
    gather_linear::backward(TensorView::contiguous(rows, DType::bfloat16, device, {B, K}), x, weight, gradients);
  }
  std::vector<std::uint16_t> bits(2 * K);
  CUDA_ASSERT(cudaMemcpy(bits.data(), sums.data(), sums.bytes(), cudaMemcpyDeviceToHost));
  EXPECT_TRUE(std::equal(bits.begin(), bits.begin() + K, bits.begin() + K));
}

TEST_F(CudaBackwardTest, DeterministicBits) {
  const BackwardCase c{{8, 3000, 64, 300}, DType::bfloat16, BackwardLayout::contiguous, BackwardLayout::contiguous};
  BackwardOperands a = make_backward_operands(c, 3), b = make_backward_operands(c, 3);
  DeviceBackwardOperands da(a), db(b);
  da.backward();
  db.backward();
  CUDA_ASSERT(cudaDeviceSynchronize());
  da.download(a);
  db.download(b);
  EXPECT_EQ(a.grad_x.storage, b.grad_x.storage);
  EXPECT_EQ(a.grad_weight.storage, b.grad_weight.storage);
  EXPECT_EQ(a.grad_bias.storage, b.grad_bias.storage);
}

// Replays a captured backward three times, each on new operands (seeds first_seed, +1, +2) with
// its gradients poisoned again, and checks each against the reference.
void expect_replays_accurate(const CapturedGraph& graph, const DeviceBackwardOperands& d, const BackwardCase& c,
                             std::uint32_t first_seed, const std::string& label) {
  for (std::uint32_t trial = 0; trial < 3; ++trial) {
    BackwardOperands fresh = make_backward_operands(c, first_seed + trial);
    d.x.upload(fresh.x);
    d.weight.upload(fresh.weight);
    d.grad_y.upload(fresh.grad_y);
    d.grad_x.upload(fresh.grad_x);
    d.grad_weight.upload(fresh.grad_weight);
    d.grad_bias.upload(fresh.grad_bias);
    graph.replay();
    d.download(fresh);
    expect_gradients_accurate(fresh, c, label + std::to_string(trial));
  }
}

// Captured with a caller's workspace (global capture mode: a stray default-stream launch fails),
// then replayed on new inputs with the gradients poisoned again.
TEST_F(CudaBackwardTest, GraphCaptureReplaysWithNewInputs) {
  const TestStream stream;
  for (const BackwardCase& c :
       {BackwardCase{{4, 600, 32, 56}, DType::float32, BackwardLayout::contiguous, BackwardLayout::strided},
        BackwardCase{{4, 4096, 64, 64}, DType::bfloat16, BackwardLayout::contiguous, BackwardLayout::contiguous}}) {
    BackwardOperands o = make_backward_operands(c, 7);
    DeviceBackwardOperands d(o);
    Options options;
    const std::size_t bytes =
        backward_workspace_bytes(d.grad_y.view(), d.x.view(), d.weight.view(), d.gradients(), options);
    EXPECT_GT(bytes, 0u) << c;
    DeviceBuffer workspace(bytes);
    options.workspace = {workspace.data(), bytes};
    const CapturedGraph graph(stream, [&] { d.backward(options, stream); });
    expect_replays_accurate(graph, d, c, 100, "graph replay ");
  }
}

// The one-launch backward captured (it needs no workspace) and replayed on new inputs, its
// gradients poisoned again; gradients.x strided.
TEST_F(CudaBackwardTest, OneLaunchCapturedAndReplayed) {
  const TestStream stream;
  for (DType dtype : {DType::float32, DType::bfloat16}) {
    const BackwardCase c{{4, 12, 32, 56}, dtype, BackwardLayout::contiguous, BackwardLayout::strided};
    BackwardOperands o = make_backward_operands(c, 8);
    DeviceBackwardOperands d(o);
    const BackwardProblem p = validate_backward_args(d.grad_y.view(), d.x.view(), d.weight.view(), d.gradients());
    ASSERT_TRUE(cuda::choose_forms(p, Fp32Precision::ieee).one_launch) << c;
    EXPECT_EQ(backward_workspace_bytes(d.grad_y.view(), d.x.view(), d.weight.view(), d.gradients()), 0u) << c;
    const CapturedGraph graph(stream, [&] { d.backward({}, stream); });
    expect_replays_accurate(graph, d, c, 200, "one launch, graph replay ");
  }
}

// Long reductions forced onto the one launch: a tile's reduction split between 16 and 32 warps,
// in several rounds of each warp's loads, beside gradients whose tiles take one warp each; in
// float32 with B > 8 by the kernel of 16 loads in flight, else by the kernel of 8; and
// gradients.weight's tiles across 32 rows (R*H = 1) or two or three (R*H = 21), beside
// gradients.x's tiles across rows (R*H = 1 with K = 200, R*H = 21) or within them, lanes idle
// (R*H = 1 with K = 300, R*H = 3 with K = 1000: one_launch_input_tiles_across_rows). (Where the
// library takes it is CudaRules.BackwardOneLaunchWhereSmall, which needs no GPU.)
TEST_F(CudaBackwardTest, OneLaunchLongReductions) {
  const Shape long_reductions[] = {{2, 3, 8, 2000},  {2, 20, 8, 2000}, {3, 1500, 4, 5},  {1, 5, 40, 100},
                                   {1, 600, 1, 300}, {1, 600, 1, 200}, {3, 40, 7, 1100}, {1, 20, 3, 1000}};
  for (const BackwardCase& c : all_backward_cases(long_reductions, kDtypes)) expect_forced_backward_accurate(c, true);
}

// backward() runs on the tensors' device whichever device is current, and leaves the current
// device as it found it, both ways round (as the forward's test): float32 (a staged gradient of
// x), float64, bfloat16 with slices side by side and with the concatenated form, and TF32.
TEST_F(CudaBackwardTest, RunsOnTheTensorsDeviceWhicheverIsCurrent) {
  int devices = 0;
  CUDA_ASSERT(cudaGetDeviceCount(&devices));
  if (devices < 2) GTEST_SKIP() << "needs two CUDA devices";
  Options tf32;
  tf32.fp32_precision = Fp32Precision::tf32;
  const struct {
    BackwardCase c;
    Options options;
  } runs[] = {
      {{{4, 600, 32, 56}, DType::float32, BackwardLayout::contiguous, BackwardLayout::strided}, {}},
      {{{5, 97, 31, 37}, DType::float64, BackwardLayout::head_major, BackwardLayout::head_major}, {}},
      {{{8, 1024, 128, 1024}, DType::bfloat16, BackwardLayout::head_major, BackwardLayout::head_major}, {}},
      {{{4, 4096, 64, 64}, DType::bfloat16, BackwardLayout::contiguous, BackwardLayout::contiguous}, {}},
      {{{8, 512, 64, 512}, DType::float32, BackwardLayout::contiguous, BackwardLayout::contiguous}, tf32},
  };
  for (const int operands_device : {0, 1}) {
    const int other = 1 - operands_device;
    const cuda::ScopedDevice on(operands_device);
    for (const auto& run : runs) {
      const std::string label = "operands on device " + std::to_string(operands_device) + ", device " +
                                std::to_string(other) + " current";
      BackwardOperands o = make_backward_operands(run.c, 17);
      DeviceBackwardOperands d(o);
      CUDA_ASSERT(cudaSetDevice(other));
      d.backward(run.options);
      EXPECT_EQ(current_device(), other) << label << " " << run.c;
      CUDA_ASSERT(cudaSetDevice(operands_device));
      const cudaError_t status = cudaDeviceSynchronize();
      ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status) << " " << label << " " << run.c;
      d.download(o);
      expect_gradients_accurate(o, run.c, label, run.options.fp32_precision);
    }
  }
}

TEST_F(CudaBackwardTest, DeviceErrorsWriteNothing) {
  const BackwardCase c{{2, 3, 4, 5}, DType::float32, BackwardLayout::contiguous, BackwardLayout::contiguous};
  BackwardOperands o = make_backward_operands(c, 1);
  DeviceBackwardOperands d(o);
  const auto expect_error_in = [&](const BackwardCase& c, const DeviceBackwardOperands& d, const TensorView& grad_y,
                                   Gradients gradients, const Options& options, const std::string& argument,
                                   const std::string& fragment) {
    expect_library_error([&] { gather_linear::backward(grad_y, d.x.view(), d.weight.view(), gradients, options); },
                         argument, fragment, ErrorCode::invalid_argument);
    BackwardOperands after = make_backward_operands(c, 1);
    d.download(after);
    EXPECT_EQ(first_unpoisoned(after.grad_x), std::nullopt) << argument;
    EXPECT_EQ(first_unpoisoned(after.grad_weight), std::nullopt) << argument;
    EXPECT_EQ(first_unpoisoned(after.grad_bias), std::nullopt) << argument;
  };
  const auto expect_error = [&](const TensorView& grad_y, Gradients gradients, const Options& options,
                                const std::string& argument, const std::string& fragment) {
    expect_error_in(c, d, grad_y, gradients, options, argument, fragment);
  };
  // Host memory labelled as CUDA.
  Gradients host_bias = d.gradients();
  host_bias.bias->data = o.grad_bias.view.data;
  expect_error(d.grad_y.view(), host_bias, {}, "gradients.bias", "got host memory");
  TensorView host_grad_y = d.grad_y.view();
  host_grad_y.data = o.grad_y.view.data;
  expect_error(host_grad_y, d.gradients(), {}, "grad_y", "got host memory");
  // A caller's workspace that is too small, for a problem past the one launch (which needs none).
  const BackwardCase large{{8, 256, 64, 512}, DType::float32, BackwardLayout::contiguous, BackwardLayout::contiguous};
  const DeviceBackwardOperands large_d(make_backward_operands(large, 1));
  ASSERT_GT(backward_workspace_bytes(large_d.grad_y.view(), large_d.x.view(), large_d.weight.view(),
                                     large_d.gradients()),
            256u);
  DeviceBuffer small(256);
  Options options;
  options.workspace = {small.data(), 256};
  expect_error_in(large, large_d, large_d.grad_y.view(), large_d.gradients(), options, "options.workspace",
                  "expected at least");
}

// 2^31 rows of one column, every element 3.0. The bias gradient alone takes them (its splits of
// the rows grow past 256 rows, so that a grid's second dimension holds them); the GEMM gradients
// refuse extents past cuBLASLt's 32 bits before anything is written.
TEST_F(CudaBackwardTest, RowsPast32Bits) {
  constexpr std::int64_t B = std::int64_t{1} << 31;
  const Device device = Device::cuda(0);
  DeviceBuffer rows(static_cast<std::size_t>(B) * 2);        // 4 GiB of bfloat16
  CUDA_ASSERT(cudaMemset(rows.data(), 0x40, rows.bytes()));  // 0x4040 is bfloat16 3.0
  const TensorView grad_y = TensorView::contiguous(rows.data(), DType::bfloat16, device, {B, 1});
  const TensorView x = TensorView::contiguous(rows.data(), DType::bfloat16, device, {1, B, 1});  // inputs may alias
  const TensorView weight = TensorView::contiguous(nullptr, DType::bfloat16, device, {1, 1});  // read by neither
  DeviceBuffer outputs(512);
  CUDA_ASSERT(cudaMemset(outputs.data(), 0xff, outputs.bytes()));  // NaN
  Gradients gradients;
  gradients.bias = TensorView::contiguous(outputs.data(), DType::bfloat16, device, {1});
  gather_linear::backward(grad_y, x, weight, gradients);
  CUDA_ASSERT(cudaDeviceSynchronize());
  BFloat16 bias{};
  CUDA_ASSERT(cudaMemcpy(&bias, outputs.data(), sizeof bias, cudaMemcpyDeviceToHost));
  // float32 partial sums of 3.0 round past 2^24; bfloat16 keeps 8 bits anyway.
  EXPECT_NEAR(to_float(bias) / (3.0 * static_cast<double>(B)), 1.0, 1e-2) << to_float(bias);

  CUDA_ASSERT(cudaMemset(outputs.data(), 0xff, outputs.bytes()));
  gradients.weight =
      TensorView::contiguous(static_cast<std::byte*>(outputs.data()) + 256, DType::bfloat16, device, {1, 1});
  expect_library_error([&] { (void)backward_workspace_bytes(grad_y, x, weight, gradients, {}); }, "x", "below 2^31",
                       ErrorCode::unsupported);
  expect_library_error([&] { gather_linear::backward(grad_y, x, weight, gradients); }, "x", "below 2^31",
                       ErrorCode::unsupported);
  std::vector<std::uint16_t> after(outputs.bytes() / 2);
  CUDA_ASSERT(cudaMemcpy(after.data(), outputs.data(), outputs.bytes(), cudaMemcpyDeviceToHost));
  for (std::uint16_t bits : after) ASSERT_EQ(bits, 0xffff) << "an output was written";
}

}  // namespace
}  // namespace gather_linear
