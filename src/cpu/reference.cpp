// The exact references, from the definitions, in double:
//   y[b, k]       = bias[k] + sum_r sum_h x[r, b, h] * W[k, r*H + h]
//   grad_x[r,b,h] = sum_k grad_y[b, k] * W[k, r*H + h]
//   grad_W[k, c]  = sum_b grad_y[b, k] * x[r, b, h]      (c = r*H + h)
//   grad_bias[k]  = sum_b grad_y[b, k]
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "core/numeric.hpp"
#include "cpu/cpu_kernels.hpp"

namespace gather_linear::cpu {
namespace {

// sum(i, j) = first(i, j) + a_rows[i][a_offsets[t]] * b_rows[j][b_offsets[t]] added for t = 0, 1, ...
// in that order, handed to store(i, j, sum). A block of 4 i by 8 j is summed side by side:
// independent chains of adds hide each add's latency, and each element loaded (and widened) serves
// several sums. The bits are those of one sum at a time; a test's references for the GPU's largest
// problems are billions of multiply-adds.
template <class In, class First, class Store>
void dot_products_in_order(std::span<const In* const> a_rows, std::span<const std::int64_t> a_offsets,
                           std::span<const In* const> b_rows, std::span<const std::int64_t> b_offsets, First first,
                           Store store) {
  constexpr std::size_t kRowsTogether = 4, kColumnsTogether = 8;
  const auto sum_block = [&]<std::size_t Rows, std::size_t Columns>(std::size_t i0, std::size_t j0) {
    double sums[Rows][Columns];
    for (std::size_t i = 0; i < Rows; ++i)
      for (std::size_t j = 0; j < Columns; ++j) sums[i][j] = first(i0 + i, j0 + j);
    for (std::size_t t = 0; t < a_offsets.size(); ++t) {
      double a[Rows], b[Columns];
      for (std::size_t i = 0; i < Rows; ++i) a[i] = load_as<double>(a_rows[i0 + i][a_offsets[t]]);
      for (std::size_t j = 0; j < Columns; ++j) b[j] = load_as<double>(b_rows[j0 + j][b_offsets[t]]);
      for (std::size_t i = 0; i < Rows; ++i)
        for (std::size_t j = 0; j < Columns; ++j) sums[i][j] += a[i] * b[j];
    }
    for (std::size_t i = 0; i < Rows; ++i)
      for (std::size_t j = 0; j < Columns; ++j) store(i0 + i, j0 + j, sums[i][j]);
  };
  const auto sum_rows = [&]<std::size_t Rows>(std::size_t i0) {
    std::size_t j = 0;
    for (; j + kColumnsTogether <= b_rows.size(); j += kColumnsTogether)
      sum_block.template operator()<Rows, kColumnsTogether>(i0, j);
    for (; j < b_rows.size(); ++j) sum_block.template operator()<Rows, 1>(i0, j);
  };
  std::size_t i = 0;
  for (; i + kRowsTogether <= a_rows.size(); i += kRowsTogether) sum_rows.template operator()<kRowsTogether>(i);
  for (; i < a_rows.size(); ++i) sum_rows.template operator()<1>(i);
}

// Element offsets i * stride for i < count.
std::vector<std::int64_t> strided_offsets(std::int64_t count, std::int64_t stride) {
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) offsets[static_cast<std::size_t>(i)] = i * stride;
  return offsets;
}

// x's element offset for each column c = r*H + h of the concatenation (its row b's aside).
std::vector<std::int64_t> concatenation_offsets(const Problem& p) {
  std::vector<std::int64_t> offsets;
  offsets.reserve(static_cast<std::size_t>(p.RH));
  for (std::int64_t r = 0; r < p.R; ++r)
    for (std::int64_t h = 0; h < p.H; ++h) offsets.push_back(r * p.x_stride_r + h * p.x_stride_h);
  return offsets;
}

template <class In>
std::vector<const In*> row_pointers(const void* base, std::span<const std::int64_t> offsets) {
  std::vector<const In*> rows;
  rows.reserve(offsets.size());
  for (std::int64_t offset : offsets) rows.push_back(static_cast<const In*>(base) + offset);
  return rows;
}

}  // namespace

std::vector<double> reference_forward(const Problem& p) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(p.B));
  std::iota(rows.begin(), rows.end(), std::int64_t{0});
  return reference_forward_rows(p, rows);
}

std::vector<double> reference_forward_rows(const Problem& p, std::span<const std::int64_t> rows) {
  const std::size_t K = static_cast<std::size_t>(p.K);
  std::vector<double> out(rows.size() * K);
  visit_floating_dtype(p.dtype, [&]<class In>() {
    std::vector<std::int64_t> x_rows;
    for (std::int64_t b : rows) x_rows.push_back(b * p.x_stride_b);
    const In* bias = static_cast<const In*>(p.bias);
    dot_products_in_order<In>(
        row_pointers<In>(p.x, x_rows), concatenation_offsets(p),
        row_pointers<In>(p.weight, strided_offsets(p.K, p.weight_stride_k)), strided_offsets(p.RH, p.weight_stride_c),
        [&](std::size_t, std::size_t k) { return bias ? load_as<double>(bias[k]) : 0.0; },
        [&](std::size_t i, std::size_t k, double sum) { out[i * K + k] = sum; });
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
  const std::size_t B = static_cast<std::size_t>(p.B), H = static_cast<std::size_t>(p.H);
  const std::size_t RH = static_cast<std::size_t>(p.RH);
  ReferenceGradients g;
  g.x.assign(static_cast<std::size_t>(p.R) * B * H, 0.0);
  g.weight.assign(static_cast<std::size_t>(p.K) * RH, 0.0);
  g.bias.assign(static_cast<std::size_t>(p.K), 0.0);
  visit_floating_dtype(p.dtype, [&]<class In>() {
    const auto none = [](std::size_t, std::size_t) { return 0.0; };
    // grad_y's elements: a row's (over k) and a column's (over b).
    const std::vector<std::int64_t> grad_y_row = strided_offsets(p.K, 1);
    const std::vector<std::int64_t> grad_y_column = strided_offsets(p.B, bp.grad_y_stride_b);
    // grad_x: row b of grad_y against column c of the weight, over k.
    dot_products_in_order<In>(row_pointers<In>(bp.grad_y, grad_y_column), grad_y_row,
                              row_pointers<In>(p.weight, strided_offsets(p.RH, p.weight_stride_c)),
                              strided_offsets(p.K, p.weight_stride_k), none,
                              [&](std::size_t b, std::size_t c, double sum) { g.x[(c / H * B + b) * H + c % H] = sum; });
    // grad_W: column k of grad_y against column c of the concatenation, over b.
    dot_products_in_order<In>(row_pointers<In>(bp.grad_y, grad_y_row), grad_y_column,
                              row_pointers<In>(p.x, concatenation_offsets(p)), strided_offsets(p.B, p.x_stride_b),
                              none, [&](std::size_t k, std::size_t c, double sum) { g.weight[k * RH + c] = sum; });
    const In* grad_y = static_cast<const In*>(bp.grad_y);
    for (std::int64_t k = 0; k < p.K; ++k)
      for (std::int64_t b = 0; b < p.B; ++b)
        g.bias[static_cast<std::size_t>(k)] += load_as<double>(grad_y[b * bp.grad_y_stride_b + k]);
  });
  return g;
}

}  // namespace gather_linear::cpu
