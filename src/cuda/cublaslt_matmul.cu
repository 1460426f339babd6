#include "cuda/cublaslt_matmul.hpp"

#include <algorithm>
#include <array>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/kernel_registry.hpp"
#include "cuda/cublaslt_library.hpp"
#include "cuda/device_info.hpp"

namespace gather_linear::cuda {

void check_lt(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const CublasLt& lt = cublaslt();
  throw Error(ErrorCode::cuda_error, what,
              std::string(lt.cublasLtGetStatusName(status)) + ": " + lt.cublasLtGetStatusString(status));
}

cublasLtHandle_t cublaslt_handle(int device) {
  struct DeviceHandle {
    std::once_flag once;
    cublasLtHandle_t handle = nullptr;
  };
  static std::array<DeviceHandle, kMaxDevices> handles;
  DeviceHandle& slot = handles[static_cast<std::size_t>(device)];
  std::call_once(slot.once, [&] {
    const ScopedDevice on_device(device);
    check_lt(cublaslt().cublasLtCreate(&slot.handle), "cublasLtCreate");
  });
  return slot.handle;
}

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::float16: return CUDA_R_16F;
    case DType::bfloat16: return CUDA_R_16BF;
    case DType::float64: return CUDA_R_64F;
    default: return CUDA_R_32F;
  }
}

int alignment_bytes(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  int a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

namespace {

// Everything a plan depends on. Alignments cover each batch member's start (base and stride).
using GemmKey = std::array<std::int64_t, 19>;

struct GemmPlan {
  std::mutex bias_mutex;  // a bias pointer lives in the shared descriptor: set and used under it
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~GemmPlan() {
    const CublasLt& lt = cublaslt();
    if (op) lt.cublasLtMatmulDescDestroy(op);
    for (auto layout : {a, b, d})
      if (layout) lt.cublasLtMatrixLayoutDestroy(layout);
  }
};

// The plans of the shapes used most recently: a process that meets ever new shapes (a varying
// batch size) keeps at most kMaxPlans. Plans are shared, so one in use outlives its eviction.
class PlanCache {
 public:
  static constexpr std::size_t kMaxPlans = 1024;

  template <class Make>
  std::shared_ptr<GemmPlan> find_or_make(const GemmKey& key, Make&& make) {
    std::lock_guard lock(mutex_);
    if (const auto found = index_.find(key); found != index_.end()) {
      recent_.splice(recent_.begin(), recent_, found->second);
      return found->second->second;
    }
    recent_.emplace_front(key, make());  // nothing is cached if make() throws
    index_.emplace(key, recent_.begin());
    if (recent_.size() > kMaxPlans) {
      index_.erase(recent_.back().first);
      recent_.pop_back();
    }
    return recent_.front().second;
  }

 private:
  std::mutex mutex_;
  std::list<std::pair<GemmKey, std::shared_ptr<GemmPlan>>> recent_;  // most recent first
  std::map<GemmKey, decltype(recent_)::iterator> index_;
};

int operand_alignment(const void* data, std::int64_t batch_stride, DType dtype) {
  const auto stride_bytes = static_cast<std::uintptr_t>(batch_stride) * dtype_size(dtype);
  return std::min(alignment_bytes(data), alignment_bytes(reinterpret_cast<const void*>(stride_bytes)));
}

std::shared_ptr<GemmPlan> make_plan(const StridedBatchedGemm& g, bool tf32, int align_a, int align_b, int align_d,
                                    cublasLtHandle_t handle) {
  const CublasLt& lt = cublaslt();
  auto plan = std::make_shared<GemmPlan>();
  const cudaDataType_t type = cuda_data_type(g.dtype);
  // float64 computes and scales in double; every other dtype in float32 (TF32 where allowed).
  const bool float64 = g.dtype == DType::float64;
  const cublasComputeType_t compute = float64 ? CUBLAS_COMPUTE_64F
                                      : tf32  ? CUBLAS_COMPUTE_32F_FAST_TF32
                                              : CUBLAS_COMPUTE_32F;
  check_lt(lt.cublasLtMatmulDescCreate(&plan->op, compute, float64 ? CUDA_R_64F : CUDA_R_32F),
           "cublasLtMatmulDescCreate");
  const auto set_op = [&](cublasLtMatmulDescAttributes_t attribute, const auto& value, const char* what) {
    check_lt(lt.cublasLtMatmulDescSetAttribute(plan->op, attribute, &value, sizeof(value)), what);
  };
  set_op(CUBLASLT_MATMUL_DESC_TRANSA, g.a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, "TRANSA");
  set_op(CUBLASLT_MATMUL_DESC_TRANSB, g.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, "TRANSB");
  if (g.bias != nullptr) set_op(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS, "EPILOGUE");
  // A stored matrix's rows and columns: op(A) is m x k, op(B) k x n.
  const auto layout = [&](cublasLtMatrixLayout_t* out, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                          std::int64_t batch_stride, const char* what) {
    check_lt(lt.cublasLtMatrixLayoutCreate(out, type, static_cast<std::uint64_t>(rows),
                                           static_cast<std::uint64_t>(cols), ld),
             what);
    if (g.batch > 1) {
      const auto count = static_cast<std::int32_t>(g.batch);
      check_lt(lt.cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
               what);
      check_lt(lt.cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                                   sizeof(batch_stride)),
               what);
    }
  };
  layout(&plan->a, g.a.transposed ? g.k : g.m, g.a.transposed ? g.m : g.k, g.a.ld, g.a.batch_stride, "layout A");
  layout(&plan->b, g.b.transposed ? g.n : g.k, g.b.transposed ? g.k : g.n, g.b.ld, g.b.batch_stride, "layout B");
  layout(&plan->d, g.m, g.n, g.ldd, g.batch_stride_d, "layout D");

  cublasLtMatmulPreference_t preference;
  check_lt(lt.cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  const auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value) {
    lt.cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value));
  };
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t{kGemmWorkspaceBytes});
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<std::uint32_t>(align_a));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<std::uint32_t>(align_b));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<std::uint32_t>(align_d));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<std::uint32_t>(align_d));
  // A split reduction's partial sums meet in float32 (the compute type), as every sum of ours
  // does. cuBLASLt's default also lets them meet in the output's type, in D or in its workspace,
  // which for 16-bit outputs rounds each partial sum: results up to 1.4 units of bfloat16's
  // rounding off the exact sums where one rounding gives at most 1.
  if (g.dtype == DType::bfloat16 || g.dtype == DType::float16)
    prefer(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = lt.cublasLtMatmulAlgoGetHeuristic(handle, plan->op, plan->a, plan->b, plan->d,
                                                                  plan->d, preference, 1, &result, &found);
  lt.cublasLtMatmulPreferenceDestroy(preference);
  check_lt(status, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) throw Error(ErrorCode::unsupported, "cublasLt", "no cuBLASLt algorithm for this GEMM");
  plan->algo = result.algo;
  return plan;
}

std::shared_ptr<GemmPlan> plan_for(const StridedBatchedGemm& g, int device, cublasLtHandle_t handle) {
  const bool tf32 = g.tf32 && g.dtype == DType::float32;
  const int align_a = operand_alignment(g.a.data, g.a.batch_stride, g.dtype);
  const int align_b = operand_alignment(g.b.data, g.b.batch_stride, g.dtype);
  const int align_d = operand_alignment(g.d, g.batch_stride_d, g.dtype);
  const GemmKey key{device, static_cast<std::int64_t>(g.dtype), tf32, g.bias != nullptr, g.m, g.n, g.k, g.batch,
                    g.a.transposed, g.a.ld, g.a.batch_stride, g.b.transposed, g.b.ld, g.b.batch_stride,
                    g.ldd, g.batch_stride_d, align_a, align_b, align_d};
  static PlanCache cache;
  return cache.find_or_make(key, [&] { return make_plan(g, tf32, align_a, align_b, align_d, handle); });
}

}  // namespace

void run_gemm(const StridedBatchedGemm& g, int device, void* scratch, CudaStream stream) {
  const CublasLt& lt = cublaslt();
  const cublasLtHandle_t handle = cublaslt_handle(device);
  const std::shared_ptr<GemmPlan> plan = plan_for(g, device, handle);
  // alpha = 1 and beta = 0 in the plan's scale type: double for float64, else float.
  const double one64 = 1.0, zero64 = 0.0;
  const float one32 = 1.f, zero32 = 0.f;
  const bool float64 = g.dtype == DType::float64;
  const void* one = float64 ? static_cast<const void*>(&one64) : &one32;
  const void* zero = float64 ? static_cast<const void*>(&zero64) : &zero32;
  const auto matmul = [&] {
    check_lt(lt.cublasLtMatmul(handle, plan->op, one, g.a.data, plan->a, g.b.data, plan->b, zero, g.d, plan->d, g.d,
                               plan->d, &plan->algo, scratch, kGemmWorkspaceBytes, stream),
             "cublasLtMatmul");
  };
  if (g.bias == nullptr) {
    matmul();
    return;
  }
  std::lock_guard lock(plan->bias_mutex);
  check_lt(lt.cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)),
           "BIAS_POINTER");
  matmul();
}

}  // namespace gather_linear::cuda
