// The CPU comparator, what eager PyTorch does: materialise cat(x[0..R), dim=-1) as a (B, R*H)
// matrix, then one BLAS GEMM with the bias. float16/bfloat16 are widened to float32 for
// OpenBLAS's sgemm (which has no 16-bit GEMM) and rounded back.
#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/numeric.hpp"
#include "cpu/cpu_kernels.hpp"

namespace gather_linear::cpu {
namespace {

// OpenBLAS is opened on first use, not linked: its pthread build starts a server thread per core
// as it loads, and those threads held the engine's OpenMP regions up when they took every core.
// On the GPU host's 16-core Xeon, row blocks at K = 1 took 11.6-11.8 ms in a process that linked
// OpenBLAS and 0.01-0.02 ms in one that did not, or with OPENBLAS_NUM_THREADS=1
// (docs/performance/cpu.md, "The GPU host's Xeon"). Only processes that run this comparator now
// start them.
struct OpenBlas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  std::string error;  // why it could not be loaded; empty once loaded
};

const OpenBlas& openblas() {
  static const OpenBlas loaded = [] {
    OpenBlas blas;
    void* library = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);  // kept open for the process
    if (library == nullptr) {
      blas.error = dlerror();
      library = dlopen(GATHER_LINEAR_OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    }
    if (library == nullptr) {
      blas.error = "cannot load OpenBLAS: " + blas.error + "; " + dlerror();
      return blas;
    }
    blas.sgemm = reinterpret_cast<decltype(&cblas_sgemm)>(dlsym(library, "cblas_sgemm"));
    blas.dgemm = reinterpret_cast<decltype(&cblas_dgemm)>(dlsym(library, "cblas_dgemm"));
    blas.error = blas.sgemm && blas.dgemm ? "" : "the OpenBLAS loaded lacks cblas_sgemm or cblas_dgemm";
    return blas;
  }();
  return loaded;
}

template <class Acc>
void gemm_abt(std::int64_t m, std::int64_t n, std::int64_t k, const Acc* a, std::int64_t lda, const Acc* b,
              std::int64_t ldb, Acc beta, Acc* c, std::int64_t ldc) {
  const auto i = [](std::int64_t v) { return static_cast<blasint>(v); };
  if constexpr (std::is_same_v<Acc, double>)
    openblas().dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i(m), i(n), i(k), 1.0, a, i(lda), b, i(ldb), beta, c, i(ldc));
  else
    openblas().sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i(m), i(n), i(k), 1.0f, a, i(lda), b, i(ldb), beta, c, i(ldc));
}

template <class In>
void run_unfused(const Problem& p) {
  using Acc = std::conditional_t<std::is_same_v<In, double>, double, float>;
  constexpr bool widen = !std::is_same_v<In, Acc>;
  const In* x = static_cast<const In*>(p.x);
  const In* bias = static_cast<const In*>(p.bias);
  In* y = static_cast<In*>(p.y);

  std::vector<Acc> concatenated(static_cast<std::size_t>(p.B * p.RH));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t r = 0; r < p.R; ++r)
      for (std::int64_t h = 0; h < p.H; ++h)
        concatenated[static_cast<std::size_t>(b * p.RH + r * p.H + h)] =
            load_as<Acc>(x[r * p.x_stride_r + b * p.x_stride_b + h * p.x_stride_h]);

  const Acc* weight = static_cast<const Acc*>(p.weight);
  std::int64_t ldw = p.K == 1 ? p.RH : p.weight_stride_k;  // one row: its stride is never used
  std::vector<Acc> widened_weight;
  if constexpr (widen) {
    const In* w = static_cast<const In*>(p.weight);
    widened_weight.resize(static_cast<std::size_t>(p.K * p.RH));
    for (std::int64_t k = 0; k < p.K; ++k)
      for (std::int64_t c = 0; c < p.RH; ++c)
        widened_weight[static_cast<std::size_t>(k * p.RH + c)] = load_as<Acc>(w[k * p.weight_stride_k + c]);
    weight = widened_weight.data();
    ldw = p.RH;
  }

  // C starts as the broadcast bias (addmm's beta = 1), then the GEMM accumulates into it.
  std::vector<Acc> widened_y;
  Acc* c = reinterpret_cast<Acc*>(y);
  std::int64_t ldc = p.B == 1 ? p.K : p.y_stride_b;
  if constexpr (widen) {
    widened_y.resize(static_cast<std::size_t>(p.B * p.K));
    c = widened_y.data();
    ldc = p.K;
  }
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t k = 0; k < p.K; ++k) c[b * ldc + k] = bias ? load_as<Acc>(bias[k]) : Acc(0);
  if (p.RH > 0)
    gemm_abt<Acc>(p.B, p.K, p.RH, concatenated.data(), p.RH, weight, ldw, Acc(1), c, ldc);
  if constexpr (widen)
    for (std::int64_t b = 0; b < p.B; ++b)
      for (std::int64_t k = 0; k < p.K; ++k) y[b * p.y_stride_b + k] = store_as<In>(c[b * ldc + k]);
}

}  // namespace

std::string unfused_blas_why_not(const Problem& p) {
  if (const std::string& error = openblas().error; !error.empty()) return error;
  constexpr std::int64_t blas_max = std::numeric_limits<blasint>::max();
  // The leading dimensions run_unfused passes (a single row's stride is never used).
  const std::int64_t ldw = p.K == 1 ? p.RH : p.weight_stride_k, ldc = p.B == 1 ? p.K : p.y_stride_b;
  if (std::max({p.B, p.K, p.RH, ldw, ldc}) > blas_max)
    return "a size or stride exceeds OpenBLAS's 32-bit integer interface";
  if (p.K > 1 && p.weight_stride_k < p.RH) return "weight rows overlap (stride(0) < R*H), which BLAS cannot express";
  return {};
}

void run_unfused_blas(const Problem& p) {
  visit_floating_dtype(p.dtype, [&]<class In>() { run_unfused<In>(p); });
}

}  // namespace gather_linear::cpu
