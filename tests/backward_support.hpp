// Shared by the CPU and CUDA backward suites: cases (x's layout paired with its gradient's),
// host operands with NaN-poisoned gradients, and their errors against the exact reference.
#pragma once

#include <cmath>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/validate.hpp"
#include "cpu/cpu_kernels.hpp"
#include "test_support.hpp"

namespace gather_linear::testing {

// How x and gradients.x are laid out. Each form of the backward's GEMMs is reached by one:
// slices side by side (head-major), a unit stride in h (contiguous), in b (b_unit), in neither
// (strided), overlapping rows of x (broadcast_rows), pointers one element off (misaligned).
enum class BackwardLayout { contiguous, head_major, b_unit, strided, broadcast_rows, misaligned };

inline const char* layout_name(BackwardLayout l) {
  switch (l) {
    case BackwardLayout::contiguous: return "contiguous";
    case BackwardLayout::head_major: return "head_major";
    case BackwardLayout::b_unit: return "b_unit";
    case BackwardLayout::strided: return "strided";
    case BackwardLayout::broadcast_rows: return "broadcast_rows";
    case BackwardLayout::misaligned: return "misaligned";
  }
  return "?";
}

struct BackwardCase {
  Shape shape;
  DType dtype;
  BackwardLayout x_layout, grad_x_layout;
};

inline std::ostream& operator<<(std::ostream& os, const BackwardCase& c) {
  return os << "R=" << c.shape.R << " B=" << c.shape.B << " H=" << c.shape.H << " K=" << c.shape.K
            << " dtype=" << dtype_name(c.dtype) << " x=" << layout_name(c.x_layout)
            << " grad_x=" << layout_name(c.grad_x_layout);
}

inline std::string case_name(const BackwardCase& c) {
  std::ostringstream os;
  os << "R" << c.shape.R << "_B" << c.shape.B << "_H" << c.shape.H << "_K" << c.shape.K << "_"
     << dtype_name(c.dtype) << "_x_" << layout_name(c.x_layout) << "_dx_" << layout_name(c.grad_x_layout);
  return os.str();
}

// Every shape and dtype with each x layout, each paired with a gradient layout (broadcast rows
// are no layout for an output: that x's gradient is contiguous).
template <class Shapes, class Dtypes>
std::vector<BackwardCase> all_backward_cases(const Shapes& shapes, const Dtypes& dtypes) {
  using L = BackwardLayout;
  const std::pair<L, L> pairs[] = {{L::contiguous, L::contiguous},   {L::head_major, L::head_major},
                                   {L::b_unit, L::strided},          {L::strided, L::b_unit},
                                   {L::broadcast_rows, L::contiguous}, {L::misaligned, L::misaligned}};
  std::vector<BackwardCase> cases;
  for (const Shape& s : shapes)
    for (DType d : dtypes)
      for (auto [x, grad_x] : pairs) cases.push_back({s, d, x, grad_x});
  return cases;
}

inline HostTensor tensor_in_layout(DType dtype, const Shape& s, BackwardLayout layout) {
  const auto [R, B, H, K] = s;
  switch (layout) {
    case BackwardLayout::contiguous: return HostTensor(dtype, {R, B, H}, {B * H, H, 1});
    case BackwardLayout::head_major: return HostTensor(dtype, {R, B, H}, {H, R * H, 1});
    case BackwardLayout::b_unit: return HostTensor(dtype, {R, B, H}, {B * H, 1, B});
    case BackwardLayout::strided: return HostTensor(dtype, {R, B, H}, {B * (2 * H + 3), 2 * H + 3, 2});
    case BackwardLayout::broadcast_rows: return HostTensor(dtype, {R, B, H}, {H, 0, 1});
    case BackwardLayout::misaligned: return HostTensor(dtype, {R, B, H}, {B * H, H, 1}, 1);
  }
  return {};
}

// Inputs seeded, gradients poisoned with NaN (gaps included). Rows of weight, grad_y and the
// weight gradient are padded where x is strided.
struct BackwardOperands {
  HostTensor x, weight, grad_y, grad_x, grad_weight, grad_bias;

  Gradients gradients(bool want_x = true, bool want_weight = true, bool want_bias = true) const {
    Gradients g;
    if (want_x) g.x = grad_x.view;
    if (want_weight) g.weight = grad_weight.view;
    if (want_bias) g.bias = grad_bias.view;
    return g;
  }
};

inline BackwardOperands make_backward_operands(const BackwardCase& c, std::uint32_t seed) {
  const auto [R, B, H, K] = c.shape;
  const std::int64_t RH = R * H;
  const std::int64_t offset = c.x_layout == BackwardLayout::misaligned ? 1 : 0;
  const std::int64_t pad = c.x_layout == BackwardLayout::strided ? 3 : 0;
  BackwardOperands o;
  o.x = tensor_in_layout(c.dtype, c.shape, c.x_layout);
  o.weight = HostTensor(c.dtype, {K, RH}, {RH + pad, 1}, offset);
  o.grad_y = HostTensor(c.dtype, {B, K}, {K + pad, 1}, offset);
  o.grad_x = tensor_in_layout(c.dtype, c.shape, c.grad_x_layout);
  o.grad_weight = HostTensor(c.dtype, {K, RH}, {RH + pad, 1}, offset);
  o.grad_bias = contiguous_tensor(c.dtype, {K}, offset);
  o.x.fill_uniform(seed);
  o.weight.fill_uniform(seed + 1);
  o.grad_y.fill_uniform(seed + 2);
  o.grad_x.fill_nan();
  o.grad_weight.fill_nan();
  o.grad_bias.fill_nan();
  return o;
}

// A call that asked for one GEMM gradient (x's where `want_x`, else weight's) and the bias's,
// with the input that gradient does not read passed as its shape alone: the same bits as the same
// gradients of a call that asked for all three.
inline void expect_requested_gradients_equal(const BackwardOperands& got, const BackwardOperands& all, bool want_x) {
  if (want_x)
    EXPECT_EQ(got.grad_x.storage, all.grad_x.storage);
  else
    EXPECT_EQ(got.grad_weight.storage, all.grad_weight.storage);
  EXPECT_EQ(got.grad_bias.storage, all.grad_bias.storage);
}

// The tolerance a gradient in `dtype` is held to, relative to its largest exact value: float32
// and float64 accuracy, or one unit of the 16-bit output's rounding (sums are float32 there).
inline double backward_tolerance(DType dtype, Fp32Precision precision = Fp32Precision::ieee) {
  if (dtype == DType::bfloat16) return 0x1p-8;
  if (dtype == DType::float16) return 0x1p-11;
  if (dtype == DType::float32 && precision == Fp32Precision::tf32) return 0x1p-8;
  return exact_tolerance(dtype);
}

// Checks every gradient of `o` (computed by the caller) against the exact reference.
inline void expect_gradients_accurate(const BackwardOperands& o, const BackwardCase& c, const std::string& label,
                                      Fp32Precision precision = Fp32Precision::ieee) {
  static RecentResults<cpu::ReferenceGradients> recent;  // the reference once per distinct inputs
  const std::uint64_t key = InputsKey().add(o.grad_y).add(o.x).add(o.weight).value();
  const auto compute = [&] {
    return cpu::reference_backward(validate_backward_args(o.grad_y.view, o.x.view, o.weight.view, o.gradients()));
  };
  const cpu::ReferenceGradients ref = recent.get(
      key, compute, [](const cpu::ReferenceGradients& g) { return g.x.size() + g.weight.size() + g.bias.size(); });
  const double tolerance = backward_tolerance(c.dtype, precision);
  const struct {
    const HostTensor& tensor;
    const std::vector<double>& ref;
    const char* name;
  } checks[] = {{o.grad_x, ref.x, "gradients.x"}, {o.grad_weight, ref.weight, "gradients.weight"},
                {o.grad_bias, ref.bias, "gradients.bias"}};
  for (const auto& check : checks) {
    const double err = relative_error_of_view(check.tensor, check.ref);
    EXPECT_FALSE(std::isnan(err)) << label << " " << c << ": NaN left in " << check.name;
    EXPECT_LE(err, tolerance) << label << " " << c << ": " << check.name;
    EXPECT_TRUE(gaps_untouched(check.tensor)) << label << " " << c << ": wrote outside " << check.name;
  }
}

}  // namespace gather_linear::testing
