// The library's backward (gather_linear::backward) against cuBLASLt GEMM-only on an input
// concatenated beforehand: gradients.x as one (B, R*H) GEMM and gradients.weight as one GEMM on
// the concatenation, the floor a backward that had the concatenation for free would reach. The
// library writes gradients.x in x's own layout and reads x in place. One CSV row per shape and
// layout: all three gradients, the two GEMM gradients, and each alone against its GEMM, then the
// bias gradient alone (a column sum: its rate of reading grad_y against the memory's); the
// backward's results are checked against the comparator's before timing.
// With --forms, for a contiguous x instead: each way (form) the library can compute a gradient,
// forced, to find where copying x (or gradients.x) beats R batched GEMMs of its slices, and (exact
// float32) where each gradient on the tensor cores beats both. With --one-launch, the three
// gradients of small problems in one launch of the library's own kernel against its cuBLAS forms.
// Times: median per backward over CUDA-graph replays, the candidates interleaved, input sets
// rotated past L2.
//
//   backward_timing > backward.csv
//   backward_timing --forms > backward_forms.csv
//   backward_timing --forms R,B,H,K[,f32|bf16] ... > forms.csv     (those shapes only)
//   backward_timing --one-launch R,B,H,K[,f32|f64|f16|bf16] ... > one_launch.csv
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/validate.hpp"
#include "cuda/backward.hpp"
#include "cuda/cublaslt_matmul.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_types.cuh"
#include "cuda/mma_weight_gradient.hpp"
#include "cuda/unfused_cublaslt.hpp"
#include "device_values.cuh"
#include "timing.hpp"

namespace gather_linear::bench {
namespace {

using cuda::check;

struct Shape {
  std::int64_t R, B, H, K;
};

struct Buffers {
  std::vector<void*> allocations;
  std::size_t element;
  explicit Buffers(DType dtype) : element(dtype_size(dtype)) {}
  ~Buffers() {
    for (void* p : allocations) cudaFree(p);
  }
  void* alloc(std::size_t elements) {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<std::size_t>(elements * element, 256)), "cudaMalloc");
    allocations.push_back(p);
    return p;
  }
};

// x, weight and grad_y of one input set; `head_major`: x stored (B, R, H).
struct Set {
  TensorView x, weight, grad_y;
};

// max |a - b| / max |b|, with a[i] compared to b[index(i)].
double disagreement(const std::vector<float>& a, const std::vector<float>& b,
                    const std::function<std::size_t(std::size_t)>& index) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double want = b[index(i)];
    err = std::isnan(a[i]) ? INFINITY : std::max(err, std::abs(double(a[i]) - want));
    scale = std::max(scale, std::abs(want));
  }
  return scale > 0 ? err / scale : err;
}

// Enough input sets, filled, to rotate past L2; x stored (R, B, H), or (B, R, H) if `head_major`.
std::vector<Set> input_sets(const Shape& s, DType dtype, bool head_major, Buffers& buf, cudaStream_t stream) {
  const std::int64_t RH = s.R * s.H;
  const std::size_t nx = s.R * s.B * s.H, nw = s.K * RH, ny = s.B * s.K;
  const Device dev = Device::cuda(0);
  const int sets = timing::rotating_sets(dtype_size(dtype) * (nx + nw + ny), 0);
  std::vector<Set> in;
  for (int i = 0; i < sets; ++i) {
    void *x = buf.alloc(nx), *w = buf.alloc(nw), *dy = buf.alloc(ny);
    fill_uniform(x, nx, dtype, 3 * i + 1, stream);
    fill_uniform(w, nw, dtype, 3 * i + 2, stream);
    fill_uniform(dy, ny, dtype, 3 * i + 3, stream);
    const std::int64_t sr = head_major ? s.H : s.B * s.H, sb = head_major ? RH : s.H;
    in.push_back({TensorView::strided(x, dtype, dev, {s.R, s.B, s.H}, {sr, sb, 1}),
                  TensorView::contiguous(w, dtype, dev, {s.K, RH}), TensorView::contiguous(dy, dtype, dev, {s.B, s.K})});
  }
  return in;
}

// The comparator: gradients.x and gradients.weight as cuBLASLt GEMMs, as if the concatenation
// came for free (x's, made once from set 0; every set's x has its layout and sizes).
struct GemmOnly {
  const Shape& s;
  DType dtype;
  const std::vector<Set>& in;
  cudaStream_t stream;
  void *concatenation, *grad_x, *grad_weight, *scratch;  // grad_x: a (B, R*H) matrix

  GemmOnly(const Shape& shape, DType type, const std::vector<Set>& sets, Buffers& buf, cudaStream_t on)
      : s(shape), dtype(type), in(sets), stream(on) {
    const std::size_t nx = s.R * s.B * s.H, nw = s.K * s.R * s.H;
    concatenation = buf.alloc(nx), grad_x = buf.alloc(nx), grad_weight = buf.alloc(nw);
    scratch = buf.alloc(cuda::kGemmWorkspaceBytes / buf.element);
    cuda::concatenate(validate_inputs(in[0].x, in[0].weight, std::nullopt), concatenation, stream);
  }
  // (R*H x B) = W^T (R*H x K) * grad_y^T (K x B) in cuBLAS's column-major terms ...
  void input_gradient(int set) const {
    const std::int64_t RH = s.R * s.H;
    cuda::StridedBatchedGemm dx;
    dx.dtype = dtype, dx.m = RH, dx.n = s.B, dx.k = s.K;
    dx.a = {in[set].weight.data, false, RH, 0};
    dx.b = {in[set].grad_y.data, false, s.K, 0};
    dx.d = grad_x, dx.ldd = RH;
    cuda::run_gemm(dx, 0, scratch, stream);
  }
  // ... and (R*H x K) = cat^T (R*H x B) * grad_y (B x K).
  void weight_gradient(int set) const {
    const std::int64_t RH = s.R * s.H;
    cuda::StridedBatchedGemm dw;
    dw.dtype = dtype, dw.m = RH, dw.n = s.K, dw.k = s.B;
    dw.a = {concatenation, false, RH, 0};
    dw.b = {in[set].grad_y.data, true, s.K, 0};
    dw.d = grad_weight, dw.ldd = RH;
    cuda::run_gemm(dw, 0, scratch, stream);
  }
  void operator()(int set) const {
    input_gradient(set);
    weight_gradient(set);
  }
};

void run_shape(const Shape& s, DType dtype, bool head_major, cudaStream_t stream) {
  const std::int64_t RH = s.R * s.H;
  const std::size_t nx = s.R * s.B * s.H, nw = s.K * RH;
  const Device dev = Device::cuda(0);
  Buffers buf(dtype);
  const std::vector<Set> in = input_sets(s, dtype, head_major, buf, stream);
  const int sets = static_cast<int>(in.size());
  // Outputs, shared by the sets: gradients.x in x's layout; the comparator's (B, R*H) and dW.
  void *grad_x = buf.alloc(nx), *grad_w = buf.alloc(nw), *grad_b = buf.alloc(s.K);
  const GemmOnly gemm_only(s, dtype, in, buf, stream);
  const TensorView x0 = in[0].x;
  Gradients all;
  all.x = TensorView::strided(grad_x, dtype, dev, {s.R, s.B, s.H}, {x0.stride(0), x0.stride(1), 1});
  all.weight = TensorView::contiguous(grad_w, dtype, dev, {s.K, RH});
  all.bias = TensorView::contiguous(grad_b, dtype, dev, {s.K});
  Gradients no_bias = all;
  no_bias.bias.reset();
  Options options;
  const std::size_t ws = backward_workspace_bytes(in[0].grad_y, in[0].x, in[0].weight, all, options);
  options.workspace = {buf.alloc(ws / buf.element + 1), ws};

  const auto library = [&](const Gradients& g) {
    return [&, g](int set) { backward(in[set].grad_y, in[set].x, in[set].weight, g, options, stream); };
  };
  const auto gemm_dx = [&](int set) { gemm_only.input_gradient(set); };
  const auto gemm_dw = [&](int set) { gemm_only.weight_gradient(set); };
  Gradients x_only, weight_only, bias_only;
  x_only.x = all.x;
  weight_only.weight = all.weight;
  bias_only.bias = all.bias;

  // The library's results against the comparator's (set 0; dX indexed into the (B, R*H) layout).
  library(all)(0);
  gemm_only(0);
  check(cudaStreamSynchronize(stream), "check runs");
  const auto download = [dtype](const void* p, std::size_t n) { return download_as_float(p, n, dtype); };
  const double dx_err = disagreement(download(grad_x, nx), download(gemm_only.grad_x, nx), [&](std::size_t i) {
    // grad_x element i in storage order of x's layout -> (r, b, h) -> the comparator's b*RH + r*H + h
    std::size_t r, b, h;
    if (head_major)
      b = i / RH, r = (i % RH) / s.H, h = i % s.H;
    else
      r = i / (s.B * s.H), b = (i / s.H) % s.B, h = i % s.H;
    return b * RH + r * s.H + h;
  });
  // The comparator's column-major (R*H x K) with ld R*H is the row-major (K, R*H) itself.
  const double dw_err =
      disagreement(download(grad_w, nw), download(gemm_only.grad_weight, nw), [](std::size_t i) { return i; });

  const double flops = 4.0 * s.B * s.K * RH;
  const int repeats = static_cast<int>(std::clamp(4e10 / flops, 10.0, 200.0));
  const auto t = timing::time_gpu_interleaved(
      {library(all), library(no_bias), gemm_only, library(x_only), gemm_dx, library(weight_only), gemm_dw,
       library(bias_only)},
      sets, repeats, stream);
  const double grad_y_bytes = static_cast<double>(s.B * s.K * dtype_size(dtype));
  std::printf("%lld,%lld,%lld,%lld,%s,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.2e,%.2e,%.3f,%.1f\n",
              (long long)s.R, (long long)s.B, (long long)s.H, (long long)s.K, std::string(dtype_name(dtype)).c_str(),
              head_major ? "head-major" : "contiguous", t[0].graph_us, t[1].graph_us, t[2].graph_us,
              t[1].graph_us / t[2].graph_us, flops / t[1].graph_us / 1e6, t[3].graph_us, t[4].graph_us,
              t[3].graph_us / t[4].graph_us, t[5].graph_us, t[6].graph_us, t[5].graph_us / t[6].graph_us, dx_err,
              dw_err, t[7].graph_us, grad_y_bytes / t[7].graph_us / 1e3);
  std::fflush(stdout);
}

// A contiguous x and gradients.x: gradients.weight by batched slices and by concatenation,
// gradients.x by batched slices and by split, each against its GEMM on a concatenated layout.
void run_forms(const Shape& s, DType dtype, cudaStream_t stream) {
  const std::int64_t RH = s.R * s.H;
  const std::size_t nx = s.R * s.B * s.H, nw = s.K * RH;
  const Device dev = Device::cuda(0);
  Buffers buf(dtype);
  const std::vector<Set> in = input_sets(s, dtype, /*head_major=*/false, buf, stream);
  const int sets = static_cast<int>(in.size());
  void *grad_x = buf.alloc(nx), *grad_w = buf.alloc(nw), *cat = buf.alloc(nx);
  Gradients x_only, weight_only;
  x_only.x = TensorView::contiguous(grad_x, dtype, dev, {s.R, s.B, s.H});
  weight_only.weight = TensorView::contiguous(grad_w, dtype, dev, {s.K, RH});
  // The GEMMs on concatenated layouts: gradients.x into a (B, R*H) matrix (the side_by_side form
  // of a head-major x's gradient), gradients.weight from the concatenation (made once).
  Gradients unsplit_x;
  unsplit_x.x = TensorView::strided(cat, dtype, dev, {s.R, s.B, s.H}, {s.H, RH, 1});
  const auto problem = [&](int set, const Gradients& g) {
    return validate_backward_args(in[set].grad_y, in[set].x, in[set].weight, g);
  };
  std::vector<void*> concatenations;
  for (int set = 0; set < sets; ++set) {
    concatenations.push_back(buf.alloc(nx));
    cuda::concatenate(problem(set, weight_only).forward, concatenations.back(), stream);
  }

  using cuda::InputGradientForm, cuda::WeightGradientForm;
  const auto forced = [](InputGradientForm input, WeightGradientForm weight) {
    cuda::BackwardForms forms;
    forms.input = input, forms.weight = weight;
    return forms;
  };
  struct Candidate {
    const Gradients* gradients;
    cuda::BackwardForms forms;
    bool on_concatenation;  // x replaced by its concatenation viewed head-major
  };
  std::vector<Candidate> candidates = {
      {&weight_only, forced(InputGradientForm::zero, WeightGradientForm::slices_h_unit), false},
      {&weight_only, forced(InputGradientForm::zero, WeightGradientForm::concatenated), false},
      {&weight_only, forced(InputGradientForm::zero, WeightGradientForm::side_by_side), true},
      {&x_only, forced(InputGradientForm::slices_h_unit, WeightGradientForm::zero), false},
      {&x_only, forced(InputGradientForm::split, WeightGradientForm::zero), false},
      {&unsplit_x, forced(InputGradientForm::side_by_side, WeightGradientForm::zero), false},
  };
  // Exact float32's tensor-core forms (3xTF32): gradients.x, then gradients.weight from a
  // contiguous x and from the concatenation read as a head-major x.
  const bool tensor_cores = dtype == DType::float32;
  const bool weight_tensor_cores = tensor_cores && cuda::mma_weight_gradient_why_not(problem(0, weight_only)).empty();
  // Positions in candidates (and so in the timings) of the forms added only for float32.
  const std::size_t input_on_tensor_cores = candidates.size(), weight_on_tensor_cores = input_on_tensor_cores + 1,
                    weight_tiles_forced = weight_on_tensor_cores + 2;
  if (tensor_cores) candidates.push_back({&x_only, forced(InputGradientForm::tensor_cores, WeightGradientForm::zero), false});
  if (weight_tensor_cores)
    for (bool on_concatenation : {false, true})
      candidates.push_back(
          {&weight_only, forced(InputGradientForm::zero, WeightGradientForm::tensor_cores), on_concatenation});
  std::size_t scratch_bytes = 0;
  for (const Candidate& c : candidates)
    scratch_bytes = std::max(scratch_bytes, cuda::plan_backward(problem(0, *c.gradients), c.forms).scratch.total);
  const Workspace scratch{buf.alloc(scratch_bytes / buf.element + 1), scratch_bytes};
  std::vector<std::function<void(int)>> launches;
  for (const Candidate& c : candidates)
    launches.push_back([&, c](int set) {
      BackwardProblem p = problem(set, *c.gradients);
      if (c.on_concatenation) {  // the concatenation read as a head-major x
        p.forward.x = concatenations[static_cast<std::size_t>(set)];
        p.forward.x_stride_r = s.H, p.forward.x_stride_b = RH, p.forward.x_stride_h = 1;
      }
      cuda::run_backward(p, cuda::plan_backward(p, c.forms), Options{}, scratch, stream);
    });
  // ... and each of its tiles without a split reduction, forced (contiguous x).
  if (weight_tensor_cores)
    for (cuda::MmaTile tile : {cuda::MmaTile::rows128_cols64, cuda::MmaTile::rows64_cols64})
      launches.push_back([&, tile](int set) {
        cuda::run_mma_weight_gradient(problem(set, weight_only), {.tile = tile, .parts = 1}, nullptr, stream);
      });
  // gradients.weight on the tensor cores against the batched slices (cuBLAS), set 0, before timing.
  double weight_err = 0;
  if (weight_tensor_cores) {
    const auto weight_by = [&](std::size_t candidate) {
      launches[candidate](0);
      check(cudaStreamSynchronize(stream), "check runs");
      return download_as_float(grad_w, nw, dtype);
    };
    const std::vector<float> slices = weight_by(0), on_tensor_cores = weight_by(weight_on_tensor_cores);
    weight_err = disagreement(on_tensor_cores, slices, [](std::size_t i) { return i; });
  }
  const double flops = 2.0 * s.B * s.K * RH;
  const int repeats = static_cast<int>(std::clamp(2e10 / flops, 10.0, 100.0));
  const auto t = timing::time_gpu_interleaved(launches, sets, repeats, stream);
  std::printf("%lld,%lld,%lld,%lld,%s,%lld,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f", (long long)s.R, (long long)s.B,
              (long long)s.H, (long long)s.K, std::string(dtype_name(dtype)).c_str(), (long long)(s.B * RH),
              t[0].graph_us, t[1].graph_us, t[2].graph_us, t[1].graph_us / t[0].graph_us, t[3].graph_us,
              t[4].graph_us, t[5].graph_us, t[4].graph_us / t[3].graph_us);
  if (tensor_cores)
    std::printf(",%.3f", t[input_on_tensor_cores].graph_us);
  else
    std::printf(",");
  if (weight_tensor_cores) {
    const cuda::WeightGradientLaunch chosen = cuda::mma_weight_gradient_launch(problem(0, weight_only));
    const char* chosen_tile = chosen.tile == cuda::MmaTile::rows128_cols64 ? "128x64" : "64x64";
    std::printf(",%.3f,%.3f,%s,%d,%.3f,%.3f,%.2e\n", t[weight_on_tensor_cores].graph_us,
                t[weight_on_tensor_cores + 1].graph_us, chosen_tile, chosen.parts, t[weight_tiles_forced].graph_us,
                t[weight_tiles_forced + 1].graph_us, weight_err);
  } else {
    std::printf(",,,,,,,\n");
  }
  std::fflush(stdout);
}

// All three gradients in one launch against the forms' cuBLAS calls and column sums (each forced
// through the plan), and against the two GEMMs alone on a pre-concatenated input; `chosen` says
// which the library takes. The one launch's gradients are checked against the forms' first.
void run_one_launch(const Shape& s, DType dtype, bool head_major, cudaStream_t stream) {
  const std::int64_t RH = s.R * s.H;
  const std::size_t nx = s.R * s.B * s.H, nw = s.K * RH;
  const Device dev = Device::cuda(0);
  Buffers buf(dtype);
  const std::vector<Set> in = input_sets(s, dtype, head_major, buf, stream);
  const int sets = static_cast<int>(in.size());
  const TensorView x0 = in[0].x;
  const auto gradients = [&] {
    Gradients g;
    g.x = TensorView::strided(buf.alloc(nx), dtype, dev, {s.R, s.B, s.H}, {x0.stride(0), x0.stride(1), 1});
    g.weight = TensorView::contiguous(buf.alloc(nw), dtype, dev, {s.K, RH});
    g.bias = TensorView::contiguous(buf.alloc(s.K), dtype, dev, {s.K});
    return g;
  };
  const Gradients one = gradients(), forms = gradients();
  const auto problem = [&](int set, const Gradients& g) {
    return validate_backward_args(in[set].grad_y, in[set].x, in[set].weight, g);
  };
  cuda::BackwardForms chosen = cuda::choose_forms(problem(0, forms), Fp32Precision::ieee);
  cuda::BackwardForms forced_one = chosen, forced_forms = chosen;
  forced_one.one_launch = true, forced_forms.one_launch = false;
  const std::size_t scratch_bytes = cuda::plan_backward(problem(0, forms), forced_forms).scratch.total;
  const Workspace scratch{buf.alloc(scratch_bytes / buf.element + 1), scratch_bytes};
  const auto run = [&](const Gradients& g, const cuda::BackwardForms& f) {
    return [&, g, f](int set) {
      const BackwardProblem p = problem(set, g);
      cuda::run_backward(p, cuda::plan_backward(p, f), Options{}, scratch, stream);
    };
  };
  const GemmOnly gemm_only(s, dtype, in, buf, stream);
  run(one, forced_one)(0);
  run(forms, forced_forms)(0);
  check(cudaStreamSynchronize(stream), "check runs");
  const auto download = [dtype](const void* p, std::size_t n) { return download_as_float(p, n, dtype); };
  const auto same = [](std::size_t i) { return i; };
  const double err = std::max({disagreement(download(one.x->data, nx), download(forms.x->data, nx), same),
                               disagreement(download(one.weight->data, nw), download(forms.weight->data, nw), same),
                               disagreement(download(one.bias->data, s.K), download(forms.bias->data, s.K), same)});
  const double flops = 4.0 * s.B * s.K * RH;
  const int repeats = static_cast<int>(std::clamp(4e10 / flops, 10.0, 200.0));
  const auto t = timing::time_gpu_interleaved({run(one, forced_one), run(forms, forced_forms), gemm_only}, sets,
                                              repeats, stream);
  std::printf("%lld,%lld,%lld,%lld,%s,%s,%lld,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.2e\n", (long long)s.R, (long long)s.B,
              (long long)s.H, (long long)s.K, std::string(dtype_name(dtype)).c_str(),
              head_major ? "head-major" : "contiguous", (long long)(s.B * s.K * RH),
              chosen.one_launch ? "one_launch" : "forms", t[0].graph_us, t[1].graph_us, t[2].graph_us,
              t[0].graph_us / t[1].graph_us, t[0].graph_us / t[2].graph_us, err);
  std::fflush(stdout);
}

}  // namespace
}  // namespace gather_linear::bench

// f32, f64, f16; anything else bfloat16.
gather_linear::DType parse_dtype(std::string_view name) {
  using gather_linear::DType;
  return name == "f32" ? DType::float32 : name == "f64" ? DType::float64 : name == "f16" ? DType::float16 : DType::bfloat16;
}

int main(int argc, char** argv) {
  using namespace gather_linear;
  using namespace gather_linear::bench;
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (argc > 1 && std::string_view(argv[1]) == "--one-launch") {
    std::printf("R,B,H,K,dtype,x_layout,products,chosen,one_launch_us,forms_us,gemm_only_us,one_launch_over_forms,"
                "one_launch_over_gemm_only,disagreement\n");
    for (int i = 2; i < argc; ++i) {  // R,B,H,K[,f32|bf16]
      long long R = 0, B = 0, H = 0, K = 0;
      char dtype[8] = "bf16";
      if (std::sscanf(argv[i], "%lld,%lld,%lld,%lld,%7s", &R, &B, &H, &K, dtype) < 4) {
        std::fprintf(stderr, "expected R,B,H,K[,f32|f64|f16|bf16], got %s\n", argv[i]);
        return 2;
      }
      for (bool head_major : {false, true})
        run_one_launch({R, B, H, K}, parse_dtype(dtype), head_major, stream);
    }
    check(cudaStreamDestroy(stream), "cudaStreamDestroy");
    return 0;
  }
  if (argc > 1 && std::string_view(argv[1]) == "--forms") {
    std::printf("R,B,H,K,dtype,x_elements,dw_slices_us,dw_concatenated_us,dw_gemm_only_us,"
                "dw_concatenated_over_slices,dx_slices_us,dx_split_us,dx_gemm_only_us,dx_split_over_slices,"
                "dx_tensor_cores_us,dw_tensor_cores_us,dw_tensor_cores_head_major_us,dw_tensor_cores_tile,"
                "dw_tensor_cores_parts,dw_tensor_cores_128x64_unsplit_us,dw_tensor_cores_64x64_unsplit_us,"
                "dw_tensor_cores_disagreement\n");
    if (argc > 2) {  // the shapes given, R,B,H,K[,f32|bf16] (bf16 when the dtype is left out)
      for (int i = 2; i < argc; ++i) {
        long long R = 0, B = 0, H = 0, K = 0;
        char dtype[8] = "bf16";
        if (std::sscanf(argv[i], "%lld,%lld,%lld,%lld,%7s", &R, &B, &H, &K, dtype) < 4) {
          std::fprintf(stderr, "expected R,B,H,K[,f32|bf16], got %s\n", argv[i]);
          return 2;
        }
        run_forms({R, B, H, K}, std::string_view(dtype) == "f32" ? DType::float32 : DType::bfloat16, stream);
      }
      check(cudaStreamDestroy(stream), "cudaStreamDestroy");
      return 0;
    }
    // Narrow slices (and H = 128, where batching is the rule) from the seed's size to 64M elements.
    for (DType dtype : {DType::bfloat16, DType::float32})
      for (std::int64_t H : {32, 64, 128})
        for (std::int64_t R : {4, 16})
          for (std::int64_t B : {12, 64, 512, 4096, 16384})
            for (std::int64_t K : {512, 4096}) {
              if (dtype == DType::float32 && B * K * R * H > (std::int64_t{1} << 33)) continue;  // slow, big
              run_forms({R, B, H, K}, dtype, stream);
            }
  } else {
    std::printf("R,B,H,K,dtype,x_layout,backward_us,backward_no_bias_us,gemm_only_us,"
                "no_bias_over_gemm_only,no_bias_tflops,dx_us,gemm_dx_us,dx_over_gemm,dw_us,gemm_dw_us,dw_over_gemm,"
                "dx_disagreement,dw_disagreement,bias_us,bias_read_gbps\n");
    const Shape shapes[] = {{4, 12, 32, 56},      {8, 1024, 128, 1024}, {26, 4096, 64, 1024}, {16, 4096, 32, 2048},
                            {4, 16384, 64, 1024}, {4, 4096, 256, 4096}, {32, 8192, 128, 4096}, {8, 8192, 512, 4096},
                            {4, 16384, 64, 8192}};
    for (const Shape& s : shapes)
      for (DType dtype : {DType::bfloat16, DType::float32})
        for (bool head_major : {false, true}) {
          if (dtype == DType::float32 && s.B * s.K * s.R * s.H > (std::int64_t{1} << 33)) continue;  // slow, big
          run_shape(s, dtype, head_major, stream);
        }
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return 0;
}
