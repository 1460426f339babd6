// Shared by the CPU and CUDA backward suites: cases (x's layout paired with its gradient's),
// host operands with NaN-poisoned gradients, and their errors against the exact reference.
#pragma once

#include <cmath>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/validate.hpp"
#include "cpu/cpu_kernels.hpp"
#include "random_problems.hpp"
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
  const double tolerance = rounding_tolerance(c.dtype, precision);
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

// A random backward problem (random_problems.hpp's draws, half of them aligned): x and weight as
// a forward's, grad_y's rows padded now and then, x's gradient in its own random layout (its
// elements kept apart), and a random non-empty subset of the three gradients requested;
// gradients poisoned with NaN.
struct RandomBackwardProblem {
  Shape shape;
  BackwardOperands operands;
  bool want_x = true, want_weight = true, want_bias = true;
  std::string description;

  // An input that no requested gradient reads comes, half the time, as its shape alone (a null
  // data pointer), as autograd passes it.
  bool shape_alone = false;

  Gradients requested() const { return operands.gradients(want_x, want_weight, want_bias); }
  // x and weight as the call gets them, over the host's copies or the device's.
  TensorView x_argument(TensorView x) const { return without_data_if(x, shape_alone && !want_weight); }
  TensorView weight_argument(TensorView weight) const { return without_data_if(weight, shape_alone && !want_x); }

 private:
  static TensorView without_data_if(TensorView v, bool shape_only) {
    if (shape_only) v.data = nullptr;
    return v;
  }
};

inline RandomBackwardProblem random_backward_problem(std::uint32_t seed, DType dtype, std::int64_t max_multiply_adds) {
  RandomStart start(seed, dtype, max_multiply_adds);
  auto& [draw, aligned, shape, description, x, weight] = start;
  const auto [R, B, H, K] = shape;
  RandomBackwardProblem p;
  p.shape = shape;
  BackwardOperands& o = p.operands;
  o.x = std::move(x);
  o.weight = std::move(weight);
  o.grad_y = random_rows(draw, dtype, B, K, aligned, false, description, "grad_y");
  o.grad_x = random_rbh_tensor(draw, dtype, shape, aligned, false, description, "gradients.x");
  o.grad_weight = random_rows(draw, dtype, K, R * H, aligned, false, description, "gradients.weight");
  const std::int64_t bias_offset = aligned ? 0 : draw.sometimes_a_few();
  o.grad_bias = contiguous_tensor(dtype, {K}, bias_offset);
  do {
    p.want_x = draw.chance(0.75);
    p.want_weight = draw.chance(0.75);
    p.want_bias = draw.chance(0.75);
  } while (!p.want_x && !p.want_weight && !p.want_bias);
  p.shape_alone = (!p.want_x || !p.want_weight) && draw.chance(0.5);
  description << " gradients.bias offset " << bias_offset << "; requested:" << (p.want_x ? " x" : "")
              << (p.want_weight ? " weight" : "") << (p.want_bias ? " bias" : "")
              << (p.shape_alone ? "; unread inputs as shapes alone" : "");
  o.grad_y.fill_uniform(seed * 4 + 3);
  o.grad_x.fill_nan();
  o.grad_weight.fill_nan();
  o.grad_bias.fill_nan();
  p.description = description.str();
  return p;
}

// The requested gradients of p (computed by the caller, into p.operands) against the exact
// reference; the others must have kept their poison.
inline void expect_random_gradients_accurate(const RandomBackwardProblem& p, DType dtype, const std::string& label,
                                             Fp32Precision precision = Fp32Precision::ieee) {
  const BackwardOperands& o = p.operands;
  const cpu::ReferenceGradients ref =
      cpu::reference_backward(validate_backward_args(o.grad_y.view, o.x.view, o.weight.view, o.gradients()));
  const struct {
    const HostTensor& tensor;
    const std::vector<double>& ref;
    bool requested;
    const char* name;
  } checks[] = {{o.grad_x, ref.x, p.want_x, "gradients.x"},
                {o.grad_weight, ref.weight, p.want_weight, "gradients.weight"},
                {o.grad_bias, ref.bias, p.want_bias, "gradients.bias"}};
  for (const auto& check : checks) {
    if (!check.requested) {
      EXPECT_FALSE(first_unpoisoned(check.tensor).has_value()) << label << " " << p.description << ": wrote "
                                                               << check.name << ", which was not requested";
      continue;
    }
    const double err = relative_error_of_view(check.tensor, check.ref);
    EXPECT_FALSE(std::isnan(err)) << label << " " << p.description << ": NaN left in " << check.name;
    EXPECT_LE(err, rounding_tolerance(dtype, precision)) << label << " " << p.description << ": " << check.name;
    EXPECT_TRUE(gaps_untouched(check.tensor)) << label << " " << p.description << ": wrote outside " << check.name;
  }
}

}  // namespace gather_linear::testing
