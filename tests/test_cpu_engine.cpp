// The CPU gather-GEMM engine on its own (no dispatcher, no CUDA), built with AddressSanitizer
// (tests/CMakeLists.txt): a read or write outside any buffer fails the test even where the result
// comes out right. The shapes and thread counts split packed weight blocks into column groups of
// unequal size, and several blocks follow one another, which is where the engine's scratch
// bounds matter.
#include <gtest/gtest.h>
#include <omp.h>

#include <thread>

#include "core/validate.hpp"
#include "cpu/cpu_kernels.hpp"
#include "test_support.hpp"

namespace gather_linear {
namespace {

using namespace gather_linear::testing;

// Each run on a thread of its own: the engine's scratch buffers belong to the calling thread and
// only grow, so one left larger by an earlier run would hide an overrun from the sanitizer.
TEST(CpuEngineAsan, PackedPathStaysInsideItsBuffers) {
  for (int threads : {1, 2, 3, 4, 7}) {
    for (Shape shape : {Shape{12, 8, 128, 1024}, Shape{4, 300, 512, 700}, Shape{3, 5, 1000, 1500}}) {
      for (DType dtype : {DType::float32, DType::float64}) {
        for (Layout layout : {Layout::head_major, Layout::strided}) {
          const Case c{shape, dtype, layout, true};
          Operands o = make_operands(c, 5);
          const Problem p = validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view);
          std::thread([&] {
            omp_set_num_threads(threads);
            cpu::run_gather_gemm(p, cpu::SimdLevel::best, cpu::GemmPath::packed);
          }).join();
          EXPECT_LE(relative_error(o.y, cpu::reference_forward(p), p.B, p.K), exact_tolerance(dtype))
              << c << " with " << threads << " threads";
          EXPECT_TRUE(gaps_untouched(o.y)) << c << " with " << threads << " threads: wrote outside y's view";
        }
      }
    }
  }
}

}  // namespace
}  // namespace gather_linear
