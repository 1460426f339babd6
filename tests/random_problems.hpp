// Random problems for differential tests against the exact reference. The sweeps list chosen
// shapes and six layouts; these draw sizes log-uniformly across the dispatcher's boundaries and
// layouts no sweep lists: x's dimensions stored in any order, padded, with zero strides and
// storage offsets; weight rows padded or overlapping; y and gradient rows padded; bias or none.
// A problem follows from its seed alone (std::mt19937_64 is specified bit for bit, and no std
// distribution is used: theirs differ between standard libraries), so a failure names its seed.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "test_support.hpp"

namespace gather_linear::testing {

class Draw {
 public:
  explicit Draw(std::uint64_t seed) : engine_(seed) {}
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(engine_() % static_cast<std::uint64_t>(n)); }
  double unit() { return static_cast<double>(engine_() >> 11) * 0x1p-53; }
  bool chance(double p) { return unit() < p; }
  // lo..hi with as many draws between 1 and 10 as between 100 and 1000.
  std::int64_t log_uniform(std::int64_t lo, std::int64_t hi) {
    const double l = std::log(static_cast<double>(lo)), h = std::log(static_cast<double>(hi) + 1);
    return std::clamp(static_cast<std::int64_t>(std::exp(l + unit() * (h - l))), lo, hi);
  }
  // 0 now and then (an empty dimension), else up to hi, half the time a multiple of `granule`
  // (16-byte chunks of 16-bit slices and rows, which the vector and tensor-core kernels need).
  std::int64_t extent(std::int64_t hi, std::int64_t granule) {
    if (chance(0.02)) return 0;
    return chance(0.5) ? granule * log_uniform(1, hi / granule) : log_uniform(1, hi);
  }
  // 0 most of the time, else 1 to 8 elements (padding, or an offset off vector boundaries); with
  // `aligned`, 8 or 16 (whole 16-byte chunks of 16-bit elements).
  std::int64_t sometimes_a_few(bool aligned = false) {
    if (!chance(0.3)) return 0;
    return aligned ? 8 * (1 + below(2)) : 1 + below(8);
  }

 private:
  std::mt19937_64 engine_;
};

// An (R, B, H) tensor (x, or x's gradient) with its dimensions stored in a random order, each
// padded now and then, every element `step` apart (1, or 2 now and then), starting a few elements
// into its storage now and then; with `zero_strides`, rows (or slices) sometimes all the same.
// `aligned` keeps what the vector and tensor-core kernels need: h innermost with unit stride,
// padding and offsets in whole 16-byte chunks of 16-bit elements.
inline HostTensor random_rbh_tensor(Draw& draw, DType dtype, const Shape& s, bool aligned, bool zero_strides,
                                    std::ostringstream& description, const char* name) {
  // Innermost dimension first: 0 = r, 1 = b, 2 = h. Contiguous and head-major are the common ones.
  constexpr std::array<std::array<int, 3>, 6> kOrders = {{{2, 1, 0}, {2, 0, 1}, {1, 2, 0}, {1, 0, 2}, {0, 2, 1}, {0, 1, 2}}};
  const auto& order = draw.chance(0.35)                 ? kOrders[0]
                      : aligned || draw.chance(0.4)     ? kOrders[1]
                                                        : kOrders[draw.below(6)];
  const std::array<std::int64_t, 3> sizes = {s.R, s.B, s.H};
  std::array<std::int64_t, 3> strides{};
  std::int64_t running = !aligned && draw.chance(0.1) ? 2 : 1;
  for (int d : order) {
    strides[d] = running;
    running *= std::max<std::int64_t>(sizes[d], 1) + draw.sometimes_a_few(aligned);
  }
  if (zero_strides && draw.chance(0.05)) strides[1] = 0;  // every row of the concatenation the same
  if (zero_strides && draw.chance(0.03)) strides[0] = 0;  // every slice the same
  const std::int64_t offset = aligned ? 0 : draw.sometimes_a_few();
  description << " " << name << " strides (" << strides[0] << ", " << strides[1] << ", " << strides[2]
              << ") offset " << offset;
  return HostTensor(dtype, {sizes[0], sizes[1], sizes[2]}, {strides[0], strides[1], strides[2]}, offset);
}

// A (rows, columns) tensor with unit inner stride: rows padded now and then, or with `overlap`
// now and then closer than a row apart (a weight may be); a few elements into its storage now
// and then. `aligned`: padding, overlap and offset in whole 16-byte chunks of 16-bit elements.
inline HostTensor random_rows(Draw& draw, DType dtype, std::int64_t rows, std::int64_t columns, bool aligned,
                              bool overlap, std::ostringstream& description, const char* name) {
  std::int64_t row_stride = columns + draw.sometimes_a_few(aligned);
  if (overlap && draw.chance(0.04)) row_stride = aligned ? 8 * draw.below(columns / 8 + 1) : draw.below(columns + 1);
  const std::int64_t offset = aligned ? 0 : draw.sometimes_a_few();
  description << " " << name << " row stride " << row_stride << " offset " << offset;
  return HostTensor(dtype, {rows, columns}, {row_stride, 1}, offset);
}

// Sizes: R to 64, B and K to 8192, H to 512 (with `aligned` in whole 16-byte chunks of 16-bit
// elements, a third of the time whole 64-element tiles), halved (the largest first, keeping H's
// chunks) until R·B·H·K is at most max_multiply_adds.
inline Shape random_shape(Draw& draw, bool aligned, std::int64_t max_multiply_adds) {
  const std::int64_t R = draw.chance(0.02) ? 0 : draw.log_uniform(1, 64);
  const std::int64_t H = !aligned ? draw.extent(512, 8) : draw.chance(0.33) ? 64 * draw.log_uniform(1, 8)
                                                                            : 8 * draw.log_uniform(1, 64);
  Shape s{R, draw.extent(8192, 8), H, draw.extent(8192, 8)};
  while (s.R * s.B * s.H * s.K > max_multiply_adds) {
    std::int64_t* largest = &s.B;
    for (std::int64_t* e : {&s.K, &s.H, &s.R})
      if (*e > *largest && !(aligned && e == &s.H && *e <= 8)) largest = e;
    *largest = aligned && largest == &s.H ? (*largest / 16) * 8 : (*largest + 1) / 2;
  }
  return s;
}

// What every random problem begins with: its draws (from the seed alone), whether it is
// `aligned` (half of them, so that the vector and tensor-core kernels get their share: see
// random_rbh_tensor), its shape, x and weight (filled), and the head of its description.
struct RandomStart {
  Draw draw;
  bool aligned;
  Shape shape;
  std::ostringstream description;
  HostTensor x, weight;

  RandomStart(std::uint32_t seed, DType dtype, std::int64_t max_multiply_adds)
      : draw(seed), aligned(draw.chance(0.5)), shape(random_shape(draw, aligned, max_multiply_adds)) {
    description << "seed " << seed << ": R=" << shape.R << " B=" << shape.B << " H=" << shape.H << " K=" << shape.K
                << " " << dtype_name(dtype);
    x = random_rbh_tensor(draw, dtype, shape, aligned, true, description, "x");
    weight = random_rows(draw, dtype, shape.K, shape.R * shape.H, aligned, true, description, "weight");
    x.fill_uniform(seed * 4 + 1);
    weight.fill_uniform(seed * 4 + 2);
  }
};

struct RandomForwardProblem {
  Shape shape;
  Operands operands;  // y poisoned with NaN
  std::string description;
};

inline RandomForwardProblem random_forward_problem(std::uint32_t seed, DType dtype, std::int64_t max_multiply_adds) {
  RandomStart start(seed, dtype, max_multiply_adds);
  auto& [draw, aligned, shape, description, x, weight] = start;
  RandomForwardProblem p;
  p.shape = shape;
  Operands& o = p.operands;
  o.x = std::move(x);
  o.weight = std::move(weight);
  o.y = random_rows(draw, dtype, shape.B, shape.K, aligned, false, description, "y");
  if (draw.chance(0.8)) {
    const std::int64_t offset = aligned ? 0 : draw.sometimes_a_few();
    o.bias = contiguous_tensor(dtype, {shape.K}, offset);
    description << " bias offset " << offset;
  } else {
    description << " no bias";
  }
  if (!o.bias.storage.empty()) o.bias.fill_uniform(seed * 4 + 3);
  o.y.fill_nan();
  p.description = description.str();
  return p;
}

// The GPU tests' modes, taken in turn: exact float32, TF32, float64, float16, bfloat16.
struct RandomMode {
  DType dtype;
  Fp32Precision precision;
};
inline constexpr RandomMode kRandomModes[] = {{DType::float32, Fp32Precision::ieee},
                                              {DType::float32, Fp32Precision::tf32},
                                              {DType::float64, Fp32Precision::ieee},
                                              {DType::float16, Fp32Precision::ieee},
                                              {DType::bfloat16, Fp32Precision::ieee}};

// The tolerance a result in `dtype` is held to, relative to its largest exact value: float32
// and float64 accuracy; or one unit of the 16-bit output's rounding, or of TF32's rounded inputs,
// plus 2^-16 for the float32 sums beneath (a half-unit rounding of an output near the largest
// would otherwise leave them no room).
inline double rounding_tolerance(DType dtype, Fp32Precision precision = Fp32Precision::ieee) {
  constexpr double kFloat32Sums = 0x1p-16;
  if (dtype == DType::bfloat16) return 0x1p-8 + kFloat32Sums;
  if (dtype == DType::float16) return 0x1p-11 + kFloat32Sums;
  if (dtype == DType::float32 && precision == Fp32Precision::tf32) return 0x1p-8 + kFloat32Sums;
  return exact_tolerance(dtype);
}

// How often each kernel ran, for the log and for a check that the draws reach the kernels they
// are meant to.
class KernelTally {
 public:
  void add(std::string_view kernel) { ++counts_[std::string(kernel)]; }
  // Whether a kernel whose tallied name begins with `prefix` ran (a family: "cuda_gett_sm90/").
  bool reached(std::string_view prefix) const {
    const auto it = counts_.lower_bound(std::string(prefix));
    return it != counts_.end() && std::string_view(it->first).starts_with(prefix);
  }
  std::string str() const {
    std::ostringstream os;
    for (const auto& [kernel, count] : counts_) os << " " << kernel << " x" << count;
    return os.str();
  }

 private:
  std::map<std::string, int> counts_;
};

}  // namespace gather_linear::testing
