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
                   load_as<double>(w_row[r * p.H + h]);
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
        y[b * p.y_stride_b + k] = store_as<In>(exact[static_cast<std::size_t>(b * p.K + k)]);
  });
}

}  // namespace gather_linear::cpu
