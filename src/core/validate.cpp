#include "core/validate.hpp"

#include <array>
#include <cstdint>
#include <utility>
#include <sstream>
#include <string>

#include "gather_linear/error.hpp"

namespace gather_linear {
namespace {

[[noreturn]] void fail(const char* argument, const std::string& message,
                       ErrorCode code = ErrorCode::invalid_argument) {
  throw Error(code, argument, message);
}

std::string str(std::int64_t v) { return std::to_string(v); }

bool is_floating(DType d) {
  return d == DType::float32 || d == DType::float16 || d == DType::bfloat16 || d == DType::float64;
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* argument, const char* what) {
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    fail(argument, std::string("sizes overflow int64: ") + what + " = " + str(a) + " * " + str(b));
  return product;
}

void check_rank(const TensorView& t, const char* name, int rank, const char* shape) {
  if (t.rank != rank)
    fail(name, "expected rank " + str(rank) + " " + shape + ", got rank " + str(t.rank));
}

void check_dtype_and_device(const TensorView& t, const char* name, const TensorView& x) {
  if (t.dtype != x.dtype)
    fail(name, "expected dtype " + std::string(dtype_name(x.dtype)) + " (the dtype of x), got " +
                   std::string(dtype_name(t.dtype)));
  if (!(t.device == x.device))
    fail(name, "expected device " + to_string(x.device) + " (the device of x), got " + to_string(t.device));
}

void check_sizes_and_strides(const TensorView& t, const char* name) {
  for (int d = 0; d < t.rank; ++d) {
    if (t.size(d) < 0) fail(name, "expected non-negative sizes, got size(" + str(d) + ") = " + str(t.size(d)));
    if (t.stride(d) < 0)
      fail(name, "expected non-negative strides, got stride(" + str(d) + ") = " + str(t.stride(d)));
  }
}

struct ByteSpan {
  std::uintptr_t begin = 0, end = 0;  // [begin, end); empty when begin == end
};

// The bytes a view can reach; also proves every reachable offset fits in int64.
ByteSpan reachable_bytes(const TensorView& t, const char* name) {
  std::int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.size(d) == 0) return {};
    std::int64_t term = 0;
    if (__builtin_mul_overflow(t.size(d) - 1, t.stride(d), &term) || __builtin_add_overflow(last, term, &last))
      fail(name, "sizes and strides overflow int64: the largest element offset does not fit");
  }
  std::int64_t elements = 0, bytes = 0;
  if (__builtin_add_overflow(last, 1, &elements) ||
      __builtin_mul_overflow(elements, static_cast<std::int64_t>(dtype_size(t.dtype)), &bytes))
    fail(name, "sizes and strides overflow int64: the view spans more than 2^63 bytes");
  const auto begin = reinterpret_cast<std::uintptr_t>(t.data);
  return {begin, begin + static_cast<std::uintptr_t>(bytes)};
}

void check_pointer(const TensorView& t, const char* name, const ByteSpan& span) {
  if (span.begin == span.end) return;  // an empty view is never dereferenced
  if (t.data == nullptr)
    fail(name, "null data pointer for a non-empty tensor (" + str(t.numel()) + " elements)");
  if (span.begin % dtype_size(t.dtype) != 0) {
    std::ostringstream os;
    os << "data pointer " << t.data << " is not aligned to its " << dtype_size(t.dtype) << "-byte element size";
    fail(name, os.str());
  }
}

void check_no_overlap(const ByteSpan& output, const ByteSpan& input, const char* input_name,
                      const char* output_name = "y") {
  if (output.begin == output.end || input.begin == input.end) return;
  if (output.begin < input.end && input.begin < output.end)
    fail(output_name, std::string("overlaps ") + input_name + ": an output must not share memory with " +
                          (std::string(input_name).starts_with("gradients.") ? "another output" : "an input"));
}

// An output written in parallel must not reach one element twice. Sufficient (as PyTorch's own
// check is): with the dimensions of size > 1 ordered by stride, each stride passes the whole
// extent of the dimensions before it.
void check_elements_distinct(const TensorView& t, const char* name) {
  std::array<int, kMaxRank> dims{};
  int n = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.size(d) == 0) return;  // no elements at all
    if (t.size(d) > 1) dims[static_cast<std::size_t>(n++)] = d;
  }
  for (int i = 1; i < n; ++i)  // insertion sort by stride: at most kMaxRank dimensions
    for (auto j = static_cast<std::size_t>(i); j > 0; --j) {
      if (t.stride(dims[j - 1]) <= t.stride(dims[j])) break;
      std::swap(dims[j - 1], dims[j]);
    }
  std::int64_t extent = 1;  // one past the largest offset the dimensions so far reach
  for (int i = 0; i < n; ++i) {
    const int d = dims[static_cast<std::size_t>(i)];
    if (t.stride(d) < extent)
      fail(name, "elements overlap: stride(" + str(d) + ") = " + str(t.stride(d)) + " is less than " + str(extent) +
                     ", the extent of the dimensions with smaller strides; an output needs distinct elements");
    extent += (t.size(d) - 1) * t.stride(d);
  }
}

// A (rows, cols) matrix's elements must be adjacent within a row.
void check_unit_inner_stride(const TensorView& t, const char* name, std::int64_t rows, std::int64_t cols) {
  if (cols > 1 && rows > 0 && t.stride(1) != 1)
    fail(name, "expected unit inner stride (stride(1) == 1), got stride(1) = " + str(t.stride(1)));
}

// An output's rows must not overlap: stride(0) spans a row of `cols` (named `cols_name`).
void check_rows_apart(const TensorView& t, const char* name, std::int64_t rows, std::int64_t cols,
                      const char* cols_name) {
  if (rows > 1 && cols > 0 && t.stride(0) < cols)
    fail(name, std::string("rows overlap: expected stride(0) >= ") + cols_name + " = " + str(cols) +
                   ", got stride(0) = " + str(t.stride(0)));
}

// Whether the computation reads x's and weight's elements. backward() reads x only for
// gradients.weight and weight only for gradients.x: an input it does not read may come without
// data (a null pointer), as a description of its shape alone.
struct InputsRead {
  bool x = true, weight = true;
};

// x, weight and bias checked, with the bytes each can reach (for y's overlap checks).
struct CheckedInputs {
  Problem problem;
  ByteSpan x, weight, bias;
};

CheckedInputs check_inputs(const TensorView& x, const TensorView& weight, const std::optional<TensorView>& bias,
                           InputsRead read = {}) {
  check_rank(x, "x", 3, "(R, B, H)");
  check_rank(weight, "weight", 2, "(K, R*H)");
  if (bias) check_rank(*bias, "bias", 1, "(K)");

  if (!is_floating(x.dtype))
    fail("x",
         "unsupported dtype " + std::string(dtype_name(x.dtype)) + "; expected float32, float16, bfloat16 or float64",
         ErrorCode::unsupported);
  check_dtype_and_device(weight, "weight", x);
  if (bias) check_dtype_and_device(*bias, "bias", x);
  if (x.device.type == DeviceType::cuda && x.device.index < 0) fail("x", "invalid device " + to_string(x.device));

  check_sizes_and_strides(x, "x");
  check_sizes_and_strides(weight, "weight");
  if (bias) check_sizes_and_strides(*bias, "bias");

  Problem p;
  p.R = x.size(0);
  p.B = x.size(1);
  p.H = x.size(2);
  p.K = weight.size(0);
  p.RH = checked_mul(p.R, p.H, "x", "R*H");
  checked_mul(p.RH, p.B, "x", "R*H*B");
  checked_mul(p.RH, p.K, "weight", "R*H*K");
  checked_mul(p.B, p.K, "y", "B*K");

  if (weight.size(1) != p.RH)
    fail("weight", "expected size(1) == R*H = " + str(p.R) + "*" + str(p.H) + " = " + str(p.RH) + ", got " +
                       str(weight.size(1)));
  if (bias && bias->size(0) != p.K)
    fail("bias", "expected size(0) == K = " + str(p.K) + " (weight.size(0)), got " + str(bias->size(0)));
  check_unit_inner_stride(weight, "weight", p.K, p.RH);
  if (bias && p.K > 1 && bias->stride(0) != 1)
    fail("bias", "expected a contiguous bias (stride(0) == 1), got stride(0) = " + str(bias->stride(0)));

  ByteSpan x_span = reachable_bytes(x, "x");
  ByteSpan weight_span = reachable_bytes(weight, "weight");
  const ByteSpan bias_span = bias ? reachable_bytes(*bias, "bias") : ByteSpan{};
  if (read.x || x.data != nullptr)
    check_pointer(x, "x", x_span);
  else
    x_span = {};  // a shape alone: no bytes for an output to overlap
  if (read.weight || weight.data != nullptr)
    check_pointer(weight, "weight", weight_span);
  else
    weight_span = {};
  if (bias) check_pointer(*bias, "bias", bias_span);

  p.dtype = x.dtype;
  p.device = x.device;
  p.x = x.data;
  p.x_stride_r = x.stride(0);
  p.x_stride_b = x.stride(1);
  p.x_stride_h = x.stride(2);
  p.weight = weight.data;
  p.weight_stride_k = weight.stride(0);
  p.bias = bias && p.K > 0 ? bias->data : nullptr;
  return {p, x_span, weight_span, bias_span};
}

void check_sizes_equal(const TensorView& t, const char* name, std::initializer_list<std::int64_t> expected,
                       const char* expected_from) {
  int d = 0;
  for (std::int64_t e : expected) {
    if (t.size(d) != e)
      fail(name, "expected size(" + str(d) + ") == " + str(e) + " (" + expected_from + "), got " + str(t.size(d)));
    ++d;
  }
}

// y and grad_y: (B, K), x's dtype and device, unit inner stride, rows apart; the bytes it reaches.
ByteSpan check_batch_by_output(const TensorView& t, const char* name, const Problem& p, const TensorView& x) {
  check_rank(t, name, 2, "(B, K)");
  check_dtype_and_device(t, name, x);
  check_sizes_and_strides(t, name);
  if (t.size(0) != p.B) fail(name, "expected size(0) == B = " + str(p.B) + " (x.size(1)), got " + str(t.size(0)));
  if (t.size(1) != p.K)
    fail(name, "expected size(1) == K = " + str(p.K) + " (weight.size(0)), got " + str(t.size(1)));
  check_unit_inner_stride(t, name, p.B, p.K);
  check_rows_apart(t, name, p.B, p.K, "K");
  const ByteSpan span = reachable_bytes(t, name);
  check_pointer(t, name, span);
  return span;
}

}  // namespace

Problem validate_inputs(const TensorView& x, const TensorView& weight, const std::optional<TensorView>& bias) {
  return check_inputs(x, weight, bias).problem;
}

Problem validate_forward_args(const TensorView& x, const TensorView& weight,
                              const std::optional<TensorView>& bias, const TensorView& y) {
  const CheckedInputs inputs = check_inputs(x, weight, bias);
  Problem p = inputs.problem;
  const ByteSpan y_span = check_batch_by_output(y, "y", p, x);
  check_no_overlap(y_span, inputs.x, "x");
  check_no_overlap(y_span, inputs.weight, "weight");
  check_no_overlap(y_span, inputs.bias, "bias");

  p.y = y.data;
  p.y_stride_b = y.stride(0);
  return p;
}

BackwardProblem validate_backward_args(const TensorView& grad_y, const TensorView& x, const TensorView& weight,
                                       const Gradients& gradients) {
  const CheckedInputs inputs =
      check_inputs(x, weight, std::nullopt, {.x = gradients.weight.has_value(), .weight = gradients.x.has_value()});
  const Problem& p = inputs.problem;
  BackwardProblem bp;
  bp.forward = p;

  const ByteSpan grad_y_span = check_batch_by_output(grad_y, "grad_y", p, x);
  bp.grad_y = grad_y.data;
  bp.grad_y_stride_b = p.B == 1 ? p.K : grad_y.stride(0);  // one row: its stride is never used

  // Each requested gradient, with the bytes it reaches, checked against the inputs and the
  // gradients before it.
  struct Written {
    ByteSpan span;
    const char* name;
  };
  std::array<Written, 3> written{};
  int written_count = 0;
  const auto check_output = [&](const TensorView& t, const char* name) {
    check_sizes_and_strides(t, name);
    const ByteSpan span = reachable_bytes(t, name);
    check_pointer(t, name, span);
    check_no_overlap(span, inputs.x, "x", name);
    check_no_overlap(span, inputs.weight, "weight", name);
    check_no_overlap(span, grad_y_span, "grad_y", name);
    for (int i = 0; i < written_count; ++i)
      check_no_overlap(span, written[static_cast<std::size_t>(i)].span, written[static_cast<std::size_t>(i)].name,
                       name);
    written[static_cast<std::size_t>(written_count++)] = {span, name};
    return span.begin != span.end;  // false: empty, nothing to write
  };

  if (const auto& g = gradients.x) {
    check_rank(*g, "gradients.x", 3, "(R, B, H)");
    check_dtype_and_device(*g, "gradients.x", x);
    check_sizes_equal(*g, "gradients.x", {p.R, p.B, p.H}, "the size of x");
    check_elements_distinct(*g, "gradients.x");
    if (check_output(*g, "gradients.x")) {
      bp.grad_x = g->data;
      bp.grad_x_stride_r = g->stride(0);
      bp.grad_x_stride_b = g->stride(1);
      bp.grad_x_stride_h = g->stride(2);
    }
  }
  if (const auto& g = gradients.weight) {
    check_rank(*g, "gradients.weight", 2, "(K, R*H)");
    check_dtype_and_device(*g, "gradients.weight", x);
    check_sizes_equal(*g, "gradients.weight", {p.K, p.RH}, "the size of weight");
    check_unit_inner_stride(*g, "gradients.weight", p.K, p.RH);
    check_rows_apart(*g, "gradients.weight", p.K, p.RH, "R*H");
    if (check_output(*g, "gradients.weight")) {
      bp.grad_weight = g->data;
      bp.grad_weight_stride_k = p.K == 1 ? p.RH : g->stride(0);
    }
  }
  if (const auto& g = gradients.bias) {
    check_rank(*g, "gradients.bias", 1, "(K)");
    check_dtype_and_device(*g, "gradients.bias", x);
    check_sizes_equal(*g, "gradients.bias", {p.K}, "weight.size(0)");
    if (p.K > 1 && g->stride(0) != 1)
      fail("gradients.bias", "expected a contiguous tensor (stride(0) == 1), got stride(0) = " + str(g->stride(0)));
    if (check_output(*g, "gradients.bias")) bp.grad_bias = g->data;
  }
  return bp;
}

}  // namespace gather_linear
