// Times two of this build's CPU kernels (or "auto", the dispatcher's choice) against each other
// call by call in one process, through gather_linear::forward (alternating_pairs.hpp says why);
// cpu_gather_gemm:packed, :direct, :row_blocks or :weight_rows is the SIMD engine with that path forced,
// :automatic on the path it picks (cpu_gather_gemm:PATH:avx2 or :portable: that instruction set's
// engine rather than the best). One
// CSV row a problem: its kernel times (medians) and quartiles of the per-pair ratio
// time_b / time_a; "same" where both wrote the same bits. Buffers start on a cache line, as
// PyTorch's do; --offset-b places B's operands that many bytes past one instead (the same values),
// e.g. 16 as a std::vector's heap block lies.
//
//   cpu_kernel_ab KERNEL_A KERNEL_B R,B,H,K[,f32|f64|f16|bf16[,contiguous|head-major]] ... [--pairs N]
//                 [--offset-b BYTES]
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "alternating_pairs.hpp"
#include "core/validate.hpp"
#include "cpu/cpu_kernels.hpp"
#include "gather_linear/gather_linear.hpp"

namespace {

using namespace gather_linear;
using bench::quantile;

struct Problem {
  std::int64_t R = 0, B = 0, H = 0, K = 0;
  std::string dtype = "f32", layout = "contiguous";
};

Problem parse(const std::string& spec) {
  std::vector<std::string> fields;
  std::stringstream in(spec);
  for (std::string field; std::getline(in, field, ',');) fields.push_back(field);
  if (fields.size() < 4 || fields.size() > 6) throw std::invalid_argument("expected R,B,H,K[,dtype[,layout]]: " + spec);
  Problem p{std::stoll(fields[0]), std::stoll(fields[1]), std::stoll(fields[2]), std::stoll(fields[3])};
  if (fields.size() > 4) p.dtype = fields[4];
  if (fields.size() > 5) p.layout = fields[5];
  return p;
}

// A kernel name, or cpu_gather_gemm:PATH: a call of forward, or of the engine on that path.
std::function<void(const TensorView&, const TensorView&, const TensorView&, const TensorView&)> runner(
    const std::string& name) {
  const auto colon = name.find(':');
  if (colon == std::string::npos) {
    Options options;
    options.kernel = name;
    return [options](const TensorView& x, const TensorView& w, const TensorView& b, const TensorView& y) {
      forward(x, w, b, y, options);
    };
  }
  const std::string kernel = name.substr(0, colon);
  std::string path_name = name.substr(colon + 1);
  cpu::SimdLevel level = cpu::SimdLevel::best;
  if (const auto second = path_name.find(':'); second != std::string::npos) {
    const std::string level_name = path_name.substr(second + 1);
    path_name.resize(second);
    level = level_name == "avx512" ? cpu::SimdLevel::avx512
            : level_name == "avx2" ? cpu::SimdLevel::avx2
            : level_name == "portable" ? cpu::SimdLevel::portable
                                       : throw std::invalid_argument("expected :avx512, :avx2 or :portable, got " + name);
  }
  const std::pair<const char*, cpu::GemmPath> paths[] = {{"automatic", cpu::GemmPath::automatic},
                                                         {"packed", cpu::GemmPath::packed},
                                                         {"direct", cpu::GemmPath::direct},
                                                         {"row_blocks", cpu::GemmPath::row_blocks},
                                                         {"weight_rows", cpu::GemmPath::weight_rows}};
  const auto known = std::find_if(std::begin(paths), std::end(paths), [&](const auto& e) { return path_name == e.first; });
  if (kernel != "cpu_gather_gemm" || known == std::end(paths))
    throw std::invalid_argument(
        "expected cpu_gather_gemm:automatic, :packed, :direct, :row_blocks or :weight_rows, got " + name);
  const cpu::GemmPath path = known->second;
  return [path, level](const TensorView& x, const TensorView& w, const TensorView& b, const TensorView& y) {
    cpu::run_gather_gemm(validate_forward_args(x, w, b, y), level, path);
  };
}

void compare(const std::string& kernel_a, const std::string& kernel_b, const Problem& s, int pairs,
             std::size_t offset_b) {
  const DType dtype = s.dtype == "f16"    ? DType::float16
                      : s.dtype == "bf16" ? DType::bfloat16
                      : s.dtype == "f64"  ? DType::float64
                                          : DType::float32;
  const std::size_t size = dtype_size(dtype);
  HostBytes x(s.R * s.B * s.H * size), w(s.K * s.R * s.H * size), bias(s.K * size);
  bench::fill_uniform(dtype, {&x, &w, &bias});
  // B's operands: the same values, offset_b bytes past a cache line.
  const auto shifted = [offset_b](const HostBytes& from) {
    HostBytes to(from.size() + offset_b);
    std::copy(from.begin(), from.end(), to.begin() + static_cast<std::ptrdiff_t>(offset_b));
    return to;
  };
  const HostBytes x_b = shifted(x), w_b = shifted(w), bias_b = shifted(bias);
  HostBytes y_a(s.B * s.K * size), y_b(s.B * s.K * size + offset_b);
  const Device cpu = Device::cpu();
  const auto views = [&](const std::byte* x_data, const std::byte* w_data, const std::byte* bias_data, std::byte* y_data) {
    // head-major: x's buffer is (B, R, H), viewed as (R, B, H), as an attention output is.
    return std::array<TensorView, 4>{
        s.layout == "head-major" ? TensorView::strided(x_data, dtype, cpu, {s.R, s.B, s.H}, {s.H, s.R * s.H, 1})
                                 : TensorView::contiguous(x_data, dtype, cpu, {s.R, s.B, s.H}),
        TensorView::contiguous(w_data, dtype, cpu, {s.K, s.R * s.H}), TensorView::contiguous(bias_data, dtype, cpu, {s.K}),
        TensorView::contiguous(y_data, dtype, cpu, {s.B, s.K})};
  };
  const auto [xv, wv, bv, ya] = views(x.data(), w.data(), bias.data(), y_a.data());
  const auto [xv_b, wv_b, bv_b, yb] =
      views(x_b.data() + offset_b, w_b.data() + offset_b, bias_b.data() + offset_b, y_b.data() + offset_b);
  const auto run_a = runner(kernel_a), run_b = runner(kernel_b);
  const bench::PairTimes t =
      bench::time_alternating_pairs(pairs, [&] { run_a(xv, wv, bv, ya); }, [&] { run_b(xv_b, wv_b, bv_b, yb); });
  const bool same = std::equal(y_a.begin(), y_a.end(), y_b.begin() + static_cast<std::ptrdiff_t>(offset_b));
  const auto chosen = [&](const std::string& name, const TensorView& y) {
    if (name.find(':') != std::string::npos) return name;
    Options options;
    options.kernel = name;
    return std::string(select_kernel(xv, wv, bv, y, options));
  };
  std::printf("%lld,%lld,%lld,%lld,%s,%s,%s,%s,%d,%.1f,%.1f,%.3f,%.3f,%.3f,%s\n", (long long)s.R, (long long)s.B,
              (long long)s.H, (long long)s.K, s.dtype.c_str(), s.layout.c_str(),
              chosen(kernel_a, ya).c_str(), chosen(kernel_b, yb).c_str(), pairs, quantile(t.a_us, 0.5),
              quantile(t.b_us, 0.5), quantile(t.ratio, 0.25), quantile(t.ratio, 0.5), quantile(t.ratio, 0.75),
              same ? "same" : "different");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const auto option = [&args](const char* name, int fallback) {
    const auto it = std::find(args.begin(), args.end(), name);
    if (it == args.end() || it + 1 == args.end()) return fallback;
    const int value = std::atoi((it + 1)->c_str());
    args.erase(it, it + 2);
    return value;
  };
  const int pairs = option("--pairs", 40), offset_b = option("--offset-b", 0);
  if (args.size() < 3 || pairs < 1 || offset_b < 0) {
    std::fprintf(stderr,
                 "usage: %s KERNEL_A KERNEL_B R,B,H,K[,f32|f64|f16|bf16[,contiguous|head-major]] ... [--pairs N] "
                 "[--offset-b BYTES]\n",
                 argv[0]);
    return 2;
  }
  std::printf("R,B,H,K,dtype,layout,kernel_a,kernel_b,pairs,a_us,b_us,ratio_q25,ratio_median,ratio_q75,outputs\n");
  try {
    for (std::size_t i = 2; i < args.size(); ++i)
      compare(args[0], args[1], parse(args[i]), pairs, static_cast<std::size_t>(offset_b));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_kernel_ab: %s\n", e.what());
    return 1;
  }
}
