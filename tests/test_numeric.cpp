// 16-bit float conversions used by the CPU backend and the tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

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

// A double is rounded to the 16-bit type once, not first to float: 1 + 2^-11 + 2^-30 lies just
// above half-way between the halves 1 and 1 + 2^-10, and the nearest float is that half-way point.
TEST(Numeric, DoublesRoundOnceTo16Bit) {
  EXPECT_EQ(store_as<Half>(1 + 0x1p-11 + 0x1p-30).bits, 0x3c01);
  EXPECT_EQ(store_as<Half>(1 + 0x1p-11).bits, 0x3c00);  // a true tie: to even
  EXPECT_EQ(store_as<Half>(1 + 0x1p-11 - 0x1p-30).bits, 0x3c00);
  EXPECT_EQ(store_as<Half>(-(1 + 0x1p-11 + 0x1p-30)).bits, 0xbc01);
  EXPECT_EQ(store_as<BFloat16>(1 + 0x1p-8 + 0x1p-30).bits, 0x3f81);
  EXPECT_EQ(store_as<BFloat16>(1 + 0x1p-8).bits, 0x3f80);
  EXPECT_EQ(store_as<Half>(0x1p-25 + 0x1p-60).bits, 0x0001);  // above the smallest subnormal's half
  EXPECT_TRUE(std::isinf(to_float(store_as<Half>(1e300))));

  // Against the definition: the nearer of the two neighbouring halves (ties to the even one),
  // for doubles drawn near half-way points across the normal and subnormal ranges.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const auto below = static_cast<std::uint16_t>(rng() % 0x7bff);  // a finite non-negative half
    const double lo = to_float(Half{below}), hi = to_float(Half{static_cast<std::uint16_t>(below + 1)});
    const double v = lo + (hi - lo) * (0.5 + std::ldexp(static_cast<double>(rng() % 2001) - 1000.0, -40));
    const std::uint16_t nearest =
        v - lo < hi - v ? below : v - lo > hi - v ? below + 1 : (below & 1 ? below + 1 : below);
    ASSERT_EQ(store_as<Half>(v).bits, nearest) << std::hexfloat << v;
  }
}

}  // namespace
}  // namespace gather_linear
