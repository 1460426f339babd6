// gather-linear: verify the fused operator against the exact reference, then time it against
// the unfused baseline (concatenate, then one GEMM with bias: what PyTorch eager runs) and, on
// the GPU, cuBLAS GEMM-only on an input concatenated beforehand.
//
//   gather-linear                          the seed problem (R=4 B=12 H=32 K=56 float32), GPU if any
//   gather-linear --shape 8,1024,128,1024 --dtype bf16 --device cuda --format csv
//   gather-linear --list-kernels
//
// Exit status: 0 on PASS, 1 on FAIL (wrong result), 2 on bad usage or an error.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "host_buffer.hpp"
#include "timing.hpp"
#include "core/numeric.hpp"
#include "core/validate.hpp"
#include "cpu/cpu_kernels.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/unfused_cublaslt.hpp"
#include "gather_linear/gather_linear.hpp"

namespace gather_linear::cli {
namespace {

struct Config {
  std::int64_t R = 4, B = 12, H = 32, K = 56;
  DType dtype = DType::float32;
  std::string device = "auto";
  std::string kernel = "auto";
  std::string layout = "contiguous";
  std::string format = "table";
  bool bias = true;
  bool tf32 = false;
  int repeats = 0;  // 0: chosen from the problem size
  std::uint32_t seed = 42;
};

constexpr const char* kUsage =
    "usage: gather-linear [options]\n"
    "  --shape R,B,H,K        problem size (default 4,12,32,56: the seed problem)\n"
    "  --R N --B N --H N --K N  set one size\n"
    "  --dtype f32|f16|bf16|f64 (default f32)\n"
    "  --tf32                 allow TF32 for float32 on the GPU (default: exact float32)\n"
    "  --device auto|cpu|cuda (default auto: the GPU if one is present)\n"
    "  --kernel NAME          force a kernel (default auto; see --list-kernels)\n"
    "  --layout contiguous|head-major  x as (R,B,H) or a (B,R,H) tensor viewed as (R,B,H)\n"
    "  --no-bias              no bias term\n"
    "  --repeats N            timed repeats (default: chosen from the problem size)\n"
    "  --format table|csv|json\n"
    "  --seed N               input seed (default 42)\n"
    "  --list-kernels         print the kernels of this build and exit\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "gather-linear: " << message << "\n" << kUsage;
  std::exit(2);
}

std::int64_t parse_int(const std::string& text, const std::string& flag) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used != text.size() || v < 0) throw std::invalid_argument(text);
    return v;
  } catch (const std::exception&) {
    usage_error(flag + " expects a non-negative integer, got '" + text + "'");
  }
}

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return DType::float32;
  if (s == "f16" || s == "float16") return DType::float16;
  if (s == "bf16" || s == "bfloat16") return DType::bfloat16;
  if (s == "f64" || s == "float64") return DType::float64;
  usage_error("--dtype expects f32, f16, bf16 or f64, got '" + s + "'");
}

Config parse(int argc, char** argv) {
  Config c;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage_error(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto one_of = [](const std::string& v, std::initializer_list<const char*> allowed, const std::string& flag) {
    for (const char* a : allowed)
      if (v == a) return v;
    usage_error(flag + " got '" + v + "'");
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--list-kernels") {
      for (const auto& k : available_kernels())
        std::printf("%-22s %-5s %-8s %s\n", std::string(k.name).c_str(), k.device == DeviceType::cpu ? "cpu" : "cuda",
                    k.fused ? "fused" : "unfused", std::string(k.description).c_str());
      std::exit(0);
    } else if (arg == "--shape") {
      std::stringstream ss(value(i));
      std::string part;
      std::vector<std::int64_t> v;
      while (std::getline(ss, part, ',')) v.push_back(parse_int(part, "--shape"));
      if (v.size() != 4) usage_error("--shape expects R,B,H,K");
      c.R = v[0], c.B = v[1], c.H = v[2], c.K = v[3];
    } else if (arg == "--R") c.R = parse_int(value(i), arg);
    else if (arg == "--B") c.B = parse_int(value(i), arg);
    else if (arg == "--H") c.H = parse_int(value(i), arg);
    else if (arg == "--K") c.K = parse_int(value(i), arg);
    else if (arg == "--dtype") c.dtype = parse_dtype(value(i));
    else if (arg == "--tf32") c.tf32 = true;
    else if (arg == "--device") c.device = one_of(value(i), {"auto", "cpu", "cuda"}, arg);
    else if (arg == "--kernel") c.kernel = value(i);
    else if (arg == "--layout") c.layout = one_of(value(i), {"contiguous", "head-major"}, arg);
    else if (arg == "--no-bias") c.bias = false;
    else if (arg == "--repeats") c.repeats = static_cast<int>(parse_int(value(i), arg));
    else if (arg == "--format") c.format = one_of(value(i), {"table", "csv", "json"}, arg);
    else if (arg == "--seed") c.seed = static_cast<std::uint32_t>(parse_int(value(i), arg));
    else usage_error("unknown option '" + arg + "'");
  }
  if (c.device == "auto") c.device = cuda_device_count() > 0 ? "cuda" : "cpu";
  return c;
}

// One input set in host memory, laid out as the config says, filled from the seed.
struct HostInputs {
  HostBytes x, weight, bias;
};

HostInputs make_host_inputs(const Config& c, std::uint32_t seed) {
  const std::size_t es = dtype_size(c.dtype);
  HostInputs in;
  in.x.resize(static_cast<std::size_t>(c.R * c.B * c.H) * es);
  in.weight.resize(static_cast<std::size_t>(c.K * c.R * c.H) * es);
  in.bias.resize(static_cast<std::size_t>(c.K) * es);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  visit_floating_dtype(c.dtype, [&]<class T>() {
    for (auto* buffer : {&in.x, &in.weight, &in.bias}) {
      T* p = reinterpret_cast<T*>(buffer->data());
      for (std::size_t i = 0; i < buffer->size() / sizeof(T); ++i) p[i] = store_as<T>(dist(rng));
    }
  });
  return in;
}

struct Views {
  TensorView x, weight;
  std::optional<TensorView> bias;
  TensorView y;
};

Views make_views(const Config& c, const void* x, const void* weight, const void* bias, void* y, Device device) {
  Views v;
  // head-major: storage (B, R, H) viewed as (R, B, H)
  const std::int64_t sx0 = c.layout == "contiguous" ? c.B * c.H : c.H;
  const std::int64_t sx1 = c.layout == "contiguous" ? c.H : c.R * c.H;
  v.x = TensorView::strided(x, c.dtype, device, {c.R, c.B, c.H}, {sx0, sx1, 1});
  v.weight = TensorView::contiguous(weight, c.dtype, device, {c.K, c.R * c.H});
  if (c.bias) v.bias = TensorView::contiguous(bias, c.dtype, device, {c.K});
  v.y = TensorView::contiguous(y, c.dtype, device, {c.B, c.K});
  return v;
}

struct Accuracy {
  double rel_err = 0;    // max |y - ref| / max |ref| over the sampled rows
  double max_abs = 0;    // max |y - ref| over the sampled rows
  bool all_written = true;  // no NaN poison left anywhere in y
};

// The exact reference on up to 64 evenly spaced rows (all rows of small problems).
struct Reference {
  std::vector<std::int64_t> rows;
  std::vector<double> values;
};

Reference compute_reference(const Config& c, const HostInputs& in) {
  HostBytes scratch_y(static_cast<std::size_t>(c.B * c.K) * dtype_size(c.dtype));
  const Views v = make_views(c, in.x.data(), in.weight.data(), in.bias.data(), scratch_y.data(), Device::cpu());
  const Problem p = validate_forward_args(v.x, v.weight, v.bias, v.y);
  Reference ref;
  const std::int64_t samples = std::min<std::int64_t>(c.B, 64);
  for (std::int64_t i = 0; i < samples; ++i) ref.rows.push_back(samples == 1 ? 0 : i * (c.B - 1) / (samples - 1));
  ref.values = cpu::reference_forward_rows(p, ref.rows);
  return ref;
}

Accuracy measure(const Config& c, const HostBytes& y, const Reference& ref) {
  Accuracy a;
  visit_floating_dtype(c.dtype, [&]<class T>() {
    const T* yp = reinterpret_cast<const T*>(y.data());
    for (std::int64_t i = 0; i < c.B * c.K; ++i) a.all_written = a.all_written && !std::isnan(load_as<double>(yp[i]));
    double max_ref = 0;
    for (std::size_t i = 0; i < ref.rows.size(); ++i)
      for (std::int64_t k = 0; k < c.K; ++k) {
        const double r = ref.values[i * static_cast<std::size_t>(c.K) + static_cast<std::size_t>(k)];
        const double e = std::abs(load_as<double>(yp[ref.rows[i] * c.K + k]) - r);
        a.max_abs = std::isnan(e) ? e : std::max(a.max_abs, e);
        max_ref = std::max(max_ref, std::abs(r));
      }
    a.rel_err = max_ref > 0 ? a.max_abs / max_ref : a.max_abs;
  });
  return a;
}

// float32 (without TF32) and float64 claim their own accuracy; TF32 and 16-bit results are
// judged against the unfused baseline's error: at most twice it plus one unit of rounding.
bool passes(const Config& c, const Accuracy& fused, const Accuracy& baseline) {
  if (!fused.all_written || std::isnan(fused.rel_err)) return false;
  switch (c.dtype) {
    case DType::float64: return fused.rel_err <= 1e-12;
    case DType::float16: return fused.rel_err <= 2 * baseline.rel_err + 0x1p-11;
    case DType::bfloat16: return fused.rel_err <= 2 * baseline.rel_err + 0x1p-8;
    default: return c.tf32 ? fused.rel_err <= 2 * baseline.rel_err + 0x1p-11 : fused.rel_err <= 1e-5;
  }
}

struct Report {
  std::string device, kernel;
  Accuracy fused, baseline;
  bool pass = false;
  double fused_us = 0, unfused_us = 0, gemm_only_us = -1;  // per forward; GPU: graph replay
  double fused_launch_us = 0, unfused_launch_us = 0;       // GPU: event pair around one launch
  double fused_stream_us = 0;                               // GPU: per forward, launched back to back
  std::string timing;                                      // how the times were taken
};

Options options_for(const Config& c, std::string_view kernel) {
  Options o;
  o.kernel = kernel;
  o.fp32_precision = c.tf32 ? Fp32Precision::tf32 : Fp32Precision::ieee;
  return o;
}

int default_repeats(const Config& c) {
  const double flops = 2.0 * c.B * c.K * c.R * c.H;
  return static_cast<int>(std::clamp(2e10 / std::max(flops, 1.0), 15.0, 200.0));
}

Report run_cpu(const Config& c) {
  Report rep;
  rep.device = "cpu";
  const HostInputs in = make_host_inputs(c, c.seed);
  const Reference ref = compute_reference(c, in);
  HostBytes y(static_cast<std::size_t>(c.B * c.K) * dtype_size(c.dtype));
  const Views v = make_views(c, in.x.data(), in.weight.data(), in.bias.data(), y.data(), Device::cpu());
  const Options fused = options_for(c, c.kernel), unfused = options_for(c, "cpu_unfused_blas");
  rep.kernel = select_kernel(v.x, v.weight, v.bias, v.y, fused);

  auto run_checked = [&](const Options& o) {
    visit_floating_dtype(c.dtype, [&]<class T>() {
      T* p = reinterpret_cast<T*>(y.data());
      for (std::int64_t i = 0; i < c.B * c.K; ++i) p[i] = store_as<T>(std::nan(""));
    });
    forward(v.x, v.weight, v.bias, v.y, o);
    return measure(c, y, ref);
  };
  rep.fused = run_checked(fused);
  rep.baseline = run_checked(unfused);
  rep.pass = passes(c, rep.fused, rep.baseline);

  // Unless --repeats says, about 50 ms of calls: a few microseconds' problem (the seed) gets
  // thousands of rounds, where 30 calls timed one candidate after the other had swung its ratio
  // between 0.76 and 0.97 across runs; a large one at least min(default_repeats, 30).
  const timing::CpuTimings t = timing::time_cpu_interleaved(
      {[&] { forward(v.x, v.weight, v.bias, v.y, fused); }, [&] { forward(v.x, v.weight, v.bias, v.y, unfused); }},
      c.repeats, std::min(default_repeats(c), 30), 50'000);
  rep.fused_us = t.median_us[0];
  rep.unfused_us = t.median_us[1];
  rep.timing = "median wall clock of " + std::to_string(t.rounds) + " calls each, fused and unfused taking turns";
  return rep;
}

// Device copies of the inputs, enough sets that rotating through them spans more than twice L2.
struct DeviceSets {
  std::vector<void*> buffers;
  std::vector<Views> views;
  void* y = nullptr;
  void* concatenated = nullptr;    // for the GEMM-only comparator
  void* gemm_workspace = nullptr;  // cuBLASLt's scratch, likewise
  ~DeviceSets() {
    for (void* p : buffers) cudaFree(p);
  }
  void* alloc(std::size_t bytes) {
    void* p = nullptr;
    cuda::check(cudaMalloc(&p, std::max<std::size_t>(bytes, 16)), "cudaMalloc");
    buffers.push_back(p);
    return p;
  }
};

Report run_cuda(const Config& c) {
  using cuda::check;
  Report rep;
  const int device = 0;
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  rep.device = prop.name;
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  const HostInputs in = make_host_inputs(c, c.seed);
  const Reference ref = compute_reference(c, in);
  const std::size_t es = dtype_size(c.dtype);
  const std::size_t set_bytes = in.x.size() + in.weight.size() + in.bias.size();
  const int sets = timing::rotating_sets(set_bytes, device);

  DeviceSets d;
  const std::size_t y_bytes = static_cast<std::size_t>(c.B * c.K) * es;
  d.y = d.alloc(y_bytes);
  d.concatenated = d.alloc(static_cast<std::size_t>(c.B * c.R * c.H) * es);
  d.gemm_workspace = d.alloc(cuda::kGemmWorkspaceBytes);
  for (int s = 0; s < sets; ++s) {
    void* x = d.alloc(in.x.size());
    void* w = d.alloc(in.weight.size());
    void* b = d.alloc(in.bias.size());
    check(cudaMemcpy(x, in.x.data(), in.x.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(w, in.weight.data(), in.weight.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(b, in.bias.data(), in.bias.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    d.views.push_back(make_views(c, x, w, b, d.y, Device::cuda(device)));
  }
  // From pageable memory cudaMemcpy may return before its last bytes land, and the forwards run on
  // a non-blocking stream, which does not wait for it.
  check(cudaDeviceSynchronize(), "cudaMemcpy");
  const Options fused = options_for(c, c.kernel), unfused = options_for(c, "cuda_unfused_cublaslt");
  const Views& v0 = d.views[0];
  rep.kernel = select_kernel(v0.x, v0.weight, v0.bias, v0.y, fused);
  // The unfused baseline's concatenation buffer comes from the caller, as a framework would.
  const std::size_t ws_bytes = workspace_bytes(v0.x, v0.weight, v0.bias, v0.y, unfused);
  Options unfused_ws = unfused;
  unfused_ws.workspace = {d.alloc(ws_bytes), ws_bytes};

  auto run_checked = [&](const Options& o) {
    check(cudaMemsetAsync(d.y, 0xff, y_bytes, stream), "cudaMemsetAsync");  // all-ones bits: NaN in every dtype
    forward(v0.x, v0.weight, v0.bias, v0.y, o, stream);
    check(cudaStreamSynchronize(stream), "forward");
    HostBytes y(y_bytes);
    check(cudaMemcpy(y.data(), d.y, y_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return measure(c, y, ref);
  };
  rep.fused = run_checked(fused);
  rep.baseline = run_checked(unfused_ws);
  rep.pass = passes(c, rep.fused, rep.baseline);

  const int repeats = c.repeats > 0 ? c.repeats : default_repeats(c);
  auto launch = [&](const Options& o) {
    return [&, o](int s) { forward(d.views[s].x, d.views[s].weight, d.views[s].bias, d.views[s].y, o, stream); };
  };
  // GEMM-only: the same cuBLASLt GEMM-with-bias the baseline runs, on input concatenated beforehand.
  {
    const Problem p = validate_forward_args(v0.x, v0.weight, v0.bias, v0.y);
    cuda::concatenate(p, d.concatenated, stream);
    check(cudaStreamSynchronize(stream), "concatenate");
  }
  const auto gemm_only = [&](int s) {
    const Views& v = d.views[s];
    const Problem p = validate_forward_args(v.x, v.weight, v.bias, v.y);
    cuda::gemm_on_concatenated(p, d.concatenated, c.tf32 ? Fp32Precision::tf32 : Fp32Precision::ieee, d.gemm_workspace,
                               stream);
  };
  const std::vector<timing::GpuTiming> t =
      timing::time_gpu_interleaved({launch(fused), launch(unfused_ws), gemm_only}, sets, repeats, stream);
  const timing::GpuTiming &tf = t[0], &tu = t[1], &tg = t[2];
  rep.fused_us = tf.graph_us, rep.unfused_us = tu.graph_us, rep.gemm_only_us = tg.graph_us;
  rep.fused_launch_us = tf.event_us, rep.unfused_launch_us = tu.event_us;
  rep.fused_stream_us = tf.stream_us;
  rep.timing = "median over " + std::to_string(repeats) + " CUDA-graph replays (fused, unfused, GEMM-only " +
               "interleaved), " + std::to_string(sets) + " rotating input sets";
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return rep;
}

void print(const Config& c, const Report& r) {
  const double flops = 2.0 * c.B * c.K * c.R * c.H;
  const double bytes = static_cast<double>(dtype_size(c.dtype)) *
                       static_cast<double>(c.R * c.B * c.H + c.K * c.R * c.H + (c.bias ? c.K : 0) + c.B * c.K);
  const double tflops = flops / r.fused_us / 1e6, gbs = bytes / r.fused_us / 1e3;
  const double speedup = r.unfused_us / r.fused_us;
  const std::string dtype = std::string(dtype_name(c.dtype)) + (c.tf32 ? "+tf32" : "");
  const char* status = r.pass ? "PASS" : "FAIL";
  if (c.format == "csv") {
    std::printf("device,kernel,R,B,H,K,dtype,layout,bias,rel_err,baseline_rel_err,status,fused_us,unfused_us,"
                "gemm_only_us,fused_launch_us,unfused_launch_us,speedup_vs_unfused,tflops,gbs\n");
    std::printf("%s,%s,%lld,%lld,%lld,%lld,%s,%s,%d,%.3e,%.3e,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f\n",
                r.device.c_str(), r.kernel.c_str(), (long long)c.R, (long long)c.B, (long long)c.H, (long long)c.K,
                dtype.c_str(), c.layout.c_str(), c.bias ? 1 : 0, r.fused.rel_err, r.baseline.rel_err, status,
                r.fused_us, r.unfused_us, r.gemm_only_us, r.fused_launch_us, r.unfused_launch_us, speedup, tflops, gbs);
    return;
  }
  if (c.format == "json") {
    std::printf("{\"device\": \"%s\", \"kernel\": \"%s\", \"R\": %lld, \"B\": %lld, \"H\": %lld, \"K\": %lld, "
                "\"dtype\": \"%s\", \"layout\": \"%s\", \"bias\": %s, \"rel_err\": %.3e, \"baseline_rel_err\": %.3e, "
                "\"status\": \"%s\", \"fused_us\": %.3f, \"unfused_us\": %.3f, \"gemm_only_us\": %.3f, "
                "\"fused_launch_us\": %.3f, \"unfused_launch_us\": %.3f, \"fused_stream_us\": %.3f, "
                "\"speedup_vs_unfused\": %.3f, \"tflops\": %.3f, \"gbs\": %.1f, \"timing\": \"%s\"}\n",
                r.device.c_str(), r.kernel.c_str(), (long long)c.R, (long long)c.B, (long long)c.H, (long long)c.K,
                dtype.c_str(), c.layout.c_str(), c.bias ? "true" : "false", r.fused.rel_err, r.baseline.rel_err,
                status, r.fused_us, r.unfused_us, r.gemm_only_us, r.fused_launch_us, r.unfused_launch_us,
                r.fused_stream_us, speedup, tflops, gbs, r.timing.c_str());
    return;
  }
  std::printf("gather-linear  R=%lld B=%lld H=%lld K=%lld  %s  layout=%s  bias=%s  on %s\n", (long long)c.R,
              (long long)c.B, (long long)c.H, (long long)c.K, dtype.c_str(), c.layout.c_str(), c.bias ? "yes" : "no",
              r.device.c_str());
  std::printf("verify   %-24s rel err %.2e  max abs err %.2e  (unfused baseline: rel err %.2e)  %s\n",
              r.kernel.c_str(), r.fused.rel_err, r.fused.max_abs, r.baseline.rel_err, status);
  std::printf("time     (%s)\n", r.timing.c_str());
  std::printf("  fused    %-24s %12.3f us  %8.3f TFLOP/s  %8.1f GB/s\n", r.kernel.c_str(), r.fused_us, tflops, gbs);
  std::printf("  unfused  %-24s %12.3f us\n", c.device == "cpu" ? "cat + OpenBLAS gemm" : "cat + cuBLASLt gemm+bias",
              r.unfused_us);
  if (r.gemm_only_us >= 0)
    std::printf("  cuBLASLt GEMM-only on pre-concatenated input %6.3f us\n", r.gemm_only_us);
  if (c.device == "cuda")
    std::printf("  one launch from the host (event pair): fused %.3f us, unfused %.3f us; fused launched back to "
                "back %.3f us\n",
                r.fused_launch_us, r.unfused_launch_us, r.fused_stream_us);
  std::printf("speedup  fused vs unfused: %.2fx\n", speedup);
}

}  // namespace
}  // namespace gather_linear::cli

int main(int argc, char** argv) {
  using namespace gather_linear::cli;
  const Config config = parse(argc, argv);
  try {
    const Report report = config.device == "cuda" ? run_cuda(config) : run_cpu(config);
    print(config, report);
    return report.pass ? 0 : 1;
  } catch (const gather_linear::Error& e) {
    std::cerr << "gather-linear: error: " << e.what() << "\n";
    return 2;
  }
}
