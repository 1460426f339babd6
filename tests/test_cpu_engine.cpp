// The CPU gather-GEMM engine on its own (no dispatcher, no CUDA), built with AddressSanitizer
// (tests/CMakeLists.txt): a read or write outside any buffer fails the test even where the result
// comes out right. The shapes and thread counts split packed weight blocks into column groups of
// unequal size, and several blocks follow one another, which is where the engine's scratch
// bounds matter. Also the task split itself, and the backward's independence of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backward_support.hpp"
#include "core/kernel_registry.hpp"
#include "core/validate.hpp"
#include "cpu/block_tasks.hpp"
#include "cpu/cpu_kernels.hpp"
#include "test_support.hpp"

namespace gather_linear {
namespace {

using namespace gather_linear::testing;

// Each run on a thread of its own: the engine's scratch buffers belong to the calling thread and
// only grow, so one left larger by an earlier run would hide an overrun from the sanitizer. The
// direct path's tiles of 4 weight rows by 4, 3, 2 or 1 rows of A, with reduction tails, too (and
// a single row against a weight of over 1 MB: few flops, but threads for its bytes; and against
// short weight rows, 16 at a time with a last tile of 6), and row blocks of every size, with
// tiles of 4 and of 2 weight rows, or on AVX2 in float64 of 3 (the last shape). The packed path's
// short last tiles: one row of B and 8 of K's columns (the one before last). The weight-rows path's
// last panel of A's rows holds 25 (float64: 9) of its 32 (16) and its last weight tile 5 rows of
// 12, copied out with zeros after them (the last but one shape); elsewhere 1 to 12 rows of a panel
// and 4 of a tile.
TEST(CpuEngineAsan, EnginePathsStayInsideTheirBuffers) {
  for (int threads : {1, 2, 3, 4, 7}) {
    for (Shape shape : {Shape{12, 8, 128, 1024}, Shape{4, 300, 512, 700}, Shape{3, 5, 1000, 1500}, Shape{3, 7, 33, 70},
                        Shape{2, 1, 300, 500}, Shape{3, 1, 29, 70}, Shape{4, 97, 64, 40}, Shape{3, 57, 40, 101},
                        Shape{5, 37, 19, 6}}) {
      for (DType dtype : {DType::float32, DType::float64}) {
        for (Layout layout : {Layout::head_major, Layout::strided, Layout::b_unit}) {
          for (auto path : kEnginePaths) {
            const Case c{shape, dtype, layout, true};
            Operands o = make_operands(c, 5);
            const Problem p = validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view);
            std::thread([&] {
              omp_set_num_threads(threads);
              cpu::run_gather_gemm(p, cpu::SimdLevel::best, path);
            }).join();
            const std::string what = std::string(path_name(path)) + " with " +
                                     std::to_string(threads) + " threads";
            EXPECT_LE(relative_error(o.y, reference_of(o), p.B, p.K), exact_tolerance(dtype))
                << c << " " << what;
            EXPECT_TRUE(gaps_untouched(o.y)) << c << " " << what << ": wrote outside y's view";
          }
        }
      }
    }
  }
}

// The bfloat16 kernels' packing, gathering and epilogue (AMX's tile loads and stores are inline
// assembly, which the sanitizer does not see): several weight blocks, tasks split by outputs,
// padded rows, reductions of whole and odd slices, and each gather: x's slices along a unit
// stride, strided (the dot kernel's element-wise gather) and side by side.
TEST(CpuEngineAsan, Bf16KernelsStayInsideTheirBuffers) {
  struct Kernel {
    const char* name;
    bool supported;
    void (*run)(const Problem&);
  };
  const Kernel kernels[] = {{"cpu_amx_bf16", cpu::amx_bf16_supported(), cpu::run_amx_bf16},
                            {"cpu_bf16_dot", cpu::bf16_dot_supported(), cpu::run_bf16_dot}};
  if (!kernels[0].supported && !kernels[1].supported) GTEST_SKIP() << "neither AMX-BF16 nor AVX512-BF16 here";
  for (const Kernel& kernel : kernels) {
    if (!kernel.supported) continue;
    for (int threads : {1, 3}) {
      // the last three take the dot kernel's direct path (a short batch; the last on threads for
      // its weight's bytes alone), and all but the first two AMX's (the sanitizer sees its
      // gathers, copies and stores, not its tile loads)
      for (Shape shape : {Shape{2, 200, 1024, 2500}, Shape{3, 45, 67, 90}, Shape{3, 5, 501, 70}, Shape{4, 13, 32, 56},
                          Shape{3, 7, 301, 700}, Shape{2, 3, 40, 33}, Shape{3, 1, 301, 700}}) {
        for (Layout layout : {Layout::head_major, Layout::strided, Layout::misaligned, Layout::b_unit}) {
          const Case c{shape, DType::bfloat16, layout, true};
          Operands o = make_operands(c, 5);
          const Problem p = validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view);
          std::thread([&] {
            omp_set_num_threads(threads);
            kernel.run(p);
          }).join();
          const std::string what = std::string(kernel.name) + " with " + std::to_string(threads) + " threads";
          // float32 sums of products of bfloat16 inputs, then one rounding to bfloat16
          EXPECT_LE(relative_error(o.y, reference_of(o), p.B, p.K), 0x1p-7) << c << " " << what;
          EXPECT_TRUE(gaps_untouched(o.y)) << c << " " << what << ": wrote outside y's view";
        }
      }
    }
  }
}

// The backward's transposed views: strided packing of both operands and strided stores, in the
// packed and the direct paths (gradients.x reduces over K, gradients.weight over B), and in
// bfloat16 on AMX where the processor has it.
TEST(CpuEngineAsan, BackwardStaysInsideItsBuffers) {
  for (int threads : {1, 3}) {
    for (Shape shape : {Shape{4, 300, 64, 700}, Shape{3, 5, 7, 9}, Shape{2, 700, 300, 3}}) {
      for (auto [x_layout, grad_x_layout] : {std::pair{BackwardLayout::contiguous, BackwardLayout::contiguous},
                                             std::pair{BackwardLayout::head_major, BackwardLayout::head_major},
                                             std::pair{BackwardLayout::b_unit, BackwardLayout::strided},
                                             std::pair{BackwardLayout::strided, BackwardLayout::b_unit}}) {
        // float16: the engine's widening; bfloat16: AMX's transposed packing, where usable
        for (DType dtype : {DType::float32, DType::float16, DType::bfloat16}) {
          const BackwardCase c{shape, dtype, x_layout, grad_x_layout};
          BackwardOperands o = make_backward_operands(c, 5);
          const BackwardProblem p = validate_backward_args(o.grad_y.view, o.x.view, o.weight.view, o.gradients());
          std::thread([&] {
            omp_set_num_threads(threads);
            cpu::run_backward(p);
          }).join();
          expect_gradients_accurate(o, c, std::to_string(threads) + " threads");
        }
      }
    }
  }
}

// The engines' task split: every (row, panel) exactly once, blocks cut on granules and no longer
// than row_block, and, on several threads, blocks within one granule of one another; with
// same_threads, each task on the same thread in two calls.
TEST(CpuBlockTasks, EveryRowOnceInNearEqualBlocks) {
  constexpr std::int64_t kRowBlock = 96, kGranule = 12;
  for (bool same_threads : {false, true})
    for (int threads : {1, 2, 3, 7})
      for (std::int64_t B : {1, 5, 12, 100, 1000, 1024})
        for (std::int64_t panels : {1, 5, 32})
          for (std::int64_t groups : {1, 2, 3}) {
            if (groups > panels) continue;
            std::vector<int> visits(static_cast<std::size_t>(B * panels), 0);
            std::vector<std::int64_t> block_granules;
            std::map<std::pair<std::int64_t, std::int64_t>, int> thread_of_task[2];
            std::mutex mutex;
            std::thread([&] {
              omp_set_num_threads(threads);
              for (int call = 0; call < 2; ++call)
                cpu::for_each_block_task(
                    B, kRowBlock, kGranule, panels, groups, threads > 1, same_threads,
                    [&](std::int64_t b0, int rows, std::int64_t first_panel, std::int64_t n) {
                      const std::lock_guard lock(mutex);
                      thread_of_task[call][{b0, first_panel}] = omp_get_thread_num();
                      if (call == 1) return;
                      EXPECT_EQ(b0 % kGranule, 0) << "block at row " << b0;
                      EXPECT_LE(rows, kRowBlock);
                      if (first_panel == 0) block_granules.push_back((rows + kGranule - 1) / kGranule);
                      for (std::int64_t b = b0; b < b0 + rows; ++b)
                        for (std::int64_t q = first_panel; q < first_panel + n; ++q)
                          ++visits[static_cast<std::size_t>(b * panels + q)];
                    });
            }).join();
            const std::string where = "B " + std::to_string(B) + ", " + std::to_string(panels) + " panels in " +
                                      std::to_string(groups) + " groups, " + std::to_string(threads) + " threads" +
                                      (same_threads ? ", same threads" : "");
            EXPECT_TRUE(std::all_of(visits.begin(), visits.end(), [](int v) { return v == 1; })) << where;
            if (threads > 1) {
              const auto [fewest, most] = std::minmax_element(block_granules.begin(), block_granules.end());
              EXPECT_LE(*most - *fewest, 1) << where;
            }
            EXPECT_EQ(thread_of_task[0].size(), thread_of_task[1].size()) << where;
            if (same_threads) EXPECT_EQ(thread_of_task[0], thread_of_task[1]) << where;
          }
}

// The backward's result does not depend on the thread count: each output's sum runs in one order
// (the GEMMs' slices, the bias's rows) however the work is shared out.
TEST(CpuBackwardThreads, SameBitsOnOneThreadAndSeveral) {
  for (DType dtype : {DType::float32, DType::bfloat16}) {
    const BackwardCase c{{8, 300, 64, 300}, dtype, BackwardLayout::contiguous, BackwardLayout::contiguous};
    BackwardOperands one = make_backward_operands(c, 21), several = make_backward_operands(c, 21);
    for (auto [o, threads] : {std::pair{&one, 1}, std::pair{&several, 3}}) {
      const BackwardProblem p =
          validate_backward_args(o->grad_y.view, o->x.view, o->weight.view, o->gradients());
      std::thread([&, threads = threads] {
        omp_set_num_threads(threads);
        cpu::run_backward(p);
      }).join();
    }
    EXPECT_EQ(one.grad_x.storage, several.grad_x.storage) << c;
    EXPECT_EQ(one.grad_weight.storage, several.grad_weight.storage) << c;
    EXPECT_EQ(one.grad_bias.storage, several.grad_bias.storage) << c;
  }
}

}  // namespace
}  // namespace gather_linear
