// The library's CPU backward (gather_linear::backward) against OpenBLAS GEMM-only on an input
// concatenated beforehand (dX as one (B, R*H) sgemm, dW as one sgemm on the concatenation: the
// floor with the concatenation for free), and against the unfused backward eager PyTorch runs on
// a CPU without MKL (concatenate, the two sgemms, then dX copied back into x's layout). float32,
// contiguous x and gradient. Median wall clock per candidate; each result is checked against the
// unfused one first.
//
//   backward_cpu_timing > backward_cpu.csv
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "gather_linear/gather_linear.hpp"
#include "host_buffer.hpp"
#include "timing.hpp"

namespace {

using namespace gather_linear;

struct Shape {
  std::int64_t R, B, H, K;
};

void concatenate(const HostVector<float>& x, const Shape& s, HostVector<float>& cat) {
  for (std::int64_t r = 0; r < s.R; ++r)
    for (std::int64_t b = 0; b < s.B; ++b)
      std::copy_n(&x[(r * s.B + b) * s.H], s.H, &cat[b * s.R * s.H + r * s.H]);
}

// dX_cat (B, R*H) = dY (B, K) * W (K, R*H); dW (K, R*H) = dY^T (K, B) * cat (B, R*H).
void gemms(const Shape& s, const float* dy, const float* w, const float* cat, float* dx_cat, float* dw) {
  const auto i = [](std::int64_t v) { return static_cast<blasint>(v); };
  const std::int64_t RH = s.R * s.H;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i(s.B), i(RH), i(s.K), 1.f, dy, i(s.K), w, i(RH), 0.f,
              dx_cat, i(RH));
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i(s.K), i(RH), i(s.B), 1.f, dy, i(s.K), cat, i(RH), 0.f, dw,
              i(RH));
}

double disagreement(const HostVector<float>& a, const HostVector<float>& b) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::isnan(a[i]) ? INFINITY : std::max(err, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0 ? err / scale : err;
}

void run_shape(const Shape& s) {
  const std::int64_t RH = s.R * s.H;
  HostVector<float> x(s.R * s.B * s.H), w(s.K * RH), dy(s.B * s.K);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (auto* v : {&x, &w, &dy})
    for (float& e : *v) e = dist(rng);
  HostVector<float> dx(x.size()), dw(w.size()), cat(x.size()), dx_cat(x.size()), dw_ref(w.size()), dx_ref(x.size());

  const Device cpu = Device::cpu();
  const auto xv = TensorView::contiguous(x.data(), DType::float32, cpu, {s.R, s.B, s.H});
  const auto wv = TensorView::contiguous(w.data(), DType::float32, cpu, {s.K, RH});
  const auto dyv = TensorView::contiguous(dy.data(), DType::float32, cpu, {s.B, s.K});
  Gradients g;
  g.x = TensorView::contiguous(dx.data(), DType::float32, cpu, {s.R, s.B, s.H});
  g.weight = TensorView::contiguous(dw.data(), DType::float32, cpu, {s.K, RH});

  const auto library = [&] { backward(dyv, xv, wv, g); };
  concatenate(x, s, cat);
  const auto gemm_only = [&] { gemms(s, dy.data(), w.data(), cat.data(), dx_cat.data(), dw_ref.data()); };
  const auto unfused = [&] {
    concatenate(x, s, cat);
    gemms(s, dy.data(), w.data(), cat.data(), dx_cat.data(), dw_ref.data());
    for (std::int64_t r = 0; r < s.R; ++r)
      for (std::int64_t b = 0; b < s.B; ++b)
        std::copy_n(&dx_cat[b * RH + r * s.H], s.H, &dx_ref[(r * s.B + b) * s.H]);
  };

  library();
  unfused();
  const double dx_err = disagreement(dx, dx_ref), dw_err = disagreement(dw, dw_ref);
  const double flops = 4.0 * s.B * s.K * RH;
  const int repeats = static_cast<int>(std::clamp(3e10 / flops, 5.0, 200.0));
  // One candidate after another, each after a pause: OpenBLAS's threads spin for up to about a
  // tenth of a second after a call (OpenMP's, the library's, far shorter), and on a 2-core
  // machine a candidate timed meanwhile shares its cores with them.
  const auto timed = [&](const std::function<void()>& run) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return timing::time_cpu_us(run, repeats);
  };
  const double t[] = {timed(library), timed(gemm_only), timed(unfused)};
  std::printf("%lld,%lld,%lld,%lld,float32,%.1f,%.1f,%.1f,%.3f,%.3f,%.2e,%.2e\n", (long long)s.R, (long long)s.B,
              (long long)s.H, (long long)s.K, t[0], t[1], t[2], t[0] / t[1], t[0] / t[2], dx_err, dw_err);
  std::fflush(stdout);
}

}  // namespace

int main() {
  std::printf("R,B,H,K,dtype,backward_us,gemm_only_us,unfused_us,backward_over_gemm_only,backward_over_unfused,"
              "dx_disagreement,dw_disagreement\n");
  for (const Shape& s : {Shape{4, 12, 32, 56}, Shape{8, 256, 64, 256}, Shape{8, 1024, 128, 1024},
                         Shape{26, 1024, 64, 512}, Shape{4, 4096, 64, 1024}, Shape{4, 2048, 256, 1024}})
    run_shape(s);
  return 0;
}
