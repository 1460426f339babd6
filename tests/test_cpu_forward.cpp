// CPU kernels against the exact reference over a sweep of shapes, dtypes and layouts.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/kernel_registry.hpp"
#include "core/numeric.hpp"
#include "core/validate.hpp"
#include "cpu/block_tasks.hpp"
#include "cpu/cpu_kernels.hpp"
#include "random_problems.hpp"
#include "test_support.hpp"

namespace gather_linear {
namespace {

using namespace gather_linear::testing;

// Edges: unit sizes, odd and prime H, R = 64, H = 1, row counts around the SIMD tiles
// (MR = 4/6/12, MC = 32/48/96), reductions longer than the KC slice (256; 512 on AVX-512) and H
// larger than it, the direct path's tiles of 3 weight rows (AVX2, long reductions) with 1 or 2 weight rows left,
// and empty dimensions.
const Shape kShapes[] = {
    {1, 1, 1, 1},   {4, 12, 32, 56}, {1, 7, 5, 3},    {3, 1, 17, 1},  {2, 33, 13, 65}, {64, 5, 3, 7},
    {5, 97, 31, 37}, {8, 130, 16, 100}, {2, 40, 300, 40}, {3, 50, 100, 70}, {7, 100, 1, 9}, {1, 1, 1, 33},
    {6, 45, 19, 6}, {3, 23, 90, 29},
    {0, 4, 8, 5},   {3, 4, 0, 5},    {3, 0, 8, 5},    {3, 4, 8, 0},
};
const DType kDtypes[] = {DType::float32, DType::float64, DType::float16, DType::bfloat16};
const Layout kLayouts[] = {Layout::contiguous, Layout::head_major, Layout::strided, Layout::broadcast_rows,
                           Layout::misaligned, Layout::b_unit};

// Runs `run` on fresh poisoned operands and returns its relative error against the reference.
template <class Run>
double error_of(const Case& c, Run run) {
  Operands o = make_operands(c, 1234);
  run(o);
  EXPECT_TRUE(gaps_untouched(o.y)) << c << ": wrote outside y's view";
  return relative_error(o.y, reference_of(o), c.shape.B, c.shape.K);
}

// error_of a forward() with options.kernel set ("auto": the dispatcher's choice).
double error_with_kernel(const Case& c, const char* kernel) {
  return error_of(c, [&](Operands& o) {
    Options options;
    options.kernel = kernel;
    forward(o.x.view, o.weight.view, o.bias_view(), o.y.view, options);
  });
}

double baseline_error(const Case& c) { return error_with_kernel(c, "cpu_unfused_blas"); }

// float32/float64: the reference's accuracy. float16/bfloat16: within 2x the unfused baseline's
// own error plus one unit of output rounding (both round the same float32 sums).
void expect_accurate(const Case& c, double err, const std::string& what) {
  ASSERT_FALSE(std::isnan(err)) << what << " " << c << ": NaN in output (an element was not written)";
  if (is_low_precision(c.dtype)) {
    const double unit = c.dtype == DType::bfloat16 ? 0x1p-8 : 0x1p-11;
    const double bound = 2 * baseline_error(c) + unit;
    EXPECT_LE(err, bound) << what << " " << c;
  } else {
    EXPECT_LE(err, exact_tolerance(c.dtype)) << what << " " << c;
  }
}

class CpuForwardSweep : public ::testing::TestWithParam<Case> {};

TEST_P(CpuForwardSweep, GatherGemmAtEverySimdLevelAndPath) {
  const Case c = GetParam();
  for (auto level : {cpu::SimdLevel::avx512, cpu::SimdLevel::avx2, cpu::SimdLevel::portable}) {
    if (!cpu::simd_level_supported(level)) continue;
    for (auto path : kEnginePaths) {
      const double err = error_of(c, [&](Operands& o) {
        cpu::run_gather_gemm(validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view), level, path);
      });
      expect_accurate(c, err,
                      "cpu_gather_gemm level " + std::to_string(static_cast<int>(level)) + " path " + path_name(path));
    }
  }
}

TEST_P(CpuForwardSweep, DispatchedAndForcedKernels) {
  const Case c = GetParam();
  const bool amx = (c.dtype == DType::bfloat16 || c.dtype == DType::float16) && cpu::amx_bf16_supported();
  const bool dot = c.dtype == DType::bfloat16 && cpu::bf16_dot_supported();
  for (const char* kernel :
       {"auto", "cpu_gather_gemm", "cpu_reference", "cpu_unfused_blas", "cpu_amx_bf16", "cpu_bf16_dot"}) {
    // CpuForwardAmx and CpuForwardBf16Dot test their refusals
    if (kernel == std::string_view("cpu_amx_bf16") && !amx) continue;
    if (kernel == std::string_view("cpu_bf16_dot") && !dot) continue;
    expect_accurate(c, error_with_kernel(c, kernel), kernel);
  }
}

INSTANTIATE_TEST_SUITE_P(Sweep, CpuForwardSweep, ::testing::ValuesIn(all_cases(kShapes, kDtypes, kLayouts)),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// The dispatcher's choice on 400 random problems (random_problems.hpp: sizes and layouts no sweep
// lists, up to 2^22 multiply-adds), each dtype in turn, against the exact reference.
TEST(CpuRandomProblems, DispatchedForwardMatchesTheReference) {
  KernelTally tally;
  for (std::uint32_t seed = 0; seed < 400; ++seed) {
    const DType dtype = kDtypes[seed % std::size(kDtypes)];
    RandomForwardProblem p = random_forward_problem(seed, dtype, std::int64_t{1} << 22);
    Operands& o = p.operands;
    tally.add(select_kernel(o.x.view, o.weight.view, o.bias_view(), o.y.view));
    forward(o.x.view, o.weight.view, o.bias_view(), o.y.view);
    const double err = relative_error(o.y, reference_of(o), p.shape.B, p.shape.K);
    ASSERT_FALSE(std::isnan(err)) << p.description << ": NaN left in y";
    EXPECT_LE(err, rounding_tolerance(dtype)) << p.description;
    EXPECT_TRUE(gaps_untouched(o.y)) << p.description << ": wrote outside y's view";
  }
  std::cout << "kernels:" << tally.str() << "\n";
  EXPECT_TRUE(tally.reached("cpu_gather_gemm")) << tally.str();
}

// The same random problems (up to 2^20 multiply-adds) through every forced engine level and path,
// and the bfloat16 kernels where they take the problem, on 1 to 3 threads: the layouts no sweep
// lists (zero strides, overlapping weight rows, any dimension order) reach every path, not only
// the one the dispatcher picks.
TEST(CpuRandomProblems, EveryLevelPathAndKernelMatchesTheReference) {
  const int default_threads = omp_get_max_threads();
  for (std::uint32_t seed = 0; seed < 120; ++seed) {
    const DType dtype = kDtypes[seed % std::size(kDtypes)];
    omp_set_num_threads(1 + static_cast<int>(seed % 3));
    const std::vector<double> ref = [&] {
      const RandomForwardProblem p = random_forward_problem(seed, dtype, std::int64_t{1} << 20);
      return reference_of(p.operands);
    }();
    std::vector<std::pair<std::string, std::function<void(const Problem&)>>> runs;
    for (auto level : {cpu::SimdLevel::avx512, cpu::SimdLevel::avx2, cpu::SimdLevel::portable}) {
      if (!cpu::simd_level_supported(level)) continue;
      const auto add = [&](cpu::GemmPath path) {
        runs.emplace_back("level " + std::to_string(static_cast<int>(level)) + " path " + path_name(path),
                          [=](const Problem& p) { cpu::run_gather_gemm(p, level, path); });
      };
      add(cpu::GemmPath::automatic);
      for (auto path : kEnginePaths) add(path);
    }
    runs.emplace_back("cpu_amx_bf16", cpu::run_amx_bf16);  // where it takes the problem (below)
    runs.emplace_back("cpu_bf16_dot", cpu::run_bf16_dot);
    for (const auto& [what, run] : runs) {
      RandomForwardProblem p = random_forward_problem(seed, dtype, std::int64_t{1} << 20);
      Operands& o = p.operands;
      const Problem problem = validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view);
      if ((what == "cpu_amx_bf16" && !cpu::amx_bf16_why_not(problem).empty()) ||
          (what == "cpu_bf16_dot" && !cpu::bf16_dot_why_not(problem).empty()))
        continue;
      run(problem);
      const double err = relative_error(o.y, ref, p.shape.B, p.shape.K);
      ASSERT_FALSE(std::isnan(err)) << p.description << " " << what << ": NaN left in y";
      EXPECT_LE(err, rounding_tolerance(dtype)) << p.description << " " << what;
      EXPECT_TRUE(gaps_untouched(o.y)) << p.description << " " << what << ": wrote outside y's view";
    }
  }
  omp_set_num_threads(default_threads);
}

// Large enough for several packed weight blocks (> 4 MB), many row blocks and all threads; the
// second shape gives the bfloat16 kernels two weight blocks and tasks of 1024 outputs (300 rows:
// more than AMX's direct path takes against its 10 MB weight); the last, a reduction of 4096,
// blocks sized by their 1 MB reduction slice (three of them).
TEST(CpuForwardLarge, SeveralWeightBlocksAndThreads) {
  for (DType dtype : {DType::float32, DType::bfloat16})
    for (Shape shape : {Shape{4, 300, 512, 700}, Shape{2, 300, 1024, 2500}, Shape{8, 100, 512, 1100}})
      for (const char* kernel : {"auto", "cpu_bf16_dot"}) {
        if (kernel == std::string_view("cpu_bf16_dot") && (dtype != DType::bfloat16 || !cpu::bf16_dot_supported()))
          continue;
        const Case c{shape, dtype, Layout::head_major, true};
        expect_accurate(c, error_with_kernel(c, kernel), kernel);
      }
}

// The packed path where one block of rows (B <= MC = 96 on AVX-512 and AVX2) packs each weight
// panel's slice inside its task, on every thread: reductions of several KC slices, weights of
// several 4 MB blocks, MR-panels cut short, float64's 8 x 8 transpositions with slices of 8 and
// more; and reductions of one slice, whose whole tiles go straight to y (partial ones through the
// buffer), or, where the engine rounds one element at a time (float16 on SSE2), whose tiles go to
// y in chunks of columns (several here: 4500 columns, 2048 to a chunk of 32 rows).
TEST(CpuForwardLarge, PackedPanelsInTasksAndStoresInChunks) {
  for (DType dtype : {DType::float32, DType::float64, DType::float16})
    for (Shape shape : {Shape{1, 90, 1100, 1000}, Shape{3, 41, 300, 2100}, Shape{5, 13, 9, 3381}, Shape{2, 200, 64, 1500},
                        Shape{1, 64, 20, 4500}})
      for (Layout layout : {Layout::contiguous, Layout::head_major, Layout::strided, Layout::misaligned})
        for (auto level : {cpu::SimdLevel::avx512, cpu::SimdLevel::avx2, cpu::SimdLevel::portable}) {
          if (!cpu::simd_level_supported(level)) continue;
          const Case c{shape, dtype, layout, true};
          const double err = error_of(c, [&](Operands& o) {
            cpu::run_gather_gemm(validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view), level,
                                 cpu::GemmPath::packed);
          });
          expect_accurate(c, err, "cpu_gather_gemm packed, level " + std::to_string(static_cast<int>(level)));
        }
}

// The kernel the CPU dispatcher chooses for a fresh problem of case c (its registry name).
std::string_view chosen_kernel(const Case& c) {
  Operands o = make_operands(c, 3);
  return cpu::choose_kernel(validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view), {}).info.name;
}

// The AMX kernel: chosen for bfloat16 where the processor has AMX-BF16 (but for reductions of up
// to 16, up to 8 outputs, and short reductions with few outputs), refused by name otherwise
// (another dtype, or a processor without it).
TEST(CpuForwardAmx, ChosenForBfloat16AndRefusedOtherwise) {
  const Case bf16{{4, 12, 32, 56}, DType::bfloat16, Layout::contiguous, true};
  Operands o = make_operands(bf16, 3);
  const Problem p = validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view);
  EXPECT_EQ(cpu::choose_kernel(p, {}).info.name, cpu::amx_bf16_supported() ? "cpu_amx_bf16"
                                                 : cpu::bf16_dot_supported() ? "cpu_bf16_dot"
                                                                             : "cpu_gather_gemm");
  if (cpu::amx_bf16_supported()) {
    // Reductions of up to 16 cost AMX a whole 32-deep tile multiply: the engine takes them.
    EXPECT_EQ(chosen_kernel({{4, 64, 4, 256}, DType::bfloat16, Layout::head_major, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{1, 1055, 1, 419}, DType::bfloat16, Layout::contiguous, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{1, 64, 17, 256}, DType::bfloat16, Layout::contiguous, true}), "cpu_amx_bf16");
    // And reductions of up to 32 with up to 32 outputs, or of up to 24 with up to 64.
    EXPECT_EQ(chosen_kernel({{2, 512, 16, 32}, DType::bfloat16, Layout::contiguous, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{2, 512, 16, 33}, DType::bfloat16, Layout::contiguous, true}), "cpu_amx_bf16");
    EXPECT_EQ(chosen_kernel({{1, 512, 33, 32}, DType::bfloat16, Layout::contiguous, true}), "cpu_amx_bf16");
    EXPECT_EQ(chosen_kernel({{3, 512, 8, 64}, DType::bfloat16, Layout::head_major, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{3, 512, 8, 65}, DType::bfloat16, Layout::head_major, true}), "cpu_amx_bf16");
    // So do up to 8 outputs, mostly padding in AMX's tiles.
    EXPECT_EQ(chosen_kernel({{8, 1024, 128, 8}, DType::bfloat16, Layout::contiguous, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{8, 1024, 128, 9}, DType::bfloat16, Layout::contiguous, true}), "cpu_amx_bf16");
  }
  {
    // float16 as bfloat16 parts on AMX from 128 rows a thread, a reduction of 48 and 128 outputs,
    // along unit strides.
    const char* split = cpu::amx_bf16_supported() ? "cpu_amx_bf16" : "cpu_gather_gemm";
    const std::int64_t rows = cpu::amx_split_min_rows();
    EXPECT_EQ(chosen_kernel({{1, rows, 48, 128}, DType::float16, Layout::contiguous, true}), split);
    EXPECT_EQ(chosen_kernel({{4, rows, 32, 128}, DType::float16, Layout::head_major, true}), split);
    // x's slices times K of at least 4096.
    EXPECT_EQ(chosen_kernel({{4, rows, 16, 256}, DType::float16, Layout::head_major, true}), split);
    EXPECT_EQ(chosen_kernel({{4, rows, 16, 255}, DType::float16, Layout::head_major, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{8, rows, 8, 511}, DType::float16, Layout::contiguous, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{1, rows - 1, 48, 128}, DType::float16, Layout::contiguous, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{1, rows, 47, 128}, DType::float16, Layout::contiguous, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{1, rows, 48, 127}, DType::float16, Layout::contiguous, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{4, rows, 32, 128}, DType::float16, Layout::strided, true}), "cpu_gather_gemm");
  }
  Options options;
  options.kernel = "cpu_amx_bf16";
  if (!cpu::amx_bf16_supported())
    expect_library_error([&] { forward(o.x.view, o.weight.view, o.bias_view(), o.y.view, options); },
                         "options.kernel", "needs AMX-BF16", ErrorCode::unsupported);
  const Case fp32{{4, 12, 32, 56}, DType::float32, Layout::contiguous, true};
  Operands f = make_operands(fp32, 3);
  expect_library_error([&] { forward(f.x.view, f.weight.view, f.bias_view(), f.y.view, options); },
                       "options.kernel", "bfloat16 or float16 only", ErrorCode::unsupported);
  EXPECT_EQ(first_unpoisoned(f.y), std::nullopt) << "y written";
}

// y = x * W^T + bias in a 16-bit type T, with x = (1, 0, ..., 0) over H columns and W[k, 0],
// bias[k] taken from `cases` (bits, repeated over K = 44 outputs: vectors of 8 or 16 and a
// remainder of 4 or 12), so that y = w + bias in float32, rounded once. Every output's bits must be
// those of to_half or to_bfloat16 of that sum. The cases start at each of their positions in turn,
// so that each lands in every output position: in the vectors and in the remainder.
template <class T, std::size_t N, class Run>
void expect_rounded_once(const std::uint16_t (&cases)[N][2], std::int64_t H, Run run) {
  constexpr bool half = std::is_same_v<T, Half>;
  constexpr DType dtype = half ? DType::float16 : DType::bfloat16;
  constexpr std::int64_t K = 44;
  for (std::size_t shift = 0; shift < N; ++shift) {
    std::vector<T> x(static_cast<std::size_t>(H), T{0}), w(static_cast<std::size_t>(K * H), T{0}), bias(K),
        y(K, T{0xffff});
    x[0] = T{half ? std::uint16_t{0x3c00} : std::uint16_t{0x3f80}};
    for (std::int64_t k = 0; k < K; ++k) {
      const std::size_t c = (static_cast<std::size_t>(k) + shift) % N;
      w[static_cast<std::size_t>(k * H)] = T{cases[c][0]};
      bias[static_cast<std::size_t>(k)] = T{cases[c][1]};
    }
    const Device cpu{};
    run(validate_forward_args(TensorView::contiguous(x.data(), dtype, cpu, {1, 1, H}),
                              TensorView::contiguous(w.data(), dtype, cpu, {K, H}),
                              TensorView::contiguous(bias.data(), dtype, cpu, {K}),
                              TensorView::contiguous(y.data(), dtype, cpu, {1, K})));
    for (std::int64_t k = 0; k < K; ++k) {
      const auto i = static_cast<std::size_t>(k);
      const float sum = to_float(w[i * static_cast<std::size_t>(H)]) + to_float(bias[i]);
      if constexpr (half)
        EXPECT_EQ(y[i].bits, to_half(sum).bits) << "output " << k << ", cases shifted by " << shift;
      else
        EXPECT_EQ(y[i].bits, to_bfloat16(sum).bits) << "output " << k << ", cases shifted by " << shift;
    }
  }
}

// bits of w[k], bias[k]: ties, subnormals, infinities, NaN and overflow in bfloat16.
const std::uint16_t kBfloat16Cases[][2] = {
    {0x3f80, 0x3b80},  // 1 + 2^-8: a tie, to even (1)
    {0x3f81, 0x3b80},  // 1 + 2^-7 + 2^-8: a tie, to even (1 + 2^-6)
    {0x3f80, 0x3b00},  // 1 + 2^-9: below the tie
    {0x0000, 0x0001},  // the smallest subnormal (in the bias: AMX's tile multiply flushes its own)
    {0x0080, 0x8001},  // the smallest normal less the smallest subnormal
    {0x8000, 0x807f},  // a negative subnormal
    {0x7f80, 0x3f80},  // +inf
    {0xff80, 0x7f80},  // -inf + inf: NaN
    {0x7fc1, 0x0000},  // a quiet NaN with a payload
    {0x7f7f, 0x7f7f},  // overflow to inf
    {0x8000, 0x0000},  // -0 + 0
};

// The same in float16, and a subnormal weight (which the engine's packing widens).
const std::uint16_t kFloat16Cases[][2] = {
    {0x3c00, 0x1000},  // 1 + 2^-11: a tie, to even (1)
    {0x3c01, 0x1000},  // 1 + 3 * 2^-11: a tie, to even (1 + 2^-9)
    {0x3c00, 0x0c00},  // 1 + 2^-12: below the tie
    {0x0000, 0x0001},  // the smallest subnormal
    {0x0400, 0x8001},  // the smallest normal less the smallest subnormal
    {0x8000, 0x83ff},  // a negative subnormal
    {0x0001, 0x0000},  // a subnormal weight, widened
    {0x7c00, 0x3c00},  // +inf
    {0xfc00, 0x7c00},  // -inf + inf: NaN
    {0x7e01, 0x0000},  // a quiet NaN with a payload
    {0x7bff, 0x4c00},  // 65504 + 16: a tie, to inf
    {0x7bff, 0x4800},  // 65504 + 8: below it
    {0x8000, 0x0000},  // -0 + 0
};

// kFloat16Cases' finite weights, with an infinite and a NaN bias: the AMX kernel's float16 split
// takes these (an infinite or NaN weight sends the problem to the SIMD engine).
const std::uint16_t kFloat16FiniteWeightCases[][2] = {
    {0x3c00, 0x1000}, {0x3c01, 0x1000}, {0x3c00, 0x0c00}, {0x0000, 0x0001}, {0x0400, 0x8001},
    {0x8000, 0x83ff}, {0x0001, 0x0000}, {0x7bff, 0x4c00}, {0x7bff, 0x4800}, {0x8000, 0x0000},
    {0x3c00, 0x7c00},  // 1 + inf
    {0xbc00, 0x7e01},  // -1 + a quiet NaN with a payload
};

// The AMX kernel rounds y to bfloat16 16 outputs at a time (one reduction index), and float16,
// which it computes from bfloat16 parts, the same way (infinite and NaN weights through the SIMD
// engine).
TEST(CpuForwardAmx, RoundsLikeToBfloat16AndToHalf) {
  if (!cpu::amx_bf16_supported()) GTEST_SKIP() << "no AMX-BF16 on this processor";
  expect_rounded_once<BFloat16>(kBfloat16Cases, 1, [](const Problem& p) { cpu::run_amx_bf16(p); });
  expect_rounded_once<Half>(kFloat16FiniteWeightCases, 1, [](const Problem& p) { cpu::run_amx_bf16(p); });
  expect_rounded_once<Half>(kFloat16Cases, 1, [](const Problem& p) { cpu::run_amx_bf16(p); });
}

// AMX's direct path where the weight's rows lie a multiple of 2 KB apart (1024 elements: padded
// rows of R*H = 1000, with a partial last reduction step, and rows of 1024): the first 32-row
// chunk keeps the weight tiles it reads and the later chunks read that copy, for 32-output blocks
// whose second half is full, partial (K = 40) or absent, and a last chunk of 1 or 32 rows.
TEST(CpuForwardAmx, DirectPathReadsAliasedWeightRowsFromTheFirstChunksCopy) {
  if (!cpu::amx_bf16_supported()) GTEST_SKIP() << "no AMX-BF16 on this processor";
  for (std::int64_t H : {125, 128})
    for (std::int64_t B : {33, 64})
      for (std::int64_t K : {48, 40}) {
        Operands o = make_operands({{8, B, H, K}, DType::bfloat16, Layout::contiguous, true}, 11);
        o.weight = HostTensor(DType::bfloat16, {K, 8 * H}, {1024, 1});
        o.weight.fill_uniform(12);
        Options options;
        options.kernel = "cpu_amx_bf16";
        forward(o.x.view, o.weight.view, o.bias_view(), o.y.view, options);
        const double err = relative_error(o.y, reference_of(o), B, K);
        EXPECT_LE(err, rounding_tolerance(DType::bfloat16)) << "H = " << H << ", B = " << B << ", K = " << K;
        EXPECT_TRUE(gaps_untouched(o.y));
      }
}

// The AVX512-BF16 kernel: chosen for bfloat16 without AMX for short batches, and, on processors
// where it outruns the float32 engine (AMD's), where x's slices run along a unit stride or its rows
// sit side by side (else the engine), but for reductions of up to 16, of up to 256 on a single row,
// and past 16 rows up to 16 outputs, or 64 with an odd H's reduction of up to 64 (the engine's);
// refused by name otherwise.
TEST(CpuForwardBf16Dot, ChosenForShortBatchesOrWhereItsPackingIsFastAndRefusedOtherwise) {
  const bool dot = !cpu::amx_bf16_supported() && cpu::bf16_dot_supported();
  if (!cpu::amx_bf16_supported()) {
    EXPECT_EQ(chosen_kernel({{4, 12, 32, 56}, DType::bfloat16, Layout::head_major, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{4, 12, 31, 56}, DType::bfloat16, Layout::contiguous, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");  // odd H
    EXPECT_EQ(chosen_kernel({{4, 24, 31, 56}, DType::bfloat16, Layout::contiguous, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");  // odd H, packed
    EXPECT_EQ(chosen_kernel({{4, 24, 32, 56}, DType::bfloat16, Layout::strided, true}), "cpu_gather_gemm");
    // Reductions of up to 16 on the engine, and single rows' of up to 256.
    EXPECT_EQ(chosen_kernel({{4, 64, 4, 256}, DType::bfloat16, Layout::head_major, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{1, 64, 17, 256}, DType::bfloat16, Layout::contiguous, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{2, 8, 8, 1024}, DType::bfloat16, Layout::contiguous, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{8, 1, 32, 1024}, DType::bfloat16, Layout::head_major, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{8, 1, 33, 1024}, DType::bfloat16, Layout::head_major, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{8, 2, 32, 1024}, DType::bfloat16, Layout::head_major, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");
    // Up to 16 outputs on the engine past 16 rows; the dot kernel's direct path keeps them.
    EXPECT_EQ(chosen_kernel({{4, 17, 32, 16}, DType::bfloat16, Layout::contiguous, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{4, 17, 32, 17}, DType::bfloat16, Layout::contiguous, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{4, 16, 32, 1}, DType::bfloat16, Layout::contiguous, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");
    // And up to 64 outputs where an odd H's reduction is up to 64 long.
    EXPECT_EQ(chosen_kernel({{3, 17, 21, 64}, DType::bfloat16, Layout::head_major, true}), "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{3, 17, 21, 65}, DType::bfloat16, Layout::head_major, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{5, 17, 13, 64}, DType::bfloat16, Layout::contiguous, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{4, 12, 31, 56}, DType::bfloat16, Layout::b_unit, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");
    // Past 16 rows, the packed path: the dot kernel's where it outruns the engine, on every
    // processor for few rows and little work, on AMD's for any.
    EXPECT_EQ(chosen_kernel({{4, 24, 32, 56}, DType::bfloat16, Layout::contiguous, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");
    EXPECT_EQ(chosen_kernel({{4, 256, 31, 56}, DType::bfloat16, Layout::b_unit, true}),
              dot ? "cpu_bf16_dot" : "cpu_gather_gemm");
    const Case large{{8, 64, 128, 512}, DType::bfloat16, Layout::contiguous, true};
#if defined(__x86_64__)
    EXPECT_EQ(chosen_kernel(large), dot && __builtin_cpu_is("amd") ? "cpu_bf16_dot" : "cpu_gather_gemm");
#endif
  }
  // Without AMX, short batches (up to 16 rows) read the weight in place on the dot kernel, whether
  // or not the reduction is whole 32-element vectors; strided x is gathered once, so it does not
  // matter there. AMX has a direct path of its own, and takes every bfloat16 problem of 5 rows or
  // more.
  if (cpu::bf16_dot_supported()) {
    const std::string kernel = cpu::amx_bf16_supported() ? "cpu_amx_bf16" : "cpu_bf16_dot";
    EXPECT_EQ(chosen_kernel({{8, 1, 64, 1024}, DType::bfloat16, Layout::strided, true}), "cpu_bf16_dot");
    EXPECT_EQ(chosen_kernel({{8, 1, 63, 1056}, DType::bfloat16, Layout::contiguous, true}), "cpu_bf16_dot");
    EXPECT_EQ(chosen_kernel({{8, 1, 64, 512}, DType::bfloat16, Layout::strided, true}), "cpu_bf16_dot");
    EXPECT_EQ(chosen_kernel({{8, 4, 64, 1024}, DType::bfloat16, Layout::strided, true}), "cpu_bf16_dot");
    EXPECT_EQ(chosen_kernel({{8, 5, 64, 1024}, DType::bfloat16, Layout::strided, true}), kernel);
    EXPECT_EQ(chosen_kernel({{8, 16, 64, 1024}, DType::bfloat16, Layout::strided, false}), kernel);
    if (!cpu::amx_bf16_supported()) {
      EXPECT_EQ(chosen_kernel({{4, 12, 32, 56}, DType::bfloat16, Layout::strided, true}), "cpu_bf16_dot");  // whole vectors
      EXPECT_EQ(chosen_kernel({{4, 12, 33, 56}, DType::bfloat16, Layout::b_unit, true}), "cpu_bf16_dot");   // packs fast
      EXPECT_EQ(chosen_kernel({{3, 12, 21, 64}, DType::bfloat16, Layout::contiguous, true}), "cpu_bf16_dot");  // a tail
      EXPECT_EQ(chosen_kernel({{3, 17, 21, 65}, DType::bfloat16, Layout::contiguous, true}), "cpu_bf16_dot");
      EXPECT_EQ(chosen_kernel({{3, 17, 21, 65}, DType::bfloat16, Layout::strided, true}), "cpu_gather_gemm");
    }
  }
  EXPECT_EQ(chosen_kernel({{4, 12, 32, 56}, DType::float32, Layout::contiguous, true}), "cpu_gather_gemm");
  Options options;
  options.kernel = "cpu_bf16_dot";
  if (!cpu::bf16_dot_supported()) {
    Operands o = make_operands({{4, 12, 32, 56}, DType::bfloat16, Layout::contiguous, true}, 3);
    expect_library_error([&] { forward(o.x.view, o.weight.view, o.bias_view(), o.y.view, options); },
                         "options.kernel", "needs AVX512-BF16", ErrorCode::unsupported);
  }
  Operands f = make_operands({{4, 12, 32, 56}, DType::float32, Layout::contiguous, true}, 3);
  expect_library_error([&] { forward(f.x.view, f.weight.view, f.bias_view(), f.y.view, options); },
                       "options.kernel", "bfloat16 only", ErrorCode::unsupported);
  EXPECT_EQ(first_unpoisoned(f.y), std::nullopt) << "y written";
}

// The dot kernel's packed path where x's slices are an odd number of elements long, so that pairs
// straddle them (each panel's rows gathered into a copy first): rows past 16, in whole and partial
// 12-row panels; reductions of several 128-pair slices, whose pairs cut across slices of x, of
// whole 16-pair steps and with a tail; H = 1 and 3; every layout of x with its slices along a unit
// stride (broadcast rows: every row of A the same).
TEST(CpuForwardBf16Dot, PackedPathWithPairsAcrossSlices) {
  if (!cpu::bf16_dot_supported()) GTEST_SKIP() << "no AVX512-BF16 on this processor";
  for (Shape shape : {Shape{3, 40, 301, 70}, Shape{2, 17, 129, 33}, Shape{9, 25, 57, 64}, Shape{5, 36, 1, 40},
                      Shape{11, 29, 3, 17}, Shape{1, 24, 513, 32}})
    for (Layout layout : {Layout::contiguous, Layout::head_major, Layout::misaligned, Layout::broadcast_rows}) {
      const Case c{shape, DType::bfloat16, layout, true};
      expect_accurate(c, error_with_kernel(c, "cpu_bf16_dot"), "cpu_bf16_dot");
    }
}

// The bfloat16 kernels' direct paths, which read the weight in place. The dot kernel's (batches of
// up to 16 rows): every tile of 1 to 4 rows, reductions with a partial last vector. AMX's (up to 64
// rows against these weights): one and two tiles of rows, full and partial, in one or two 32-row
// chunks; 32-output blocks whose second half is full, partial or absent (K = 700, 33, 48); the
// reduction whole steps only (R*H = 32) or with a partial last one; two blocks whose chunks go to
// different threads (K = 48, R*H = 2048, where the work is enough for threads). Every layout of x
// (R = 1 with rows side by side: the gather's transposed path, 16 rows at a time). Longer batches
// against an 8.5 MB weight: up to 8 chunks, the last partial.
TEST(CpuForwardBf16, ShortBatchesReadTheWeightInPlace) {
  const std::pair<const char*, bool> kernels[] = {{"cpu_bf16_dot", cpu::bf16_dot_supported()},
                                                  {"cpu_amx_bf16", cpu::amx_bf16_supported()}};
  if (!kernels[0].second && !kernels[1].second) GTEST_SKIP() << "neither AVX512-BF16 nor AMX-BF16 here";
  for (const auto& [kernel, supported] : kernels) {
    if (!supported) continue;
    const bool amx = std::string_view(kernel) == "cpu_amx_bf16";
    for (DType dtype : {DType::bfloat16, DType::float16}) {
      if (!amx && dtype == DType::float16) continue;  // AMX only: float16 as bfloat16 parts
      for (std::int64_t B : {1, 2, 3, 5, 7, 13, 16, 17, 31, 32, 33, 48, 64})
        for (Shape shape : {Shape{3, B, 301, 700}, Shape{2, B, 40, 33}, Shape{1, B, 903, 700}, Shape{4, B, 8, 48},
                            Shape{2, B, 1024, 48}})
          for (Layout layout : kLayouts) {
            if (!amx && B > 16) continue;  // packed
            const Case c{shape, dtype, layout, true};
            expect_accurate(c, error_with_kernel(c, kernel), kernel);
          }
      if (amx)
        for (std::int64_t B : {65, 100, 256})
          for (Layout layout : kLayouts) {
            const Case c{{1, B, 4096, 1040}, dtype, layout, true};
            expect_accurate(c, error_with_kernel(c, kernel), kernel);
          }
    }
  }
}

// A single row of A on the direct paths: up to kSingleRowStreamMaxReduction it meets the weight's
// rows one after another, past it four at a time. Reductions at the limit and just past it, with
// and without a scalar tail, whole and partial tiles of weight rows; B = 5 for a single-row tile
// behind a tile of four.
TEST(CpuForwardDirect, SingleRowsOnEitherSideOfTheStreamLimit) {
  static_assert(cpu::kSingleRowStreamMaxReduction == 1024, "the shapes below straddle it");
  for (std::int64_t B : {1, 5})
    for (Shape shape : {Shape{1, B, 1024, 9}, Shape{1, B, 1025, 9}, Shape{3, B, 343, 6}, Shape{2, B, 467, 5},
                        Shape{4, B, 256, 4}})
      for (DType dtype : kDtypes)
        for (Layout layout : {Layout::contiguous, Layout::head_major, Layout::b_unit}) {
          const Case c{shape, dtype, layout, true};
          for (auto level : {cpu::SimdLevel::avx512, cpu::SimdLevel::avx2, cpu::SimdLevel::portable}) {
            if (!cpu::simd_level_supported(level)) continue;
            const double err = error_of(c, [&](Operands& o) {
              cpu::run_gather_gemm(validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view), level,
                                   cpu::GemmPath::direct);
            });
            expect_accurate(c, err, "cpu_gather_gemm direct, level " + std::to_string(static_cast<int>(level)));
          }
          if (dtype == DType::bfloat16 && cpu::bf16_dot_supported())
            expect_accurate(c, error_with_kernel(c, "cpu_bf16_dot"), "cpu_bf16_dot");
        }
}

// The direct path's row quads (float32 and float64 on AVX-512; bfloat16 in the dot kernel, up to
// its 16 rows): whole quads and a last one of 1 to 3 rows, 1 to 4 quads a tile (17 rows: 4 and
// then 1), reductions of whole lanes and of 1 to 7 more elements, weight tiles of 1 to 4 rows; y
// along a unit stride (whole rows of 4 outputs stored at once) and padded ("strided"), with and
// without a bias.
TEST(CpuForwardDirect, RowQuadsEveryQuadCountAndTail) {
  static_assert(cpu::kRowQuadsMinRows == 5 && cpu::kRowQuadsPartialMaxReduction == 128,
                "the shapes below take row quads");
  if (!cpu::simd_level_supported(cpu::SimdLevel::avx512)) GTEST_SKIP() << "no AVX-512 on this processor";
  for (Shape shape : {Shape{3, 5, 7, 9}, Shape{4, 6, 32, 56}, Shape{2, 7, 63, 5}, Shape{1, 8, 1001, 7},
                      Shape{4, 12, 32, 56}, Shape{3, 13, 41, 4}, Shape{2, 16, 258, 3}, Shape{5, 17, 25, 6},
                      Shape{8, 20, 9, 13}, Shape{1, 33, 127, 2}})
    for (DType dtype : {DType::float32, DType::float64})
      for (Layout layout : {Layout::contiguous, Layout::head_major, Layout::strided, Layout::b_unit})
        for (bool bias : {true, false}) {
          const Case c{shape, dtype, layout, bias};
          const double err = error_of(c, [&](Operands& o) {
            cpu::run_gather_gemm(validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view),
                                 cpu::SimdLevel::avx512, cpu::GemmPath::direct);
          });
          expect_accurate(c, err, "cpu_gather_gemm direct, AVX-512");
        }
  if (!cpu::bf16_dot_supported()) return;
  for (Shape shape : {Shape{3, 5, 7, 9}, Shape{4, 6, 32, 56}, Shape{2, 7, 63, 5}, Shape{1, 8, 1001, 7},
                      Shape{4, 12, 32, 56}, Shape{3, 13, 41, 4}, Shape{2, 16, 258, 3}, Shape{1, 9, 123, 6}})
    for (Layout layout : {Layout::contiguous, Layout::head_major, Layout::strided, Layout::b_unit})
      for (bool bias : {true, false}) {
        const Case c{shape, DType::bfloat16, layout, bias};
        expect_accurate(c, error_with_kernel(c, "cpu_bf16_dot"), "cpu_bf16_dot");
      }
}

// The AVX512-BF16 kernel rounds y as the AMX kernel does (H = 2: one pair).
TEST(CpuForwardBf16Dot, RoundsLikeToBfloat16) {
  if (!cpu::bf16_dot_supported()) GTEST_SKIP() << "no AVX512-BF16 on this processor";
  expect_rounded_once<BFloat16>(kBfloat16Cases, 2, [](const Problem& p) { cpu::run_bf16_dot(p); });
}

// The SIMD engine widens 16-bit inputs 16 (AVX-512) or 8 (AVX2) at a time as it packs or reads
// them (16 columns, so that both operands take that path) and, on the packed path, rounds y as
// many at a time.
template <class T, std::size_t N>
void expect_engine_rounds_once(const std::uint16_t (&cases)[N][2]) {
  bool ran = false;
  for (auto level : {cpu::SimdLevel::avx512, cpu::SimdLevel::avx2}) {
    if (!cpu::simd_level_supported(level)) continue;
    for (auto path : kEnginePaths) {
      SCOPED_TRACE(::testing::Message() << "level " << static_cast<int>(level) << " path " << path_name(path));
      expect_rounded_once<T>(cases, 16, [&](const Problem& p) { cpu::run_gather_gemm(p, level, path); });
      ran = true;
    }
  }
  if (!ran) GTEST_SKIP() << "neither AVX-512 nor AVX2 on this processor";
}

TEST(CpuForwardEngine, Float16RoundsLikeToHalf) { expect_engine_rounds_once<Half>(kFloat16Cases); }

TEST(CpuForwardEngine, Bfloat16RoundsLikeToBfloat16) { expect_engine_rounds_once<BFloat16>(kBfloat16Cases); }

// A single row's stride is never used: OpenBLAS's 32-bit interface must not refuse a huge one.
TEST(CpuUnfusedBlas, UnusedStridesMayExceedItsIntegers) {
  const auto kernels = available_kernels();
  if (std::none_of(kernels.begin(), kernels.end(), [](const KernelInfo& k) { return k.name == "cpu_unfused_blas"; }))
    GTEST_SKIP() << "built without OpenBLAS";
  const Case c{{2, 1, 8, 1}, DType::float32, Layout::contiguous, true};
  Operands o = make_operands(c, 5);
  TensorView weight = o.weight.view, y = o.y.view;
  weight.strides[0] = std::int64_t{1} << 40;  // K = 1
  y.strides[0] = std::int64_t{1} << 40;       // B = 1
  Options options;
  options.kernel = "cpu_unfused_blas";
  forward(o.x.view, weight, o.bias_view(), y, options);
  const Problem p = validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view);
  EXPECT_LE(relative_error(o.y, cpu::reference_forward(p), 1, 1), 1e-6);
}

TEST(CpuForwardDeterminism, SameInputsSameBits) {
  const Case c{{8, 200, 64, 300}, DType::float32, Layout::contiguous, true};
  Operands a = make_operands(c, 99), b = make_operands(c, 99);
  forward(a.x.view, a.weight.view, a.bias_view(), a.y.view);
  forward(b.x.view, a.weight.view, a.bias_view(), b.y.view);
  EXPECT_EQ(a.y.storage, b.y.storage);
}

// The exact reference sums blocks of rows by outputs side by side; each output must still be the
// definition's sum in its order, bit for bit, on blocks' edges (B and K around multiples of 4 and
// 8), every layout and a subset of rows in any order.
TEST(CpuReference, BlockedSumsAreTheDefinitionsBitForBit) {
  const Shape shapes[] = {{1, 1, 1, 1}, {3, 5, 7, 9}, {2, 4, 16, 8}, {4, 9, 8, 17}, {2, 13, 3, 31}};
  for (const Shape& s : shapes)
    for (DType dtype : {DType::float32, DType::float64, DType::bfloat16, DType::float16})
      for (Layout layout : {Layout::contiguous, Layout::head_major, Layout::strided, Layout::broadcast_rows,
                            Layout::misaligned, Layout::b_unit})
        for (bool bias : {true, false}) {
          const Case c{s, dtype, layout, bias};
          const Operands o = make_operands(c, 11);
          const auto definition = [&](std::int64_t b, std::int64_t k) {
            double sum = bias ? o.bias.at({k}) : 0.0;
            for (std::int64_t r = 0; r < s.R; ++r)
              for (std::int64_t h = 0; h < s.H; ++h) sum += o.x.at({r, b, h}) * o.weight.at({k, r * s.H + h});
            return sum;
          };
          const Problem p = validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view);
          const std::vector<double> all = cpu::reference_forward(p);
          std::vector<std::int64_t> rows;
          for (std::int64_t b = s.B - 1; b >= 0; b -= 2) rows.push_back(b);
          const std::vector<double> some = cpu::reference_forward_rows(p, rows);
          for (std::int64_t b = 0; b < s.B; ++b)
            for (std::int64_t k = 0; k < s.K; ++k)
              ASSERT_EQ(all[static_cast<std::size_t>(b * s.K + k)], definition(b, k)) << c << " b=" << b << " k=" << k;
          for (std::size_t i = 0; i < rows.size(); ++i)
            for (std::int64_t k = 0; k < s.K; ++k)
              ASSERT_EQ(some[i * static_cast<std::size_t>(s.K) + static_cast<std::size_t>(k)], definition(rows[i], k))
                  << c << " row " << rows[i] << " k=" << k;
        }
}

}  // namespace
}  // namespace gather_linear
