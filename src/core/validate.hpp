// Argument checks shared by every backend: each failure names the argument and gives the
// expected and the actual value, and happens before anything is written.
#pragma once

#include <optional>

#include "core/problem.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear {

// Throws gather_linear::Error (invalid_argument or unsupported) on the first problem found:
// x, weight and bias first (validate_inputs, which leaves the problem's y unset), then y.
Problem validate_inputs(const TensorView& x, const TensorView& weight, const std::optional<TensorView>& bias);
Problem validate_forward_args(const TensorView& x, const TensorView& weight,
                              const std::optional<TensorView>& bias, const TensorView& y);
// backward()'s arguments: x and weight as validate_inputs checks them (but either may have a null
// data pointer where no requested gradient reads it), then grad_y, then each gradient (its shape,
// dtype, device and strides, and that it shares no memory with an input or another gradient).
BackwardProblem validate_backward_args(const TensorView& grad_y, const TensorView& x, const TensorView& weight,
                                       const Gradients& gradients);

}  // namespace gather_linear
