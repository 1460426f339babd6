// Shared test helpers: host tensors with arbitrary strides, seeded random fills, NaN poison,
// problem layouts, error measures against the exact reference, and the check of a library error.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/numeric.hpp"
#include "core/validate.hpp"
#include "cpu/cpu_kernels.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::testing {

inline const char* path_name(cpu::GemmPath path) {
  switch (path) {
    case cpu::GemmPath::packed: return "packed";
    case cpu::GemmPath::direct: return "direct";
    case cpu::GemmPath::row_blocks: return "row_blocks";
    case cpu::GemmPath::weight_rows: return "weight_rows";
    default: return "automatic";
  }
}
// The SIMD engine's paths, each forced in the engine's tests.
constexpr cpu::GemmPath kEnginePaths[] = {cpu::GemmPath::packed, cpu::GemmPath::direct, cpu::GemmPath::row_blocks,
                                          cpu::GemmPath::weight_rows};

// Owns host storage for a strided view; gaps between elements exist in storage too, so that
// a kernel writing outside the view is caught (gaps keep their poison). The view may start
// `offset` elements into the storage (a sliced tensor, off any vector-width boundary).
struct HostTensor {
  std::vector<std::byte> storage;
  TensorView view;
  std::int64_t offset = 0;

  HostTensor() = default;
  HostTensor(DType dtype, std::vector<std::int64_t> sizes, std::vector<std::int64_t> strides,
             std::int64_t offset_elements = 0)
      : offset(offset_elements) {
    std::int64_t span = 1;
    bool empty = false;
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      empty = empty || sizes[d] == 0;
      span += (sizes[d] - 1) * strides[d];
    }
    storage.resize(static_cast<std::size_t>(empty ? 0 : offset + span) * dtype_size(dtype) + 64);
    view.data = storage.data() + offset * static_cast<std::int64_t>(dtype_size(dtype));
    view.dtype = dtype;
    view.device = Device::cpu();
    view.rank = static_cast<int>(sizes.size());
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      view.sizes[d] = sizes[d];
      view.strides[d] = strides[d];
    }
  }

  std::size_t elements() const { return (storage.size() - 64) / dtype_size(view.dtype); }

  void set(std::size_t i, double v) {
    visit_floating_dtype(view.dtype, [&]<class T>() {
      const T t = store_as<T>(v);
      std::memcpy(storage.data() + i * sizeof(T), &t, sizeof(T));
    });
  }
  // Every element of the storage (gaps included) set to value(i), rounded into the dtype.
  template <class Value>
  void fill(Value value) {
    visit_floating_dtype(view.dtype, [&]<class T>() {
      for (std::size_t i = 0; i < elements(); ++i) {
        const T t = store_as<T>(value(i));
        std::memcpy(storage.data() + i * sizeof(T), &t, sizeof(T));
      }
    });
  }
  double get(std::size_t i) const {
    return visit_floating_dtype(view.dtype, [&]<class T>() {
      T t;
      std::memcpy(&t, storage.data() + i * sizeof(T), sizeof(T));
      return load_as<double>(t);
    });
  }
  // Element at a multi-index of the view.
  double at(std::initializer_list<std::int64_t> index) const {
    std::int64_t element = offset;
    int d = 0;
    for (auto i : index) element += i * view.stride(d++);
    return get(static_cast<std::size_t>(element));
  }

  // Element i is lo + (hi - lo) * u with u in [0, 1) the i-th value of a SplitMix64 stream from
  // `seed`: a few nanoseconds an element, where std::uniform_real_distribution took tens (the GPU
  // suites fill hundreds of megabytes a test), and the same values on any standard library.
  void fill_uniform(std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
    constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ull;
    const auto mix = [](std::uint64_t z) {
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return z ^ (z >> 31);
    };
    const std::uint64_t start = mix(seed);
    fill([&](std::size_t i) { return lo + (hi - lo) * static_cast<double>(mix(start + (i + 1) * kGamma) >> 11) * 0x1p-53; });
  }
  void fill_nan() {
    fill([](std::size_t) { return std::numeric_limits<double>::quiet_NaN(); });
  }
};

inline HostTensor contiguous_tensor(DType dtype, std::vector<std::int64_t> sizes, std::int64_t offset = 0) {
  std::vector<std::int64_t> strides(sizes.size());
  std::int64_t s = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    strides[d] = s;
    s *= std::max<std::int64_t>(sizes[d], 1);
  }
  return HostTensor(dtype, sizes, strides, offset);
}

// How x, weight and y are laid out in memory.
enum class Layout {
  contiguous,     // x (R, B, H) row-major
  head_major,     // x stored (B, R, H) and viewed as (R, B, H): attention's per-head outputs
  strided,        // x's h stride 2, padded rows; weight rows padded; y rows padded
  broadcast_rows,  // x's b stride 0: every row of A is the same
  misaligned,      // contiguous, but x, weight, bias and y each start one element into their storage
  b_unit           // x stored (R, H, B) and viewed as (R, B, H): rows of A side by side (CPU sweeps)
};

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::head_major: return "head_major";
    case Layout::strided: return "strided";
    case Layout::broadcast_rows: return "broadcast_rows";
    case Layout::misaligned: return "misaligned";
    case Layout::b_unit: return "b_unit";
  }
  return "?";
}

struct Shape {
  std::int64_t R, B, H, K;
};

struct Case {
  Shape shape;
  DType dtype;
  Layout layout;
  bool bias;
};

// A problem's sizes and contiguous strides with no operands behind them, for the dispatch rules,
// which read only those (and so need no memory for large shapes). The weight's rows lie
// `weight_stride_k` apart, or R*H where that is negative.
inline Problem problem_without_operands(const Shape& s, DType dtype, Device device, std::int64_t weight_stride_k = -1) {
  Problem p;
  p.R = s.R, p.B = s.B, p.H = s.H, p.K = s.K, p.RH = s.R * s.H;
  p.dtype = dtype;
  p.device = device;
  p.x_stride_r = s.B * s.H, p.x_stride_b = s.H, p.x_stride_h = 1;
  p.weight_stride_k = weight_stride_k < 0 ? p.RH : weight_stride_k;
  p.y_stride_b = s.K;
  return p;
}

inline std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << "R=" << c.shape.R << " B=" << c.shape.B << " H=" << c.shape.H << " K=" << c.shape.K
            << " dtype=" << dtype_name(c.dtype) << " layout=" << layout_name(c.layout)
            << " bias=" << (c.bias ? "yes" : "no");
}

// Every combination of the given shapes, dtypes and layouts, with and without bias.
template <class Shapes, class Dtypes, class Layouts>
std::vector<Case> all_cases(const Shapes& shapes, const Dtypes& dtypes, const Layouts& layouts) {
  std::vector<Case> cases;
  for (const Shape& s : shapes)
    for (DType d : dtypes)
      for (Layout l : layouts)
        for (bool bias : {true, false}) cases.push_back({s, d, l, bias});
  return cases;
}

// A GoogleTest-safe name for a case: R4_B12_H32_K56_float32_contiguous_bias.
inline std::string case_name(const Case& c) {
  std::ostringstream os;
  os << "R" << c.shape.R << "_B" << c.shape.B << "_H" << c.shape.H << "_K" << c.shape.K << "_"
     << dtype_name(c.dtype) << "_" << layout_name(c.layout) << (c.bias ? "_bias" : "_nobias");
  return os.str();
}

// Inputs filled with seeded uniform values, y poisoned with NaN (gaps included).
struct Operands {
  HostTensor x, weight, bias, y;
  std::optional<TensorView> bias_view() const { return bias.storage.empty() ? std::nullopt : std::optional(bias.view); }
};

inline Operands make_operands(const Case& c, std::uint32_t seed) {
  const auto [R, B, H, K] = c.shape;
  const std::int64_t RH = R * H;
  const std::int64_t offset = c.layout == Layout::misaligned ? 1 : 0;
  Operands o;
  switch (c.layout) {
    case Layout::contiguous:
    case Layout::misaligned: o.x = HostTensor(c.dtype, {R, B, H}, {B * H, H, 1}, offset); break;
    case Layout::head_major: o.x = HostTensor(c.dtype, {R, B, H}, {H, R * H, 1}); break;
    case Layout::strided: o.x = HostTensor(c.dtype, {R, B, H}, {B * (2 * H + 3), 2 * H + 3, 2}); break;
    case Layout::broadcast_rows: o.x = HostTensor(c.dtype, {R, B, H}, {H, 0, 1}); break;
    case Layout::b_unit: o.x = HostTensor(c.dtype, {R, B, H}, {B * H, 1, B}); break;
  }
  const bool padded = c.layout == Layout::strided;
  o.weight = HostTensor(c.dtype, {K, RH}, {RH + (padded ? 5 : 0), 1}, offset);
  o.y = HostTensor(c.dtype, {B, K}, {K + (padded ? 3 : 0), 1}, offset);
  o.x.fill_uniform(seed);
  o.weight.fill_uniform(seed + 1);
  if (c.bias) {
    o.bias = contiguous_tensor(c.dtype, {K}, offset);
    o.bias.fill_uniform(seed + 2);
  }
  o.y.fill_nan();
  return o;
}

// A key for host inputs: FNV-1a (over 64-bit words) of each tensor's storage bytes, view offset,
// dtype, extents and strides (for results that depend on nothing else, as the exact references do).
class InputsKey {
 public:
  InputsKey& add(const HostTensor& t) {
    mix(t.storage.data(), t.storage.size());
    const std::int64_t layout[] = {t.offset, static_cast<std::int64_t>(t.view.dtype), t.view.rank};
    mix(layout, sizeof layout);
    mix(t.view.sizes.data(), sizeof(std::int64_t) * static_cast<std::size_t>(t.view.rank));
    mix(t.view.strides.data(), sizeof(std::int64_t) * static_cast<std::size_t>(t.view.rank));
    return *this;
  }
  std::uint64_t value() const { return hash_; }

 private:
  // Eight bytes a step (a chain of multiplies a byte each took a third of a second per 512 MB).
  void mix(const void* data, std::size_t bytes) {
    const auto* byte = static_cast<const unsigned char*>(data);
    std::size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      std::uint64_t word;
      std::memcpy(&word, byte + i, 8);
      hash_ = (hash_ ^ word) * 0x100000001b3ull;
    }
    for (; i < bytes; ++i) hash_ = (hash_ ^ byte[i]) * 0x100000001b3ull;
  }
  std::uint64_t hash_ = 0xcbf29ce484222325ull;
};

// The most recent results of an expensive function of host inputs, by InputsKey, up to 2^26
// values (512 MB of doubles) in all: the suites force many kernels (and GETT configurations, and
// backward forms) on the same operands, and the exact references, in double on one thread, cost
// every multiply-add of the problem each time.
template <class Result>
class RecentResults {
 public:
  template <class Compute, class Count>
  Result get(std::uint64_t key, Compute compute, Count count) {
    for (const Entry& e : entries_)
      if (e.key == key) return e.result;
    Result result = compute();
    const std::size_t values = count(result);
    entries_.push_front({key, result, values});
    kept_ += values;
    while (kept_ > (std::size_t{1} << 26) && entries_.size() > 1) {
      kept_ -= entries_.back().values;
      entries_.pop_back();
    }
    return result;
  }

 private:
  struct Entry {
    std::uint64_t key;
    Result result;
    std::size_t values;
  };
  std::deque<Entry> entries_;  // newest first
  std::size_t kept_ = 0;
};

// cpu::reference_forward on o's inputs (computed once per distinct inputs: RecentResults).
inline std::vector<double> reference_of(const Operands& o) {
  static RecentResults<std::vector<double>> recent;
  const std::uint64_t key = InputsKey().add(o.x).add(o.weight).add(o.bias).value();
  return recent.get(
      key,
      [&] { return cpu::reference_forward(validate_forward_args(o.x.view, o.weight.view, o.bias_view(), o.y.view)); },
      [](const std::vector<double>& values) { return values.size(); });
}

// max |y - ref| / max |ref| over the view (NaN anywhere makes it NaN), with ref row-major (B, K).
inline double relative_error(const HostTensor& y, const std::vector<double>& ref, std::int64_t B, std::int64_t K) {
  double max_err = 0, max_ref = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t k = 0; k < K; ++k) {
      const double r = ref[static_cast<std::size_t>(b * K + k)];
      const double e = std::abs(y.at({b, k}) - r);
      if (std::isnan(e)) return std::numeric_limits<double>::quiet_NaN();
      max_err = std::max(max_err, e);
      max_ref = std::max(max_ref, std::abs(r));
    }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

// The first storage element (gaps included) that no longer holds its NaN poison, if any: a call
// that failed must have written nothing.
inline std::optional<std::size_t> first_unpoisoned(const HostTensor& t) {
  for (std::size_t i = 0; i < t.elements(); ++i)
    if (!std::isnan(t.get(i))) return i;
  return std::nullopt;
}

// The storage element (offset included) of each element of a view of any rank, in row-major
// order of its indices.
inline std::vector<std::size_t> storage_elements(const HostTensor& t) {
  const TensorView& v = t.view;
  std::int64_t n = 1;
  for (int d = 0; d < v.rank; ++d) n *= v.size(d);
  std::vector<std::size_t> elements(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rest = i, element = t.offset;
    for (int d = v.rank - 1; d >= 0; --d) {
      element += (rest % v.size(d)) * v.stride(d);
      rest /= v.size(d);
    }
    elements[static_cast<std::size_t>(i)] = static_cast<std::size_t>(element);
  }
  return elements;
}

// max |t - ref| / max |ref| over a view of any rank (ref row-major over the view's sizes); NaN if
// any element is NaN.
inline double relative_error_of_view(const HostTensor& t, const std::vector<double>& ref) {
  const std::vector<std::size_t> elements = storage_elements(t);
  double max_err = 0, max_ref = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double e = std::abs(t.get(elements[i]) - ref[i]);
    if (std::isnan(e)) return std::numeric_limits<double>::quiet_NaN();
    max_err = std::max(max_err, e);
    max_ref = std::max(max_ref, std::abs(ref[i]));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

// Storage elements outside a view (y, or a gradient) must still hold their NaN poison.
inline bool gaps_untouched(const HostTensor& t) {
  std::vector<bool> in_view(t.elements(), false);
  for (std::size_t element : storage_elements(t)) in_view[element] = true;
  for (std::size_t i = 0; i < in_view.size(); ++i)
    if (!in_view[i] && !std::isnan(t.get(i))) return false;
  return true;
}

// Tolerance for a fused result that claims float32/float64 accuracy.
inline double exact_tolerance(DType dtype) { return dtype == DType::float64 ? 1e-12 : 1e-5; }

inline bool is_low_precision(DType dtype) { return dtype == DType::float16 || dtype == DType::bfloat16; }

// Runs `call` and expects a gather_linear::Error for `argument`, with `code`, whose message
// contains `fragment`.
template <class Call>
void expect_library_error(Call&& call, const std::string& argument, const std::string& fragment, ErrorCode code) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message '" << e.what() << "' lacks '" << fragment << "'";
    return;
  }
  ADD_FAILURE() << "expected an error for " << argument;
}

}  // namespace gather_linear::testing
