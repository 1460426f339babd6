// The GETT family's host-side rules that need no GPU, so that CI (without one) runs them.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/problem.hpp"
#include "cuda/gett_kernel.hpp"

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

}  // namespace
}  // namespace gather_linear
