// 16-bit float conversions used by the CPU backend and the tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/numeric.hpp"

namespace gather_linear {
namespace {

TEST(Numeric, HalfRoundTripsEveryNonNanPattern) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const Half h{static_cast<std::uint16_t>(bits)};
    const float f = to_float(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(to_half(f).bits, h.bits) << "pattern 0x" << std::hex << bits;
  }
}

TEST(Numeric, HalfRoundsToNearestEven) {
  EXPECT_EQ(to_half(1.0f + 0x1p-11f).bits, 0x3c00);                // tie, even stays
  EXPECT_EQ(to_half(1.0f + 3 * 0x1p-11f).bits, 0x3c02);            // tie, odd rounds up
  EXPECT_EQ(to_half(65504.0f).bits, 0x7bff);                       // largest finite
  EXPECT_EQ(to_half(65519.0f).bits, 0x7bff);                       // below the halfway point
  EXPECT_EQ(to_half(65520.0f).bits, 0x7c00);                       // rounds to infinity
  EXPECT_EQ(to_half(0x1p-24f).bits, 0x0001);                       // smallest subnormal
  EXPECT_EQ(to_half(0x1p-25f).bits, 0x0000);                       // tie to even zero
  EXPECT_EQ(to_half(-0x1p-14f).bits, 0x8400);                      // smallest normal, negative
  EXPECT_EQ(to_half(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_TRUE(std::isnan(to_float(to_half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Numeric, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(to_bfloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(to_bfloat16(1.0f + 0x1p-8f).bits, 0x3f80);             // tie, even stays
  EXPECT_EQ(to_bfloat16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);         // tie, odd rounds up
  EXPECT_EQ(to_bfloat16(-2.5f).bits, 0xc020);
  EXPECT_TRUE(std::isnan(to_float(to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const BFloat16 b{static_cast<std::uint16_t>(bits)};
    if (!std::isnan(to_float(b))) EXPECT_EQ(to_bfloat16(to_float(b)).bits, b.bits);
  }
}

}  // namespace
}  // namespace gather_linear
