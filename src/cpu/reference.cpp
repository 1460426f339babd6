// The exact reference, straight from the definition:
//   y[b, k] = bias[k] + sum_r sum_h x[r, b, h] * W[k, r*H + h]    (double accumulation)
#include <numeric>
#include <span>
#include <vector>

#include "core/numeric.hpp"
#include "cpu/cpu_kernels.hpp"

namespace gather_linear::cpu {

std::vector<double> reference_forward(const Problem& p) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(p.B));
  std::iota(rows.begin(), rows.end(), std::int64_t{0});
  return reference_forward_rows(p, rows);
}

std::vector<double> reference_forward_rows(const Problem& p, std::span<const std::int64_t> rows) {
  std::vector<double> out(rows.size() * static_cast<std::size_t>(p.K));
  visit_floating_dtype(p.dtype, [&]<class In>() {
    const In* x = static_cast<const In*>(p.x);
    const In* weight = static_cast<const In*>(p.weight);
    const In* bias = static_cast<const In*>(p.bias);
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (std::int64_t k = 0; k < p.K; ++k) {
        const std::int64_t b = rows[i];
        double sum = bias ? load_as<double>(bias[k]) : 0.0;
        const In* w_row = weight + k * p.weight_stride_k;
        for (std::int64_t r = 0; r < p.R; ++r)
          for (std::int64_t h = 0; h < p.H; ++h)
            sum += load_as<double>(x[r * p.x_stride_r + b * p.x_stride_b + h * p.x_stride_h]) *
                   load_as<double>(w_row[(r * p.H + h) * p.weight_stride_c]);
        out[i * static_cast<std::size_t>(p.K) + static_cast<std::size_t>(k)] = sum;
      }
  });
  return out;
}

void run_reference(const Problem& p) {
  const std::vector<double> exact = reference_forward(p);
  visit_floating_dtype(p.dtype, [&]<class In>() {
    In* y = static_cast<In*>(p.y);
    for (std::int64_t b = 0; b < p.B; ++b)
      for (std::int64_t k = 0; k < p.K; ++k)
        y[b * p.y_stride_b + k * p.y_stride_k] = store_as<In>(exact[static_cast<std::size_t>(b * p.K + k)]);
  });
}

ReferenceGradients reference_backward(const BackwardProblem& bp) {
  const Problem& p = bp.forward;
  ReferenceGradients g;
  g.x.assign(static_cast<std::size_t>(p.R * p.B * p.H), 0.0);
  g.weight.assign(static_cast<std::size_t>(p.K * p.RH), 0.0);
  g.bias.assign(static_cast<std::size_t>(p.K), 0.0);
  visit_floating_dtype(p.dtype, [&]<class In>() {
    const In* x = static_cast<const In*>(p.x);
    const In* weight = static_cast<const In*>(p.weight);
    const In* grad_y = static_cast<const In*>(bp.grad_y);
    const auto dy = [&](std::int64_t b, std::int64_t k) { return load_as<double>(grad_y[b * bp.grad_y_stride_b + k]); };
    for (std::int64_t r = 0; r < p.R; ++r)
      for (std::int64_t b = 0; b < p.B; ++b)
        for (std::int64_t h = 0; h < p.H; ++h) {
          double sum = 0;
          for (std::int64_t k = 0; k < p.K; ++k)
            sum += dy(b, k) * load_as<double>(weight[k * p.weight_stride_k + r * p.H + h]);
          g.x[static_cast<std::size_t>((r * p.B + b) * p.H + h)] = sum;
        }
    for (std::int64_t k = 0; k < p.K; ++k)
      for (std::int64_t r = 0; r < p.R; ++r)
        for (std::int64_t h = 0; h < p.H; ++h) {
          double sum = 0;
          for (std::int64_t b = 0; b < p.B; ++b)
            sum += dy(b, k) * load_as<double>(x[r * p.x_stride_r + b * p.x_stride_b + h * p.x_stride_h]);
          g.weight[static_cast<std::size_t>(k * p.RH + r * p.H + h)] = sum;
        }
    for (std::int64_t k = 0; k < p.K; ++k)
      for (std::int64_t b = 0; b < p.B; ++b) g.bias[static_cast<std::size_t>(k)] += dy(b, k);
  });
  return g;
}

}  // namespace gather_linear::cpu
