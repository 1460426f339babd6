// CUDA kernels against the exact reference: the CPU sweep plus sizes that cross every tile
// edge and multi-wave grids; graph capture with replays on new inputs; determinism; no
// allocation per call; device-specific argument errors. Outputs are NaN-poisoned first.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "core/validate.hpp"
#include "cpu/cpu_kernels.hpp"
#include "cuda/device_info.hpp"
#include "cuda/gett_kernel.hpp"
#include "cuda/weight_stream_kernel.hpp"
#include "cuda_test_support.hpp"
#include "random_problems.hpp"

namespace gather_linear {
namespace {

using namespace gather_linear::testing;

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) GTEST_SKIP() << "no CUDA device";
  }
};

const char* const kFusedKernels[] = {"auto", "cuda_latency", "cuda_weight_stream", "cuda_tensor_core_mma",
                                     "cuda_simt_tiled"};
constexpr const char* kMma = "cuda_tensor_core_mma";
constexpr const char* kWeightStream = "cuda_weight_stream";

// The tensor-core kernel copies 16-byte chunks: it runs exactly when H is a multiple of the
// chunk and x and W start on chunk boundaries, with no padding or strides that break chunks
// (every layout but `strided` and `misaligned`); float64 has no tensor-core kernel.
bool mma_can_run(const Case& c) {
  return c.dtype != DType::float64 && c.layout != Layout::strided && c.layout != Layout::misaligned &&
         c.shape.H % static_cast<std::int64_t>(16 / dtype_size(c.dtype)) == 0;
}
// The weight-streaming kernel reads 16-byte chunks too, of up to 16 rows.
bool weight_stream_can_run(const Case& c) { return c.shape.B <= cuda::kWeightStreamMaxRows && mma_can_run(c); }
// Whether a kernel of kFusedKernels can run `c` when forced.
bool can_run(const char* kernel, const Case& c) {
  if (std::string(kernel) == kMma) return mma_can_run(c);
  if (std::string(kernel) == kWeightStream) return weight_stream_can_run(c);
  return true;
}
constexpr const char* kBaseline = "cuda_unfused_cublaslt";

Options options_for(const char* kernel, Fp32Precision precision = Fp32Precision::ieee) {
  Options o;
  o.kernel = kernel;
  o.fp32_precision = precision;
  return o;
}

// Downloads y (into o.y) after the work on it has finished, and returns its relative error
// against the exact reference on o's inputs.
double downloaded_error(Operands& o, const DeviceOperands& d) {
  d.y.download(o.y);
  return relative_error(o.y, reference_of(o), o.y.view.sizes[0], o.y.view.sizes[1]);
}

// Relative error of `run(device_operands)` on fresh poisoned operands from `seed`; also checks
// that the run left no CUDA error and y's gaps kept their poison.
template <class Run>
double error_of_run(const Case& c, std::uint32_t seed, const std::string& label, Run&& run) {
  Operands o = make_operands(c, seed);
  DeviceOperands d(o);
  run(d);
  const cudaError_t status = cudaDeviceSynchronize();
  EXPECT_EQ(status, cudaSuccess) << cudaGetErrorString(status) << " " << c << " " << label;
  const double err = downloaded_error(o, d);
  EXPECT_TRUE(gaps_untouched(o.y)) << c << " " << label << ": wrote outside y's view";
  return err;
}

double cuda_error_of(const Case& c, const Options& options, std::uint32_t seed = 1234) {
  return error_of_run(c, seed, "kernel " + std::string(options.kernel),
                      [&](const DeviceOperands& d) { d.forward(options); });
}

// One unit of the rounding a low-precision result may carry beyond the baseline's own error:
// the output's (bfloat16, float16), or TF32's rounded inputs (cuBLAS's TF32 GEMMs for small
// problems run in full float32, so their error is no yardstick there).
double rounding_unit(DType dtype, Fp32Precision precision) {
  if (dtype == DType::bfloat16) return 0x1p-8;
  if (dtype == DType::float16) return 0x1p-11;
  return precision == Fp32Precision::tf32 ? 0x1p-8 : 0.0;
}

// The relative error a fused result may have on c: float32 and float64, their own accuracy (1e-5,
// 1e-12); float16/bfloat16 (and TF32), at most twice the unfused baseline's own error on the same
// inputs (in TF32 for TF32) plus one rounding unit.
double accuracy_limit(const Case& c, Fp32Precision precision) {
  const bool tf32 = c.dtype == DType::float32 && precision == Fp32Precision::tf32;
  if (!is_low_precision(c.dtype) && !tf32) return exact_tolerance(c.dtype);
  return 2 * cuda_error_of(c, options_for(kBaseline, precision)) + rounding_unit(c.dtype, precision);
}

void expect_accurate(const Case& c, const Options& options, double err) {
  ASSERT_FALSE(std::isnan(err)) << c << " kernel " << options.kernel << ": NaN left in y";
  EXPECT_LE(err, accuracy_limit(c, options.fp32_precision)) << c << " kernel " << options.kernel;
}

// The CPU sweep's edges plus GPU tile edges: 64/128-row and -column tiles, BK = 16 reduction
// steps (H = 15, 16, 17), 16-byte vectors (H = 4, 8, 12) and multi-wave grids.
const Shape kShapes[] = {
    {1, 1, 1, 1},      {4, 12, 32, 56},    {1, 7, 5, 3},      {3, 1, 17, 1},      {2, 33, 13, 65},
    {64, 5, 3, 7},     {5, 97, 31, 37},    {8, 130, 16, 100}, {2, 40, 300, 40},   {3, 50, 100, 70},
    {7, 100, 1, 9},    {0, 4, 8, 5},       {3, 4, 0, 5},      {3, 0, 8, 5},       {3, 4, 8, 0},
    {1, 64, 16, 64},   {1, 65, 16, 65},    {2, 127, 8, 129},  {3, 128, 16, 128},  {1, 129, 17, 127},
    {4, 257, 15, 100}, {2, 300, 40, 260},  {5, 200, 12, 190}, {3, 191, 4, 66},    {16, 70, 8, 33},
};
const DType kDtypes[] = {DType::float32, DType::float64, DType::float16, DType::bfloat16};
const Layout kLayouts[] = {Layout::contiguous, Layout::head_major, Layout::strided, Layout::broadcast_rows,
                           Layout::misaligned};

class CudaForwardSweep : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!gpu_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaForwardSweep, EveryKernel) {
  const Case c = GetParam();
  for (const char* kernel : kFusedKernels) {
    if (!can_run(kernel, c)) {  // refused as unsupported (the tensor-core GEMM: for its chunks)
      Operands o = make_operands(c, 1);
      DeviceOperands d(o);
      try {
        d.forward(options_for(kernel));
        ADD_FAILURE() << c << ": " << kernel << " accepted a problem it cannot run";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
        const std::string why = c.dtype == DType::float64 ? "supports float32, float16 and bfloat16, got float64"
                                                          : "needs 16-byte chunks";
        if (std::string(kernel) == kMma || c.dtype == DType::float64)
          EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      }
      continue;
    }
    expect_accurate(c, options_for(kernel), cuda_error_of(c, options_for(kernel)));
  }
  EXPECT_LE(cuda_error_of(c, options_for(kBaseline)), is_low_precision(c.dtype) ? 1e-2 : exact_tolerance(c.dtype))
      << c << " baseline";
}

INSTANTIATE_TEST_SUITE_P(Sweep, CudaForwardSweep, ::testing::ValuesIn(all_cases(kShapes, kDtypes, kLayouts)),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// Grids of many waves and each SIMT tile configuration (64x64, 128x64, 128x128); for the
// weight-streaming kernel, thousands of 16-output blocks (a partial one last).
TEST_F(CudaTest, LargeGrids) {
  const Shape shapes[] = {{2, 65536, 16, 64}, {2, 64, 64, 16384}, {4, 2304, 16, 2048}, {8, 1024, 128, 1024},
                          {8, 256, 512, 256},  // a 4096-long reduction
                          {1, 16, 64, 65536},  {2, 9, 32, 40000}};
  for (const Shape& s : shapes)
    for (DType dtype : {DType::float32, DType::float64, DType::bfloat16}) {
      const Case c{s, dtype, Layout::head_major, true};
      for (const char* kernel : kFusedKernels)
        if (can_run(kernel, c)) expect_accurate(c, options_for(kernel), cuda_error_of(c, options_for(kernel)));
    }
}

TEST_F(CudaTest, Tf32IsUsedOnlyWhenAllowed) {
  const Case c{{8, 512, 64, 512}, DType::float32, Layout::contiguous, true};
  for (const char* kernel : {"auto", kMma, kBaseline}) {
    EXPECT_LE(cuda_error_of(c, options_for(kernel)), 1e-5) << kernel << " without TF32";
    const Options tf32 = options_for(kernel, Fp32Precision::tf32);
    expect_accurate(c, tf32, cuda_error_of(c, tf32));
  }
}

// Captures one forward in a CUDA graph (global mode: any launch on the legacy default stream
// during capture is an error), then replays it `trials` times on new input values with y poisoned
// again. Each replay must leave no NaN, give bit for bit what the same forward launched directly
// gives on the same inputs (every kernel is deterministic), and, where a tolerance is given, lie
// within it of the reference.
void expect_graph_replays_match(const Case& c, DeviceOperands& d, const Options& options, cudaStream_t stream,
                                int trials, std::uint32_t seed, std::optional<double> tolerance) {
  const CapturedGraph graph(stream, [&] { d.forward(options, stream); });
  for (int trial = 0; trial < trials; ++trial) {
    const std::uint32_t trial_seed = seed + static_cast<std::uint32_t>(trial);
    Operands fresh = make_operands(c, trial_seed);
    const std::vector<std::byte> poisoned_y = fresh.y.storage;
    d.x.upload(fresh.x);
    d.weight.upload(fresh.weight);
    d.bias.upload(fresh.bias);
    d.y.upload(fresh.y);
    graph.replay();
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    const double err = downloaded_error(fresh, d);
    const std::vector<std::byte> replayed = fresh.y.storage;
    fresh.y.storage = poisoned_y;  // same size: the view's pointer stays valid
    d.y.upload(fresh.y);
    d.forward(options, stream);
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    d.y.download(fresh.y);
    std::ostringstream label;
    label << c << " kernel " << options.kernel << " replay " << trial;
    ASSERT_FALSE(std::isnan(err)) << label.str() << ": NaN left in y";
    EXPECT_TRUE(replayed == fresh.y.storage) << label.str() << ": differs from the same forward launched directly";
    if (tolerance) EXPECT_LE(err, *tolerance) << label.str();
  }
}

TEST_F(CudaTest, GraphCaptureReplaysWithNewInputs) {
  const TestStream stream;
  // `misaligned` takes the unfused baseline's bias through an aligned copy (a memcpy in the graph).
  // The next two split the weight-streaming kernel's tiles between two blocks of a cluster; they
  // run only that kernel (which the dispatcher picks), as cuBLAS takes split-K kernels there that
  // compute-sanitizer's racecheck and initcheck flag (scripts/sanitize_gpu.sh runs this test).
  // The last is one the dispatcher gives the GETT's split reduction (24 rows, 16 weight tiles):
  // its partial sums live in the workspace and the adding kernel is a programmatic launch.
  struct Captured {
    Case c;
    bool every_kernel;
  };
  const Captured captured[] = {
      {{{4, 12, 32, 56}, DType::float32, Layout::head_major, true}, true},
      {{{8, 300, 64, 200}, DType::float32, Layout::head_major, true}, true},
      {{{8, 300, 64, 200}, DType::float16, Layout::misaligned, true}, true},
      {{{8, 12, 64, 200}, DType::float16, Layout::head_major, true}, true},
      {{{26, 2, 128, 512}, DType::float32, Layout::head_major, true}, false},
      {{{64, 4, 128, 64}, DType::float16, Layout::head_major, true}, false},
      {{{64, 24, 128, 1024}, DType::bfloat16, Layout::head_major, true}, false}};
  for (const auto& [c, every_kernel] : captured)
    for (const char* kernel : {"auto", "cuda_latency", kWeightStream, kMma, "cuda_simt_tiled", kBaseline}) {
      const bool wanted = every_kernel || kernel == std::string("auto") || kernel == std::string(kWeightStream);
      if (!wanted || !can_run(kernel, c)) continue;
      Operands o = make_operands(c, 7);
      DeviceOperands d(o);
      Options options = options_for(kernel);
      const std::size_t ws_bytes = workspace_bytes(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), options);
      DeviceBuffer workspace(ws_bytes);
      if (ws_bytes > 0) {
        // NaN bytes: a partial sum left unwritten shows (and compute-sanitizer's initcheck, which
        // does not see the GETT's TMA stores, has nothing to flag).
        CUDA_ASSERT(cudaMemset(workspace.data(), 0xFF, ws_bytes));
        CUDA_ASSERT(cudaDeviceSynchronize());  // the forwards run on a non-blocking stream
        options.workspace = {workspace.data(), ws_bytes};
      }
      d.forward(options, stream);  // warm-up outside the capture (plan caches)
      CUDA_ASSERT(cudaStreamSynchronize(stream));
      // 16-bit without a bound: the unfused baseline's error, which would set it, takes cuBLAS's
      // split-K kernels here, which compute-sanitizer cannot judge (sanitize_gpu.sh runs this
      // test); the direct forward's accuracy is the other tests' to judge.
      expect_graph_replays_match(c, d, options, stream, 3, 100,
                                 c.dtype == DType::float32 ? std::optional(1e-5) : std::nullopt);
    }
}

// A caller's allocator (a framework's caching allocator) supplies the unfused fallback's scratch:
// called once with what workspace_bytes() reports; a null return is an error, not a crash.
TEST_F(CudaTest, WorkspaceAllocatorSuppliesScratch) {
  const Case c{{8, 300, 64, 200}, DType::float32, Layout::head_major, true};
  Operands o = make_operands(c, 21);
  DeviceOperands d(o);
  struct Recorder {
    DeviceBuffer buffer;
    std::vector<std::size_t> requests;
    static void* allocate(std::size_t bytes, void* context) {
      auto* self = static_cast<Recorder*>(context);
      self->requests.push_back(bytes);
      self->buffer = DeviceBuffer(bytes);
      return self->buffer.data();
    }
    static void* refuse(std::size_t, void*) { return nullptr; }
  } recorder;
  Options options = options_for(kBaseline);
  const std::size_t expected = workspace_bytes(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), options);
  ASSERT_GT(expected, 0u);
  options.workspace_allocator = {&Recorder::allocate, &recorder};
  d.forward(options);
  CUDA_ASSERT(cudaDeviceSynchronize());
  ASSERT_EQ(recorder.requests, std::vector<std::size_t>{expected});
  EXPECT_LE(downloaded_error(o, d), 1e-5);

  options.workspace_allocator = {&Recorder::refuse, nullptr};
  try {
    d.forward(options);
    ADD_FAILURE() << "a null workspace was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "options.workspace_allocator") << e.what();
  }
  // Fused kernels need no scratch: the allocator is never asked.
  recorder.requests.clear();
  Options fused = options_for(kMma);
  fused.workspace_allocator = {&Recorder::allocate, &recorder};
  d.forward(fused);
  CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_TRUE(recorder.requests.empty());
}

// The library's scratch cannot grow on a stream that is being captured: forward() says so with an
// Error naming options.workspace before enqueuing anything, and the capture stays valid. After one
// call on the stream, the same capture works. It runs on a fresh host thread's per-thread default
// stream, for which the library holds no scratch this large yet: the other tests' per-thread
// streams need less, and a later thread that reuses one of their thread ids (the library's key)
// finds only a smaller buffer.
TEST_F(CudaTest, CaptureWithoutScratchIsAClearError) {
  const Case c{{8, 2048, 128, 64}, DType::float32, Layout::head_major, true};
  Operands o = make_operands(c, 51);
  DeviceOperands d(o);
  const Options baseline = options_for(kBaseline);
  std::thread([&] {
    const cudaStream_t stream = cudaStreamPerThread;
    CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    try {
      d.forward(baseline, stream);
      ADD_FAILURE() << "forward grew the library's scratch during a capture";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "options.workspace") << e.what();
      EXPECT_NE(std::string(e.what()).find("captured into a CUDA graph"), std::string::npos) << e.what();
    }
    cudaGraph_t graph;
    CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));  // not invalidated
    CUDA_ASSERT(cudaGraphDestroy(graph));
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    d.y.download(o.y);
    ASSERT_EQ(first_unpoisoned(o.y), std::nullopt) << "y written";
    d.forward(baseline, stream);
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    expect_graph_replays_match(c, d, baseline, stream, 2, 151, 1e-5);
  }).join();
  CUDA_ASSERT(cudaGetLastError());
}

// Without a caller's workspace the library's scratch is per stream: the unfused baseline on two
// streams at once (concatenation and cuBLASLt scratch alike) must not mix their operands.
TEST_F(CudaTest, LibraryScratchIsPerStream) {
  const Case c{{8, 300, 64, 200}, DType::float32, Layout::head_major, true};
  Operands o1 = make_operands(c, 31), o2 = make_operands(c, 32);
  DeviceOperands d1(o1), d2(o2);
  const TestStream s1, s2;
  const Options baseline = options_for(kBaseline);
  for (int i = 0; i < 50; ++i) {
    d1.forward(baseline, s1);
    d2.forward(baseline, s2);
  }
  CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_LE(downloaded_error(o1, d1), 1e-5);
  EXPECT_LE(downloaded_error(o2, d2), 1e-5);

  // The per-thread default stream: one handle, a different stream in each host thread.
  Operands o3 = make_operands(c, 33), o4 = make_operands(c, 34);
  DeviceOperands d3(o3), d4(o4);
  const auto run_on_own_stream = [&](const DeviceOperands& d) {
    for (int i = 0; i < 50; ++i) d.forward(baseline, cudaStreamPerThread);
    CUDA_ASSERT(cudaStreamSynchronize(cudaStreamPerThread));
  };
  std::thread t3(run_on_own_stream, std::cref(d3)), t4(run_on_own_stream, std::cref(d4));
  t3.join();
  t4.join();
  EXPECT_LE(downloaded_error(o3, d3), 1e-5) << "per-thread streams";
  EXPECT_LE(downloaded_error(o4, d4), 1e-5) << "per-thread streams";
}

// A per-thread default stream goes away with its thread, and a later thread often gets the same
// thread id (so the same handle and thread in the library's cache) while the first stream's work
// is still queued. The new stream must not take over that work's scratch: both results stay right.
TEST_F(CudaTest, ScratchOfAGoneStreamIsNotReusedEarly) {
  const Case c{{8, 512, 128, 512}, DType::float32, Layout::head_major, true};
  Operands o1 = make_operands(c, 61), o2 = make_operands(c, 62);
  DeviceOperands d1(o1), d2(o2);
  const Options baseline = options_for(kBaseline);
  for (int trial = 0; trial < 5; ++trial) {
    std::thread([&] {
      for (int i = 0; i < 20; ++i) d1.forward(baseline, cudaStreamPerThread);  // left queued
    }).join();
    std::thread([&] {
      for (int i = 0; i < 20; ++i) d2.forward(baseline, cudaStreamPerThread);
      CUDA_ASSERT(cudaStreamSynchronize(cudaStreamPerThread));
    }).join();
    CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_LE(downloaded_error(o1, d1), 1e-5) << "trial " << trial;
    EXPECT_LE(downloaded_error(o2, d2), 1e-5) << "trial " << trial;
  }
}

TEST_F(CudaTest, DeterministicBits) {
  const Case cases[] = {{{8, 700, 64, 300}, DType::float32, Layout::contiguous, true},
                        {{8, 16, 64, 300}, DType::bfloat16, Layout::contiguous, true}};
  for (const Case& c : cases) {
    for (const char* kernel : kFusedKernels) {
      if (!can_run(kernel, c)) continue;
      Operands a = make_operands(c, 5), b = make_operands(c, 5);
      DeviceOperands da(a), db(b);
      da.forward(options_for(kernel));
      db.forward(options_for(kernel));
      CUDA_ASSERT(cudaDeviceSynchronize());
      da.y.download(a.y);
      db.y.download(b.y);
      EXPECT_EQ(a.y.storage, b.y.storage) << c << " " << kernel;
    }
  }
}

// By the device's free memory, which only holds still while no other process allocates (CTest
// runs the GPU suites one at a time).
TEST_F(CudaTest, FusedKernelsAllocateNothingPerCall) {
  const Case cases[] = {{{8, 1024, 128, 1024}, DType::float32, Layout::contiguous, true},
                        {{8, 16, 128, 1024}, DType::bfloat16, Layout::contiguous, true}};
  for (const Case& c : cases) {
    for (const char* kernel : kFusedKernels) {
      if (!can_run(kernel, c)) continue;
      Operands o = make_operands(c, 3);
      DeviceOperands d(o);
      EXPECT_EQ(workspace_bytes(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), options_for(kernel)), 0u);
      d.forward(options_for(kernel));  // warm-up: module load
      CUDA_ASSERT(cudaDeviceSynchronize());
      std::size_t free_before = 0, free_after = 0, total = 0;
      CUDA_ASSERT(cudaMemGetInfo(&free_before, &total));
      for (int i = 0; i < 50; ++i) d.forward(options_for(kernel));
      CUDA_ASSERT(cudaDeviceSynchronize());
      CUDA_ASSERT(cudaMemGetInfo(&free_after, &total));
      EXPECT_EQ(free_before, free_after) << c << " " << kernel;
    }
  }
}

// Runs forward expecting an Error for `argument`, then checks y still holds its poison.
void expect_cuda_error(const DeviceOperands& d, HostTensor& y_host, const TensorView& x, const TensorView& w,
                       const TensorView& y, const Options& options, const std::string& argument,
                       const std::string& fragment) {
  try {
    forward(x, w, d.bias_view(), y, options);
    ADD_FAILURE() << "expected an error for " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  d.y.download(y_host);
  ASSERT_EQ(first_unpoisoned(y_host), std::nullopt) << "y written";
}

TEST_F(CudaTest, DeviceArgumentErrorsLeaveYUntouched) {
  const Case c{{2, 3, 4, 5}, DType::float32, Layout::contiguous, true};
  Operands o = make_operands(c, 11);
  DeviceOperands d(o);
  const Options automatic;

  TensorView host_x = o.x.view;
  host_x.device = Device::cuda(0);
  expect_cuda_error(d, o.y, host_x, d.weight.view(), d.y.view(), automatic, "x",
                    "expected CUDA device memory on cuda:0, got host memory");

  TensorView far_x = d.x.view(), far_w = d.weight.view(), far_y = d.y.view();
  far_x.device = far_w.device = far_y.device = Device::cuda(63);
  try {
    forward(far_x, far_w, std::nullopt, far_y);
    ADD_FAILURE() << "a missing device was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "x");
    EXPECT_NE(std::string(e.what()).find("device cuda:63 does not exist"), std::string::npos) << e.what();
  }

  expect_cuda_error(d, o.y, d.x.view(), d.weight.view(), d.y.view(), options_for("cpu_gather_gemm"), "options.kernel",
                    "runs on cpu, but the tensors are on cuda:0");
  Options tiny_workspace = options_for(kBaseline);
  const std::size_t need = workspace_bytes(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), tiny_workspace);
  tiny_workspace.workspace = {d.x.view().data, 4};
  expect_cuda_error(d, o.y, d.x.view(), d.weight.view(), d.y.view(), tiny_workspace, "options.workspace",
                    "expected at least " + std::to_string(need) + " bytes");
  // Large enough but off a 256-byte boundary (the concatenation stores 16-byte vectors, and
  // cuBLASLt's scratch follows it): an error, not a misaligned-address fault.
  DeviceBuffer roomy(need + 256);
  Options misaligned_workspace = options_for(kBaseline);
  misaligned_workspace.workspace = {static_cast<std::byte*>(roomy.data()) + 16, need};
  expect_cuda_error(d, o.y, d.x.view(), d.weight.view(), d.y.view(), misaligned_workspace, "options.workspace",
                    "expected a pointer aligned to 256 bytes, got one 16 bytes past a 256-byte boundary");

  // The errors left no sticky CUDA state: a valid call still works.
  const double err = cuda_error_of(c, automatic);
  EXPECT_LE(err, 1e-5);
}

// An empty tensor is never read or written, so its pointer is not checked: here the empty ones
// hold an address that is not device memory at all, and forward() does nothing, without error.
TEST_F(CudaTest, EmptyViewsMayHoldAnyPointer) {
  void* const not_device_memory = reinterpret_cast<void*>(std::uintptr_t{0x1000});
  {  // B = 0: x and y are empty.
    const Case c{{2, 0, 4, 5}, DType::float32, Layout::contiguous, true};
    Operands o = make_operands(c, 13);
    DeviceOperands d(o);
    TensorView x = d.x.view(), y = d.y.view();
    x.data = y.data = not_device_memory;
    for (const char* kernel : {"auto", kBaseline}) forward(x, d.weight.view(), d.bias_view(), y, options_for(kernel));
  }
  {  // K = 0: weight, bias and y are empty.
    const Case c{{2, 3, 4, 0}, DType::float32, Layout::contiguous, true};
    Operands o = make_operands(c, 14);
    DeviceOperands d(o);
    TensorView weight = d.weight.view(), bias = d.bias.view(), y = d.y.view();
    weight.data = bias.data = y.data = not_device_memory;
    for (const char* kernel : {"auto", kBaseline}) forward(d.x.view(), weight, bias, y, options_for(kernel));
  }
  CUDA_ASSERT(cudaDeviceSynchronize());
}

// make_operands, with weight rows `weight_stride_k` apart: below R*H they overlap (0: every
// output reads the same row), which cuBLASLt cannot express.
Operands with_weight_row_stride(const Case& c, std::int64_t weight_stride_k, std::uint32_t seed) {
  Operands o = make_operands(c, seed);
  o.weight = HostTensor(c.dtype, {c.shape.K, c.shape.R * c.shape.H}, {weight_stride_k, 1});
  o.weight.fill_uniform(seed + 1);
  return o;
}

// float64 runs on the CUDA-core kernels (their sums in double) and cuBLASLt's DGEMM; the
// tensor-core kernels refuse it. The dispatcher takes the latency kernel for small problems,
// unfused beyond; where cuBLASLt cannot read the weight (one row shared by every output: row
// stride 0), the latency kernel up to 262,144 outputs and the SIMT kernel beyond.
TEST_F(CudaTest, Float64RunsOnTheCudaCoreKernels) {
  const auto operands = [](const Shape& s, bool shared_weight_row) {
    const Case c{s, DType::float64, Layout::head_major, true};
    return std::pair(c, shared_weight_row ? with_weight_row_stride(c, 0, 12) : make_operands(c, 12));
  };
  struct Expected {
    Shape shape;
    bool shared_weight_row;
    const char* chosen;
  };
  const Expected expected[] = {{{4, 12, 32, 56}, false, "cuda_latency"},
                               {{8, 32, 64, 128}, false, kBaseline},  // R*H = 512: too long for it
                               {{8, 1024, 128, 1024}, false, kBaseline},
                               {{8, 32, 64, 128}, true, "cuda_latency"},
                               {{8, 1024, 128, 1024}, true, "cuda_simt_tiled"}};
  for (const auto& [shape, shared_weight_row, chosen] : expected) {
    auto [c, o] = operands(shape, shared_weight_row);
    DeviceOperands d(o);
    EXPECT_EQ(select_kernel(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), options_for("auto")), chosen)
        << c << (shared_weight_row ? " shared weight row" : "");
    for (const char* kernel : {kWeightStream, kMma, "cuda_gett_sm90"})
      expect_library_error([&] { d.forward(options_for(kernel)); }, "options.kernel", "got float64",
                           ErrorCode::unsupported);
    for (const char* kernel : {"auto", "cuda_latency", "cuda_simt_tiled", kBaseline}) {
      if (shared_weight_row && kernel == std::string(kBaseline)) continue;  // refused: cuBLASLt cannot read it
      Operands fresh = operands(shape, shared_weight_row).second;
      d.y.upload(fresh.y);  // poisoned again
      d.forward(options_for(kernel));
      CUDA_ASSERT(cudaDeviceSynchronize());
      const double err = downloaded_error(fresh, d);
      EXPECT_LE(err, exact_tolerance(DType::float64)) << c << " kernel " << kernel;
    }
  }
}

// Weight rows that overlap (stride(0) < R*H). Every fused kernel that accepts them reads them
// through the row stride, and `auto` takes a tensor-core or the latency kernel, not the SIMT
// kernel (2-8x slower there).
TEST_F(CudaTest, OverlappingWeightRowsRunFused) {
  const Shape shapes[] = {{4, 12, 32, 56}, {8, 256, 64, 512}, {2, 1000, 64, 300}};
  for (const Shape& shape : shapes)
    for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
      for (Fp32Precision precision : {Fp32Precision::ieee, Fp32Precision::tf32}) {
        if (dtype != DType::float32 && precision == Fp32Precision::tf32) continue;
        const Case c{shape, dtype, Layout::head_major, true};
        const double limit = accuracy_limit(c, precision);  // the baseline's error with a plain weight
        for (std::int64_t weight_stride_k : {0, 8}) {
          std::ostringstream label;
          label << c << (precision == Fp32Precision::tf32 ? " tf32" : "") << " weight stride " << weight_stride_k;
          Operands o = with_weight_row_stride(c, weight_stride_k, 21);
          DeviceOperands d(o);
          const std::string chosen{
              select_kernel(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), options_for("auto", precision))};
          EXPECT_NE(chosen, kBaseline) << label.str();
          EXPECT_NE(chosen, "cuda_simt_tiled") << label.str();
          for (const char* kernel : {"auto", "cuda_latency", kWeightStream, kMma, "cuda_gett_sm90", "cuda_simt_tiled",
                                     kBaseline}) {
            Operands fresh = with_weight_row_stride(c, weight_stride_k, 22);
            DeviceOperands run(fresh);
            try {
              run.forward(options_for(kernel, precision));
            } catch (const Error& e) {  // a kernel may decline these rows or this problem, by name
              EXPECT_EQ(e.code(), ErrorCode::unsupported) << label.str() << " " << kernel << ": " << e.what();
              EXPECT_STRNE(kernel, "auto") << label.str();
              continue;
            }
            CUDA_ASSERT(cudaDeviceSynchronize());
            const double err = downloaded_error(fresh, run);
            EXPECT_FALSE(std::isnan(err)) << label.str() << " " << kernel << ": NaN left in y";
            EXPECT_LE(err, limit) << label.str() << " " << kernel;
            EXPECT_TRUE(gaps_untouched(fresh.y)) << label.str() << " " << kernel;
          }
        }
      }
}

// ---- The Hopper GETT family (cuda_gett_sm90) ----

constexpr const char* kGett = "cuda_gett_sm90";

bool is_sm90(int device = 0) {
  int major = 0, minor = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess && major == 9 &&
         minor == 0;
}

// The family's promise, restated independently: on sm_90, with x's h stride 1 and 16-byte aligned
// slices and rows (so not the `strided` or `broadcast_rows` layouts), H * element size and K *
// element size multiples of 16 bytes, and H a multiple or divisor of the K tile.
bool gett_should_run(const Case& c, int tile_k) {
  const auto [R, B, H, K] = c.shape;
  const std::int64_t per16 = 16 / static_cast<std::int64_t>(dtype_size(c.dtype));
  // A single row's b stride is never used, so a broadcast row is just a contiguous one.
  const bool layout_ok = c.layout == Layout::contiguous || c.layout == Layout::head_major ||
                         (c.layout == Layout::broadcast_rows && B == 1);
  return is_sm90() && layout_ok && R * B * H * K > 0 && H % per16 == 0 && K % per16 == 0 &&
         (H % tile_k == 0 || tile_k % H == 0);
}

// Shapes that cross the 128- and 256-wide tile edges, one- and many-slice K tiles (H from 8 to
// 256), a single row, and shapes every configuration must refuse (H = 24, 4, 100; K = 100).
const Shape kGettShapes[] = {
    {1, 1, 64, 8},     {4, 12, 32, 56},     {2, 127, 64, 120},  {3, 129, 128, 136}, {5, 257, 16, 264},
    {1, 255, 192, 8},  {2, 600, 256, 520}, {7, 300, 8, 72},    {9, 64, 32, 2048},  {2, 2048, 64, 384},
    {3, 100, 24, 64},  {2, 64, 4, 64},      {2, 64, 100, 64},   {2, 64, 64, 100},   {1, 1, 1, 1},
};

// Runs one GETT configuration directly on the default stream, with the workspace it asks for (a
// split reduction's partial sums), and waits for it.
void run_gett_variant(const cuda::gett::Variant& variant, const DeviceOperands& d, cuda::gett::Tuning tuning = {}) {
  const Problem p = validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view());
  // The workspace asked for covers the configuration's own count of parts; room for the count
  // asked for on top.
  DeviceBuffer workspace(variant.workspace_bytes(p) + cuda::gett::partial_sums_bytes(p, tuning.reduction_splits));
  // NaN bytes: a partial sum the GEMM failed to write would reach y as NaN, not as a stale value.
  if (workspace.bytes() > 0 && cudaMemset(workspace.data(), 0xFF, workspace.bytes()) != cudaSuccess)
    throw std::runtime_error("cudaMemset(workspace) failed");
  variant.run(p, {workspace.data(), workspace.bytes()}, nullptr, tuning);
  if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("GETT run failed");
}

// The same for one GETT configuration run directly (the same operands as cuda_error_of's).
double gett_variant_error(const Case& c, const cuda::gett::Variant& variant, cuda::gett::Tuning tuning = {}) {
  return error_of_run(c, 1234, variant.name, [&](const DeviceOperands& d) { run_gett_variant(variant, d, tuning); });
}

// Every configuration the library ships, forced on every shape and layout: it either refuses
// (why_not, and run throws) exactly where the promise says so, or matches the reference
// within twice the unfused baseline's error (TF32: the baseline in TF32) plus one rounding unit.
TEST_F(CudaTest, GettEveryConfiguration) {
  for (const cuda::gett::Variant* variant : cuda::gett::library_variants()) {
    const Fp32Precision precision = variant->dtype == DType::float32 ? Fp32Precision::tf32 : Fp32Precision::ieee;
    for (const Shape& shape : kGettShapes)
      for (Layout layout : kLayouts)
        for (bool bias : {true, false}) {
          const Case c{shape, variant->dtype, layout, bias};
          Operands o = make_operands(c, 1);
          DeviceOperands d(o);
          const Problem p = validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view());
          const std::string why = variant->why_not(p);
          ASSERT_EQ(why.empty(), gett_should_run(c, variant->tile_k)) << c << " " << variant->name << ": " << why;
          if (!why.empty()) {  // run directly anyway, it refuses rather than launch
            EXPECT_THROW(variant->run(p, {}, nullptr, {}), Error) << c << " " << variant->name;
            continue;
          }
          const double err = gett_variant_error(c, *variant);
          ASSERT_FALSE(std::isnan(err)) << c << " " << variant->name << ": NaN left in y";
          EXPECT_LE(err, accuracy_limit(c, precision)) << c << " " << variant->name;
        }
  }
}

// The tile scheduler's swizzle and raster order change only the order of tiles, never a bit of y,
// in every configuration (the dispatcher runs some with other orders than CUTLASS's default). A
// split reduction's configurations also on a shape they split, whose partial sums are added in a
// fixed order. (No cuBLAS here: sanitize_gpu.sh runs this test under racecheck.)
TEST_F(CudaTest, GettSchedulerTuningKeepsResults) {
  if (!is_sm90()) GTEST_SKIP() << "GETT needs sm_90";
  struct Run {
    const cuda::gett::Variant* variant;
    Shape shape;
    bool split;  // the configuration splits this shape's reduction
  };
  std::vector<Run> runs;
  for (const cuda::gett::Variant* variant : cuda::gett::library_variants()) {
    runs.push_back({variant, {4, 1000, 64, 776}, false});
    if (variant->splits_reduction) runs.push_back({variant, {12, 40, 64, 520}, true});
  }
  for (const auto& [variant, shape, split] : runs) {
    const Case c{shape, variant->dtype, Layout::head_major, true};
    if (split) {
      Operands o = make_operands(c, 1);
      DeviceOperands d(o);
      const Problem p = validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view());
      ASSERT_GT(cuda::gett::reduction_splits(p, variant->tile_n, variant->tile_k), 1) << variant->name << " " << c;
    }
    const auto y_with = [&](cuda::gett::Tuning tuning) {
      Operands o = make_operands(c, 1234);
      DeviceOperands d(o);
      run_gett_variant(*variant, d, tuning);
      d.y.download(o.y);
      return o.y.storage;
    };
    const auto plain = y_with({});
    for (int swizzle : {2, 4, 8})
      for (cuda::gett::Raster raster : {cuda::gett::Raster::along_m, cuda::gett::Raster::along_n})
        EXPECT_EQ(y_with({swizzle, raster}), plain)
            << variant->name << ": swizzle " << swizzle << ", raster " << static_cast<int>(raster);
  }
}

// A split reduction is as accurate for every count of parts it takes (1 to R, each part whole K
// tiles of R's slices: H = 32 under a 64-deep tile pairs slices), and refuses the other counts,
// and a workspace too small for the partial sums, before anything reaches y.
TEST_F(CudaTest, GettSplitReductionEveryCount) {
  if (!is_sm90()) GTEST_SKIP() << "GETT needs sm_90";
  const Shape shapes[] = {{12, 40, 64, 520}, {16, 17, 32, 1000}, {6, 64, 128, 256}};
  for (const cuda::gett::Variant* variant : cuda::gett::library_variants()) {
    if (!variant->splits_reduction) continue;
    const Fp32Precision precision = variant->dtype == DType::float32 ? Fp32Precision::tf32 : Fp32Precision::ieee;
    for (const Shape& shape : shapes)
      for (bool bias : {true, false}) {
        const Case c{shape, variant->dtype, Layout::head_major, bias};
        const double limit = accuracy_limit(c, precision);
        for (int splits = 1; splits <= shape.R; ++splits) {
          Operands o = make_operands(c, 1);
          DeviceOperands d(o);
          const Problem p = validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view());
          const std::string label = std::string(variant->name) + " in " + std::to_string(splits) + " parts";
          if (!cuda::gett::can_split_reduction(p, splits, variant->tile_k)) {
            expect_library_error([&] { run_gett_variant(*variant, d, {.reduction_splits = splits}); },
                                 "tuning.reduction_splits", "cannot split this reduction", ErrorCode::invalid_argument);
            continue;
          }
          const double err = gett_variant_error(c, *variant, {.reduction_splits = splits});
          ASSERT_FALSE(std::isnan(err)) << c << " " << label << ": NaN left in y";
          EXPECT_LE(err, limit) << c << " " << label;
        }
        Operands o = make_operands(c, 1);
        DeviceOperands d(o);
        const Problem p = validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view());
        DeviceBuffer short_workspace(variant->workspace_bytes(p) - 4);
        expect_library_error(
            [&] { variant->run(p, {short_workspace.data(), short_workspace.bytes()}, nullptr, {}); }, "workspace",
            "for the partial sums", ErrorCode::invalid_argument);
        CUDA_ASSERT(cudaDeviceSynchronize());
        d.y.download(o.y);
        for (std::size_t i = 0; i < o.y.elements(); ++i)
          ASSERT_TRUE(std::isnan(o.y.get(i))) << c << " " << variant->name << ": wrote y without a workspace";
      }
  }
}

// Mid-size 16-bit problems (under 1.5M outputs) with whole 64-element slices run fused on small
// tiles: 64x64 below about half a wave of 128x64 tiles, 128x64 from there. cuBLAS behind the
// concatenation keeps a long reduction over few blocks, a full wave of very long blocks, fewer
// rows than a tile unless each block's work is short, and a second wave of blocks unless each
// block's work is small. From 65536 outputs the GETT also takes work small enough for the
// latency kernel (whose 16-bit time grows with the outputs). The expected choices are the H200's
// (132 SMs: the rule counts waves of blocks); through the dispatcher, on any sm_90, each shape is
// accurate and leaves no NaN.
TEST_F(CudaTest, GettMidSizeChoices) {
  if (!is_sm90()) GTEST_SKIP() << "GETT needs sm_90";
  int sms = 0;
  CUDA_ASSERT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const bool h200_choices = sms == 132;
  struct Expected {
    Shape shape;
    const char* bfloat16_configuration;  // null: not the GETT
  };
  const Expected cases[] = {
      {{8, 512, 128, 512}, "bf16_pingpong_64x64"},        // 32 tiles of 128x64
      {{16, 64, 64, 520}, "bf16_pingpong_64x64"},         // a partial tile in n
      {{16, 256, 128, 1024}, "bf16_pingpong_64x64"},      // 2^23 multiply-adds per block
      {{1, 2048, 64, 64}, "bf16_pingpong_64x64"},         // latency-sized work, 131072 outputs
      {{2, 128, 64, 512}, "bf16_pingpong_64x64"},         // 65536 outputs
      {{8, 1024, 128, 1024}, "bf16_cooperative_128x64"},  // 128 tiles
      {{6, 1000, 64, 1000}, "bf16_cooperative_128x64"},   // partial tiles in both
      {{32, 256, 128, 4096}, "bf16_cooperative_128x64"},  // a long reduction over a full wave
      {{3, 4096, 64, 320}, "bf16_cooperative_128x64"},    // two waves of short blocks
      {{32, 512, 128, 1024}, nullptr},                    // a long reduction over half a wave
      {{32, 256, 64, 2048}, nullptr},                     // 2^24 per block, half a wave
      {{16, 640, 128, 2048}, nullptr},                    // two waves of long blocks
      {{64, 64, 128, 8192}, "bf16_weight_rows_pingpong_64x64"},  // 64 rows against 128 MB
      {{64, 16, 128, 8192}, nullptr},                     // fewer rows than a tile, long blocks
  };
  for (DType dtype : {DType::bfloat16, DType::float16})
    for (const Expected& e : cases) {
      const Case c{e.shape, dtype, Layout::head_major, true};
      Operands o = make_operands(c, 21);
      DeviceOperands d(o);
      const Problem p = validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view());
      const std::string kernel(
          select_kernel(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), options_for("auto")));
      if (h200_choices && e.bfloat16_configuration == nullptr) {
        EXPECT_NE(kernel, kGett) << c;
      } else if (h200_choices) {
        EXPECT_EQ(kernel, kGett) << c;
        std::string expected = e.bfloat16_configuration;
        if (dtype == DType::float16) expected.replace(0, 4, "f16");
        EXPECT_EQ(cuda::gett::choose(p).variant->name, expected) << c;
      }
      const Options automatic = options_for("auto");
      expect_accurate(c, automatic, cuda_error_of(c, automatic));
    }
}

// Many waves of 128x128 tiles (or a reduction of up to 256): ping-pong 128x128, except that TF32
// with a deeper reduction takes cooperative 128x256 tiles unless the device's memory delivers
// 4.5 TB/s (an H200's 4.9 does, an H100 SXM's 3.35 does not). The rule reads the peak bandwidth
// from the device's memory clock and bus width, which must therefore be reported.
TEST_F(CudaTest, GettLargeTf32TilesFollowMemoryBandwidth) {
  if (!is_sm90()) GTEST_SKIP() << "GETT needs sm_90";
  const double bandwidth = cuda::peak_memory_bandwidth(0);
  ASSERT_GT(bandwidth, 1e12) << "peak memory bandwidth (bytes/s) from cudaDevAttrMemoryClockRate and BusWidth";
  const bool fast_memory = bandwidth >= 4.5e12;
  struct Expected {
    Shape shape;
    DType dtype;
    const char* configuration;
  };
  const char* deep_tf32 = fast_memory ? "tf32_pingpong_128x128" : "tf32_cooperative_128x256";
  const Expected cases[] = {
      {{8, 8192, 512, 4096}, DType::float32, deep_tf32},
      {{32, 8192, 128, 4096}, DType::float32, deep_tf32},
      {{8, 4096, 512, 4096}, DType::float32, deep_tf32},
      {{4, 16384, 64, 8192}, DType::float32, "tf32_pingpong_128x128"},  // R*H = 256
      {{8, 8192, 512, 4096}, DType::bfloat16, "bf16_pingpong_128x128_c2x1_epi64x64"},
      {{4, 16384, 64, 8192}, DType::bfloat16, "bf16_pingpong_128x128_c2x1_epi64x128"},
  };
  for (const Expected& e : cases) {
    const Problem p = problem_without_operands(e.shape, e.dtype, Device::cuda(0));
    EXPECT_EQ(cuda::gett::choose(p).variant->name, std::string(e.configuration))
        << Case{e.shape, e.dtype, Layout::contiguous, true} << ", peak memory bandwidth " << bandwidth / 1e12
        << " TB/s";
  }
}

// 17 to 64 rows (TF32: 32) against 8 to 128 MB of weight (TF32: 256 MB) that the weight-streaming
// kernel leaves run on the GETT with the weight's rows as M: x's rows in one N tile of 32 or 64
// (two of 32 where the weight has 33 or fewer 64-row tiles), in clusters of four along M where
// they all fit the GPU at once (an H100 held 30 clusters of four, 120 tiles; the exact bound is
// GettClusteredWeightRowsFitAtOnce's). Where the weight has fewer than 32 tiles (and at least 8), from 8 MB (16-bit with 33 to 64 rows: from 4 MB in 8 parts or more) to 64 MB (TF32:
// 128 MB) the reduction is split (TF32 with 33 to 64 rows: to 128 MB in 8 parts or more, to 32 MB
// in 4, to 16 MB in 2); with 65 to 128 rows, 16-bit from 4 to 16 MB in 4 parts or more, TF32 from
// 8 to 36 MB.
// Partial tiles in both modes, a slice width the GETT refuses, and the limits on either side. The
// expected choices are the H200's; through the dispatcher each shape is accurate.
TEST_F(CudaTest, GettWeightRowsChoices) {
  if (!is_sm90()) GTEST_SKIP() << "GETT needs sm_90";
  struct Expected {
    Case c;
    const char* configuration;  // null: not the GETT
    Fp32Precision precision = Fp32Precision::ieee;
  };
  constexpr Fp32Precision tf32 = Fp32Precision::tf32;
  const Expected cases[] = {
      {{{32, 28, 128, 4096}, DType::bfloat16, Layout::head_major, true}, "bf16_weight_rows_pingpong_64x32_c4x1"},
      {{{32, 32, 128, 4096}, DType::float16, Layout::contiguous, true}, "f16_weight_rows_pingpong_64x32_c4x1"},
      {{{24, 32, 128, 6144}, DType::bfloat16, Layout::contiguous, true}, "bf16_weight_rows_pingpong_64x32_c4x1"},
      {{{28, 32, 128, 7424}, DType::bfloat16, Layout::head_major, true}, "bf16_weight_rows_pingpong_64x32_c4x1"},
      // More clusters of four than 132 SMs hold at once (GettClusteredWeightRowsFitAtOnce finds the bound).
      {{{24, 32, 128, 8704}, DType::float16, Layout::contiguous, false}, "f16_weight_rows_pingpong_64x32"},
      {{{24, 17, 128, 8776}, DType::bfloat16, Layout::contiguous, false}, "bf16_weight_rows_pingpong_64x32"},
      {{{28, 48, 128, 9216}, DType::bfloat16, Layout::head_major, true}, "bf16_weight_rows_pingpong_64x64"},
      {{{32, 48, 128, 4096}, DType::bfloat16, Layout::contiguous, true}, "bf16_weight_rows_pingpong_64x64_c4x1"},
      {{{20, 37, 128, 3000}, DType::float16, Layout::head_major, true}, "f16_weight_rows_pingpong_64x64_c4x1"},
      {{{16, 64, 128, 2048}, DType::bfloat16, Layout::contiguous, true}, "bf16_weight_rows_pingpong_64x32_c4x1"},
      {{{16, 48, 128, 2048}, DType::float16, Layout::contiguous, true}, "f16_weight_rows_pingpong_64x32_c4x1"},
      {{{16, 64, 128, 2560}, DType::bfloat16, Layout::head_major, true}, "bf16_weight_rows_pingpong_64x64_c4x1"},
      {{{32, 24, 128, 4096}, DType::float32, Layout::contiguous, true}, "tf32_weight_rows_pingpong_64x32_c4x1", tf32},
      {{{16, 32, 128, 2048}, DType::float32, Layout::head_major, false}, "tf32_weight_rows_pingpong_64x32_c4x1", tf32},
      {{{32, 24, 128, 8704}, DType::float32, Layout::head_major, true}, "tf32_weight_rows_pingpong_64x32", tf32},
      {{{16, 32, 128, 2048}, DType::bfloat16, Layout::contiguous, true}, nullptr},   // 8 MB: weight-streaming
      {{{32, 16, 128, 4096}, DType::bfloat16, Layout::contiguous, true}, nullptr},   // 16 rows: weight-streaming
      {{{32, 24, 128, 4096}, DType::bfloat16, Layout::head_major, true}, nullptr},   // 24 rows: weight-streaming
      {{{24, 17, 128, 2600}, DType::bfloat16, Layout::contiguous, false}, nullptr},  // 17 rows: weight-streaming
      {{{32, 65, 128, 4096}, DType::bfloat16, Layout::contiguous, true}, nullptr},   // 65 rows
      // Fewer than 32 weight tiles: the reduction split.
      {{{64, 48, 128, 1024}, DType::bfloat16, Layout::contiguous, true}, "bf16_weight_rows_split_pingpong_64x64"},
      {{{48, 40, 128, 1536}, DType::float16, Layout::head_major, false}, "f16_weight_rows_split_pingpong_64x64"},
      {{{128, 20, 128, 512}, DType::float16, Layout::head_major, true}, "f16_weight_rows_split_pingpong_64x32"},
      {{{40, 28, 128, 1920}, DType::bfloat16, Layout::contiguous, true}, "bf16_weight_rows_split_pingpong_64x32"},
      {{{32, 48, 128, 520}, DType::bfloat16, Layout::contiguous, true}, "bf16_weight_rows_split_pingpong_64x64"},
      {{{64, 24, 128, 1024}, DType::float32, Layout::head_major, true}, "tf32_weight_rows_split_pingpong_64x32", tf32},
      {{{512, 48, 128, 512}, DType::float32, Layout::contiguous, true}, "tf32_weight_rows_split_pingpong_64x32", tf32},
      {{{16, 48, 128, 1984}, DType::float32, Layout::head_major, true}, "tf32_weight_rows_split_pingpong_64x32", tf32},
      // 65 to 128 rows: 16-bit 4-16 MB in 4 parts or more, TF32 8-36 MB.
      {{{64, 96, 128, 1024}, DType::bfloat16, Layout::head_major, true}, "bf16_weight_rows_split_pingpong_64x64"},
      {{{64, 112, 128, 512}, DType::float16, Layout::contiguous, true}, "f16_weight_rows_split_pingpong_64x64"},
      {{{24, 128, 128, 1024}, DType::bfloat16, Layout::contiguous, false}, "bf16_weight_rows_split_pingpong_64x64"},
      {{{64, 96, 128, 1024}, DType::float32, Layout::head_major, true}, "tf32_weight_rows_split_pingpong_64x32", tf32},
      {{{96, 80, 128, 768}, DType::float32, Layout::contiguous, true}, "tf32_weight_rows_split_pingpong_64x32", tf32},
      {{{96, 80, 128, 768}, DType::bfloat16, Layout::contiguous, true}, nullptr},        // 18 MB
      {{{48, 112, 128, 1536}, DType::bfloat16, Layout::head_major, true}, nullptr},      // 2 parts
      {{{128, 128, 128, 1024}, DType::float32, Layout::contiguous, true}, nullptr, tf32}, // 64 MB
      {{{64, 129, 128, 1024}, DType::bfloat16, Layout::contiguous, true}, nullptr},      // 129 rows
      {{{24, 64, 128, 1536}, DType::float32, Layout::contiguous, true}, nullptr, tf32},  // 18 MB in 2 parts
      {{{16, 48, 128, 1984}, DType::float16, Layout::contiguous, true}, nullptr},  // 7.75 MB in 4 parts
      {{{16, 32, 128, 1024}, DType::bfloat16, Layout::contiguous, true}, nullptr}, // 4 MB: weight-streaming
      {{{512, 32, 128, 1024}, DType::bfloat16, Layout::contiguous, true}, nullptr},      // 128 MB
      {{{256, 64, 128, 1024}, DType::float32, Layout::contiguous, true}, nullptr, tf32}, // 128 MB in 4 parts
      {{{64, 32, 128, 256}, DType::float32, Layout::contiguous, true}, nullptr, tf32},   // 4 weight tiles
      {{{128, 32, 32, 1024}, DType::bfloat16, Layout::contiguous, true}, nullptr},       // H = 32
      {{{64, 24, 128, 1024}, DType::float32, Layout::head_major, true}, nullptr},        // exact float32
      {{{64, 32, 128, 16384}, DType::bfloat16, Layout::contiguous, true}, nullptr},  // 256 MB
      {{{32, 24, 72, 4096}, DType::bfloat16, Layout::contiguous, true}, nullptr},    // H = 72: partial K tiles
      {{{32, 48, 128, 4096}, DType::float32, Layout::contiguous, true}, nullptr, tf32},  // TF32, 48 rows
      {{{32, 24, 128, 4096}, DType::float32, Layout::contiguous, true}, nullptr},        // exact float32
  };
  for (const Expected& e : cases) {
    Operands o = make_operands(e.c, 8);
    DeviceOperands d(o);
    const Problem p = validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view());
    const Options automatic = options_for("auto", e.precision);
    const std::string kernel(select_kernel(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), automatic));
    if (e.configuration == nullptr) {
      EXPECT_NE(kernel, kGett) << e.c;
    } else {
      EXPECT_EQ(kernel, kGett) << e.c;
      EXPECT_EQ(cuda::gett::choose(p).variant->name, std::string(e.configuration)) << e.c;
    }
    expect_accurate(e.c, automatic, cuda_error_of(e.c, automatic));
  }
}

// Every clustered configuration has clusters that fit the device (cudaOccupancyMaxActiveClusters,
// at most the SMs' share), and those with the weight's rows as M take a problem while its clusters
// all fit at once: at that bound, and not one 64-row tile of the weight past it.
TEST_F(CudaTest, GettClusteredWeightRowsFitAtOnce) {
  if (!is_sm90()) GTEST_SKIP() << "GETT needs sm_90";
  int sms = 0;
  CUDA_ASSERT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const auto library = cuda::gett::library_variants();
  for (const cuda::gett::Variant* v : library) {
    if (v->cluster_size == 1) continue;
    const int clusters = v->clusters_at_once(0);
    EXPECT_GE(clusters, 1) << v->name;
    EXPECT_LE(clusters * v->cluster_size, sms) << v->name;
  }
  struct Bound {
    DType dtype;
    std::int64_t rows;  // of x: one N tile of 32, then of 64
    const char* clustered;
    const char* alone;
    Fp32Precision precision = Fp32Precision::ieee;
  };
  const Bound bounds[] = {
      {DType::bfloat16, 32, "bf16_weight_rows_pingpong_64x32_c4x1", "bf16_weight_rows_pingpong_64x32"},
      {DType::float16, 48, "f16_weight_rows_pingpong_64x64_c4x1", "f16_weight_rows_pingpong_64x64"},
      {DType::float32, 24, "tf32_weight_rows_pingpong_64x32_c4x1", "tf32_weight_rows_pingpong_64x32",
       Fp32Precision::tf32},
  };
  for (const Bound& b : bounds) {
    const auto named = std::find_if(library.begin(), library.end(),
                                    [&](const cuda::gett::Variant* v) { return v->name == std::string(b.clustered); });
    ASSERT_NE(named, library.end()) << b.clustered;
    const std::int64_t most_tiles = (*named)->cluster_size * (*named)->clusters_at_once(0);
    for (const std::int64_t K : {most_tiles * 64, most_tiles * 64 + 8}) {
      const Case c{{24, b.rows, 128, K}, b.dtype, Layout::contiguous, true};
      Operands o = make_operands(c, 8);
      DeviceOperands d(o);
      const Problem p = validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view());
      EXPECT_EQ(cuda::gett::choose(p).variant->name, std::string(K == most_tiles * 64 ? b.clustered : b.alone))
          << c << " (" << most_tiles << " tiles at once)";
      const Options gett = options_for(kGett, b.precision);
      expect_accurate(c, gett, cuda_error_of(c, gett));
    }
  }
}

// The weight-streaming kernel run directly with every division of the reduction between warps:
// each row count's configuration (1-8, 9-16, 17-24 and 25-32 rows, whole and partial row groups),
// reductions that end inside a 32-element step (R*H = 952, 1000, 360) or inside a warp's share,
// outputs that end inside a 16-output tile, long reductions, and a problem of 16 rows in two.
const Shape kWeightStreamShapes[] = {{16, 1, 128, 40}, {7, 9, 136, 33},   {3, 16, 264, 70}, {33, 13, 64, 129},
                                     {5, 16, 200, 17}, {64, 2, 128, 300}, {1, 8, 8, 1},     {4, 12, 32, 56},
                                     {5, 21, 72, 70},  {3, 32, 64, 33},   {7, 27, 136, 129}, {2, 32, 256, 17},
                                     {9, 24, 40, 65}};
// Warps per block, and blocks per tile as one cluster (0: the launch's rule, which splits these
// shapes' few tiles between up to 8 blocks).
const cuda::WeightStreamTuning kWeightStreamTunings[] = {
    {},
    {.warps = 1},
    {.warps = 3},
    {.warps = 8},
    {.warps = 12},
    {.warps = 16},
    {.warps = 4, .splits = 1},
    {.warps = 8, .splits = 1},
    {.warps = 16, .splits = 1},
    {.warps = 8, .splits = 2},
    {.warps = 3, .splits = 3},
    {.warps = 5, .splits = 7},
    {.warps = 16, .splits = 8}};

std::string weight_stream_label(const cuda::WeightStreamTuning& t) {
  return "weight stream, warps " + std::to_string(t.warps) + ", splits " + std::to_string(t.splits);
}

void run_weight_stream_on(const DeviceOperands& d, const cuda::WeightStreamTuning& tuning,
                          Fp32Precision precision = Fp32Precision::ieee) {
  cuda::run_weight_stream(validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view()), precision,
                          nullptr, tuning);
}

// Each division matches the reference: float32 within 1e-5 (3xTF32), 16-bit and TF32 within
// twice the unfused baseline's error (in TF32 for TF32) plus one rounding unit.
TEST_F(CudaTest, WeightStreamEveryDivision) {
  const std::pair<DType, Fp32Precision> modes[] = {{DType::bfloat16, Fp32Precision::ieee},
                                                   {DType::float16, Fp32Precision::ieee},
                                                   {DType::float32, Fp32Precision::ieee},
                                                   {DType::float32, Fp32Precision::tf32}};
  for (const auto& [dtype, precision] : modes)
    for (const Shape& shape : kWeightStreamShapes)
      for (Layout layout : {Layout::contiguous, Layout::head_major}) {
        const Case c{shape, dtype, layout, shape.K % 2 == 0};
        const double limit = accuracy_limit(c, precision);
        for (const cuda::WeightStreamTuning& tuning : kWeightStreamTunings) {
          const std::string label = weight_stream_label(tuning) + (precision == Fp32Precision::tf32 ? ", tf32" : "");
          const double err = error_of_run(c, 1234, label, [&](const DeviceOperands& d) {
            run_weight_stream_on(d, tuning, precision);
          });
          ASSERT_FALSE(std::isnan(err)) << c << " " << label << ": NaN left in y";
          EXPECT_LE(err, limit) << c << " " << label;
        }
      }
}

// Two runs of one division write the same bits (the summation order is fixed: no atomics), and
// every output. No cuBLAS call, so that compute-sanitizer's racecheck sees this kernel alone.
TEST_F(CudaTest, WeightStreamDeterministic) {
  for (const Shape& shape : kWeightStreamShapes)
    for (const cuda::WeightStreamTuning& tuning : kWeightStreamTunings) {
      const Case c{shape, DType::bfloat16, Layout::head_major, true};
      std::vector<std::vector<double>> ys;
      for (int run = 0; run < 2; ++run) {
        Operands o = make_operands(c, 77);
        DeviceOperands d(o);
        run_weight_stream_on(d, tuning);
        CUDA_ASSERT(cudaDeviceSynchronize());
        d.y.download(o.y);
        EXPECT_TRUE(gaps_untouched(o.y)) << c << " " << weight_stream_label(tuning);
        std::vector<double> y;
        for (std::int64_t b = 0; b < c.shape.B; ++b)
          for (std::int64_t k = 0; k < c.shape.K; ++k) y.push_back(o.y.at({b, k}));
        ys.push_back(y);
      }
      for (double v : ys[0]) ASSERT_FALSE(std::isnan(v)) << c << " " << weight_stream_label(tuning) << ": NaN left in y";
      EXPECT_EQ(ys[0], ys[1]) << c << " " << weight_stream_label(tuning);
    }
}

// The dispatcher sends problems of up to 32 rows to the weight-streaming kernel (where it can
// read them in 16-byte chunks): 16-bit against 1 to 72 MB of weight (64 MB with 9 to 16 rows;
// with 17 to 24 72 MB where K/16 is at most three per SM and the weight has 64-row tiles enough,
// else 8 MB with 17 to 32; where the weight has fewer 64-row tiles than about a quarter of the
// SMs, 16 MB, and 20 MB with up to 28 rows where K/16 is 0.9 of the SMs or more); float32 from
// 2 MB, up to 8 rows to 144 MB, with 9 to 16 rows TF32 up to 36 MB and exact where the latency
// kernel declines, with 17 to 32 rows TF32 up to 8 MB (16 MB with up to 24) and exact at any
// size; nothing else, and nothing the GETT takes with its reduction split (17 rows or more from
// 8 MB where the weight has 8 to 31 tiles). Each choice is accurate. Only the rules on tile
// counts count SMs: their cases expect the H200's and the H100's 132.
TEST_F(CudaTest, WeightStreamChoices) {
  struct Expected {
    Case c;
    bool streams;
    Fp32Precision precision = Fp32Precision::ieee;
    bool counts_sms = false;
  };
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  constexpr Fp32Precision tf32 = Fp32Precision::tf32;
  const Expected cases[] = {
      {{{32, 1, 128, 4096}, DType::bfloat16, Layout::head_major, true}, true},   // 32 MB, one row
      {{{16, 16, 128, 2048}, DType::float16, Layout::contiguous, false}, true},  // 16 rows
      {{{12, 8, 64, 768}, DType::bfloat16, Layout::head_major, true}, true},     // 1.1 MB
      {{{48, 4, 128, 6144}, DType::bfloat16, Layout::contiguous, true}, true},   // 72 MB
      {{{48, 16, 128, 6144}, DType::float16, Layout::contiguous, true}, false},  // 72 MB, 16 rows
      {{{16, 17, 128, 2048}, DType::bfloat16, Layout::head_major, true}, true},  // 8 MB, 17 rows
      {{{16, 17, 128, 4096}, DType::bfloat16, Layout::head_major, true}, true, {}, true},  // 16 MB, 17 rows
      {{{48, 24, 128, 6144}, DType::float16, Layout::contiguous, true}, true, {}, true},   // 72 MB, 384 tiles
      {{{64, 24, 128, 6144}, DType::bfloat16, Layout::contiguous, true}, false, {}, true}, // 96 MB
      {{{32, 24, 128, 8192}, DType::bfloat16, Layout::contiguous, true}, false, {}, true}, // 512 tiles
      {{{32, 25, 128, 4096}, DType::bfloat16, Layout::contiguous, true}, false, {}, true}, // 25 rows, 32 MB
      {{{16, 24, 128, 1024}, DType::bfloat16, Layout::contiguous, true}, true, {}, true},  // 4 MB, 16 weight tiles
      {{{64, 24, 128, 1024}, DType::bfloat16, Layout::contiguous, true}, false, {}, true}, // 16 MB: GETT, split
      {{{32, 32, 128, 1536}, DType::float16, Layout::head_major, false}, false, {}, true}, // 12 MB: GETT, split
      {{{16, 17, 128, 2112}, DType::bfloat16, Layout::contiguous, true}, true, {}, true},  // 8.3 MB, 33 weight tiles
      {{{64, 24, 128, 1088}, DType::bfloat16, Layout::contiguous, true}, false},           // 17 MB
      {{{52, 24, 128, 1536}, DType::float16, Layout::head_major, true}, false, {}, true},  // 19.5 MB, 24 tiles
      {{{40, 28, 128, 1920}, DType::bfloat16, Layout::head_major, true}, false, {}, true}, // 18.75 MB: GETT, split
      {{{32, 24, 128, 2048}, DType::bfloat16, Layout::head_major, true}, true, {}, true},  // 16 MB, 32 tiles
      {{{40, 28, 128, 2048}, DType::float16, Layout::contiguous, false}, true, {}, true},  // 20 MB, 28 rows
      {{{44, 20, 128, 2048}, DType::bfloat16, Layout::contiguous, true}, true, {}, true},  // 22 MB, 32 tiles
      {{{32, 32, 128, 2048}, DType::bfloat16, Layout::contiguous, true}, false, {}, true}, // 32 rows, 32 tiles
      {{{20, 24, 128, 2112}, DType::bfloat16, Layout::contiguous, true}, true, {}, true},  // 10 MB, 33 tiles
      {{{20, 25, 128, 2112}, DType::bfloat16, Layout::contiguous, true}, false, {}, true}, // 25 rows
      {{{16, 24, 128, 4096}, DType::float16, Layout::contiguous, true}, true, {}, true},   // 16 MB, 64 tiles
      {{{26, 32, 128, 512}, DType::float16, Layout::contiguous, true}, true},    // 3.2 MB, 32 rows
      {{{64, 1, 128, 8192}, DType::bfloat16, Layout::contiguous, true}, false},  // 128 MB
      {{{4, 12, 32, 56}, DType::bfloat16, Layout::contiguous, true}, false},     // 14 KB: latency kernel
      {{{16, 8, 128, 2048}, DType::bfloat16, Layout::strided, true}, false},     // no 16-byte chunks
      {{{16, 8, 128, 2048}, DType::float32, Layout::contiguous, true}, true},    // float32, 16 MB
      {{{32, 1, 128, 4096}, DType::float32, Layout::head_major, false}, true},   // 64 MB, one row
      {{{16, 1, 128, 2048}, DType::float32, Layout::contiguous, true}, true, tf32},
      {{{40, 4, 128, 8192}, DType::float32, Layout::contiguous, true}, false},   // 160 MB
      {{{6, 4, 64, 1024}, DType::float32, Layout::contiguous, true}, false},     // 1.5 MB
      {{{16, 16, 128, 2048}, DType::float32, Layout::head_major, true}, true},   // the latency kernel declines
      {{{8, 16, 128, 1024}, DType::float32, Layout::contiguous, true}, false},   // the latency kernel's
      {{{8, 16, 128, 1024}, DType::float32, Layout::contiguous, true}, true, tf32},    // 4 MB
      {{{32, 16, 128, 4096}, DType::float32, Layout::contiguous, false}, false, tf32}, // 64 MB, 16 rows
      {{{26, 16, 128, 512}, DType::float32, Layout::contiguous, true}, true, tf32},    // 512 outputs, split
      {{{16, 24, 128, 2048}, DType::float32, Layout::head_major, true}, true},         // exact, 24 rows
      {{{8, 32, 128, 1024}, DType::float32, Layout::contiguous, false}, true},         // 4 MB
      {{{4, 32, 128, 2048}, DType::float32, Layout::contiguous, true}, true},          // the latency kernel's
      {{{40, 18, 128, 8192}, DType::float32, Layout::contiguous, true}, true},         // 160 MB, 18 rows
      {{{26, 32, 128, 512}, DType::float32, Layout::contiguous, true}, true},          // 512 outputs, split
      {{{6, 32, 64, 1024}, DType::float32, Layout::contiguous, true}, false},          // 1.5 MB
      {{{16, 33, 128, 2048}, DType::float32, Layout::contiguous, true}, false},        // 33 rows
      {{{16, 32, 128, 2048}, DType::float32, Layout::contiguous, true}, false, tf32},  // TF32, 16 MB
      {{{16, 24, 128, 2048}, DType::float32, Layout::contiguous, true}, true, tf32, true}, // 24 rows
      {{{16, 24, 128, 4096}, DType::float32, Layout::contiguous, true}, false, tf32},  // TF32, 32 MB
      {{{8, 32, 128, 1024}, DType::float32, Layout::head_major, true}, true, tf32},    // TF32, 4 MB
      {{{64, 32, 128, 256}, DType::float32, Layout::head_major, true}, true, tf32},    // TF32, 8 MB, split
      {{{32, 32, 128, 512}, DType::float32, Layout::head_major, true}, false, tf32},   // TF32, 8 MB: GETT, split
      {{{16, 33, 128, 2048}, DType::bfloat16, Layout::contiguous, true}, false},       // 33 rows
  };
  for (const Expected& e : cases) {
    if (e.counts_sms && sms != 132) continue;
    Operands o = make_operands(e.c, 5);
    DeviceOperands d(o);
    const Options automatic = options_for("auto", e.precision);
    const std::string kernel(select_kernel(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), automatic));
    EXPECT_EQ(kernel == kWeightStream, e.streams) << e.c << ": " << kernel;
    expect_accurate(e.c, automatic, cuda_error_of(e.c, automatic));
  }
}

// TF32 rounds each float32 operand to nearest, as cuBLAS's TF32 does. With every x and W equal to
// 1 + 3 * 2^-12 (three quarters of a TF32 unit above 1), a 128-long reduction gives
//   128 * (1 + 2^-10)^2 ~ 128.25 with both operands rounded, 128.125 with one, 128 with neither
// (wgmma truncating), and 128.1875 in exact arithmetic.
TEST_F(CudaTest, GettTf32RoundsOperandsToNearest) {
  if (!is_sm90()) GTEST_SKIP() << "GETT needs sm_90";
  const Case c{{2, 256, 64, 256}, DType::float32, Layout::head_major, false};
  const double v = 1 + 3 * 0x1p-12, rounded_both = 128 * (1 + 0x1p-10) * (1 + 0x1p-10);
  for (const cuda::gett::Variant* variant : cuda::gett::library_variants()) {
    if (variant->dtype != DType::float32) continue;
    Operands o = make_operands(c, 1);
    for (std::size_t i = 0; i < o.x.elements(); ++i) o.x.set(i, v);
    for (std::size_t i = 0; i < o.weight.elements(); ++i) o.weight.set(i, v);
    DeviceOperands d(o);
    run_gett_variant(*variant, d);
    d.y.download(o.y);
    double worst = 0;
    for (std::int64_t b = 0; b < c.shape.B; ++b)
      for (std::int64_t k = 0; k < c.shape.K; ++k) worst = std::max(worst, std::abs(o.y.at({b, k}) - rounded_both));
    EXPECT_LE(worst, 1e-2) << variant->name << ": y is not 128 sums of rounded products (" << rounded_both << ")";
  }
}

// Through the public API: forced by name, TF32 only when allowed, refusals as `unsupported`
// errors that leave y untouched; and the dispatcher's own choice is accurate.
TEST_F(CudaTest, GettThroughTheDispatcher) {
  const Case exact{{4, 256, 64, 128}, DType::float32, Layout::contiguous, true};
  try {
    Operands o = make_operands(exact, 3);
    DeviceOperands d(o);
    d.forward(options_for(kGett));
    ADD_FAILURE() << "GETT ran float32 without TF32";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("runs float32 only as TF32"), std::string::npos) << e.what();
  }
  if (!is_sm90()) GTEST_SKIP() << "GETT needs sm_90";
  const Options gett_tf32 = options_for(kGett, Fp32Precision::tf32);
  expect_accurate(exact, gett_tf32, cuda_error_of(exact, gett_tf32));
  {  // A million outputs in TF32 go to the GETT; exact float32 never does.
    const Case tf32{{8, 1024, 128, 1024}, DType::float32, Layout::head_major, true};
    Operands o = make_operands(tf32, 5);
    DeviceOperands d(o);
    const auto chosen = [&](Fp32Precision precision) {
      const Options automatic = options_for("auto", precision);
      return std::string(select_kernel(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), automatic));
    };
    EXPECT_EQ(chosen(Fp32Precision::tf32), kGett);
    EXPECT_NE(chosen(Fp32Precision::ieee), kGett);
    const Options automatic_tf32 = options_for("auto", Fp32Precision::tf32);
    expect_accurate(tf32, automatic_tf32, cuda_error_of(tf32, automatic_tf32));
  }
  for (DType dtype : {DType::bfloat16, DType::float16}) {
    const Case c{{8, 1024, 128, 1024}, dtype, Layout::head_major, true};
    expect_accurate(c, options_for(kGett), cuda_error_of(c, options_for(kGett)));
    expect_accurate(c, options_for("auto"), cuda_error_of(c, options_for("auto")));

    // y starting one element past a 16-byte boundary (its row stride stays aligned): refused.
    const Case padded{{2, 64, 64, 64}, dtype, Layout::contiguous, true};
    Operands o = make_operands(padded, 4);
    HostTensor wide_y(dtype, {64, 72}, {72, 1});
    wide_y.fill_nan();
    DeviceOperands d(o);
    DeviceTensor y_storage(wide_y);
    TensorView y = y_storage.view();
    y.sizes[1] = 64;
    y.data = static_cast<char*>(y.data) + dtype_size(dtype);
    try {
      forward(d.x.view(), d.weight.view(), d.bias_view(), y, options_for(kGett));
      ADD_FAILURE() << "GETT accepted a misaligned y";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("16-byte boundaries"), std::string::npos) << e.what();
    }
    CUDA_ASSERT(cudaDeviceSynchronize());
    y_storage.download(wide_y);
    ASSERT_EQ(first_unpoisoned(wide_y), std::nullopt) << "y written";
    // The dispatcher takes another kernel for it instead.
    forward(d.x.view(), d.weight.view(), d.bias_view(), y, options_for("auto"));
    CUDA_ASSERT(cudaDeviceSynchronize());
  }
}

// Captured in a CUDA graph (global mode) and replayed on new inputs; same bits on every run of
// the same inputs; nothing allocated per call (by the device's free memory, which only holds
// still while no other process allocates: CTest runs the GPU suites one at a time).
TEST_F(CudaTest, GettGraphDeterminismAndMemory) {
  if (!is_sm90()) GTEST_SKIP() << "GETT needs sm_90";
  const Case c{{8, 1024, 128, 1024}, DType::bfloat16, Layout::head_major, true};
  const Options options = options_for(kGett);
  const TestStream stream;
  Operands o = make_operands(c, 9);
  DeviceOperands d(o);
  EXPECT_EQ(workspace_bytes(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), options), 0u);
  d.forward(options, stream);
  CUDA_ASSERT(cudaStreamSynchronize(stream));
  HostTensor first = o.y;
  d.y.download(first);
  std::size_t free_before = 0, free_after = 0, total = 0;
  CUDA_ASSERT(cudaMemGetInfo(&free_before, &total));
  for (int i = 0; i < 50; ++i) d.forward(options, stream);
  CUDA_ASSERT(cudaStreamSynchronize(stream));
  CUDA_ASSERT(cudaMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_before, free_after);
  HostTensor again = o.y;
  d.y.download(again);
  EXPECT_EQ(first.storage, again.storage);

  expect_graph_replays_match(c, d, options, stream, 2, 200, 2e-2);
}

// ---- More than one GPU ----

// forward() runs on the tensors' device whichever device is current, and leaves the current
// device as it found it. Both ways round (operands on the first GPU with the second current, then
// on the second with the first current), every kernel family: the second way meets each kernel's
// per-device state (shared-memory limits, occupancy, cuBLASLt handles, GETT plans, the workspace
// cache) on a GPU the rest of the suite leaves alone. The GETT's cases check that the dispatcher
// takes the configuration they are there for (on an H200).
TEST_F(CudaTest, RunsOnTheTensorsDeviceWhicheverIsCurrent) {
  int devices = 0;
  CUDA_ASSERT(cudaGetDeviceCount(&devices));
  if (devices < 2) GTEST_SKIP() << "needs two CUDA devices";
  constexpr Fp32Precision ieee = Fp32Precision::ieee, tf32 = Fp32Precision::tf32;
  struct Run {
    Case c;
    const char* kernel;
    Fp32Precision precision = ieee;
    const char* gett_configuration = nullptr;  // what "auto" takes, where it should be the GETT
  };
  const Case mid{{8, 300, 64, 200}, DType::float32, Layout::head_major, true};
  const Case gett_sized{{8, 1024, 128, 1024}, DType::bfloat16, Layout::head_major, true};
  const Run runs[] = {
      {mid, "auto"},
      {mid, "cuda_latency"},
      {mid, kMma},
      {mid, "cuda_simt_tiled"},
      {mid, kBaseline},
      {{{4, 12, 32, 56}, DType::float64, Layout::contiguous, true}, "auto"},         // the latency kernel in double
      {{{8, 1024, 128, 1024}, DType::float32, Layout::contiguous, true}, kMma},      // exact float32 (3xTF32)
      {{{32, 8, 128, 4096}, DType::bfloat16, Layout::contiguous, true}, kWeightStream},
      {{{32, 1, 128, 512}, DType::bfloat16, Layout::contiguous, true}, kWeightStream},  // a cluster splits it
      {gett_sized, "auto", ieee, "bf16_cooperative_128x64"},
      {{{8, 1024, 128, 1024}, DType::float32, Layout::head_major, true}, kGett, tf32},
      {{{32, 48, 128, 4096}, DType::bfloat16, Layout::contiguous, true}, "auto", ieee,
       "bf16_weight_rows_pingpong_64x64_c4x1"},
      {{{64, 48, 128, 1024}, DType::bfloat16, Layout::contiguous, true}, "auto", ieee,
       "bf16_weight_rows_split_pingpong_64x64"},
      {gett_sized, kBaseline},
  };
  for (const int operands_device : {0, 1}) {
    const int other = 1 - operands_device;
    const cuda::ScopedDevice on(operands_device);
    int sms = 0;
    CUDA_ASSERT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, operands_device));
    for (const Run& run : runs) {
      std::ostringstream label;
      label << run.c << " kernel " << run.kernel << " on device " << operands_device << ", device " << other
            << " current";
      const bool gett = run.gett_configuration != nullptr || std::string(run.kernel) == kGett;
      if (gett && !is_sm90(operands_device)) continue;
      const Options options = options_for(run.kernel, run.precision);
      const double limit = accuracy_limit(run.c, run.precision);
      const double err = error_of_run(run.c, 41, label.str(), [&](const DeviceOperands& d) {
        if (run.gett_configuration != nullptr && sms == 132) {
          const Problem p = validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view());
          EXPECT_EQ(select_kernel(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), options), kGett)
              << label.str();
          EXPECT_EQ(cuda::gett::choose(p).variant->name, std::string(run.gett_configuration)) << label.str();
        }
        CUDA_ASSERT(cudaSetDevice(other));
        d.forward(options);
        EXPECT_EQ(current_device(), other) << label.str();
        CUDA_ASSERT(cudaSetDevice(operands_device));
      });
      ASSERT_FALSE(std::isnan(err)) << label.str() << ": NaN left in y";
      EXPECT_LE(err, limit) << label.str();
    }
  }
}

// The dispatcher's choice on 1,000 random problems (random_problems.hpp: sizes and layouts no sweep
// lists), in turn exact float32, TF32, float64, float16 and bfloat16, every second up to 2^28
// multiply-adds (the GETT's sizes) and the rest up to 2^22, each on a stream of the test's,
// against the exact reference. On the H200 the draws must reach every kernel family but SIMT
// (which only float64 against overlapping weight rows beyond 262,144 outputs takes).
TEST_F(CudaTest, RandomProblemsMatchTheReference) {
  const TestStream stream;
  KernelTally tally;
  for (std::uint32_t seed = 0; seed < 1000; ++seed) {
    const auto [dtype, precision] = kRandomModes[seed % std::size(kRandomModes)];
    const std::int64_t budget = std::int64_t{1} << (seed % 2 == 1 ? 28 : 22);
    RandomForwardProblem p = random_forward_problem(seed, dtype, budget);
    Operands& o = p.operands;
    const DeviceOperands d(o);
    Options options;
    options.fp32_precision = precision;
    const std::string_view kernel = select_kernel(d.x.view(), d.weight.view(), d.bias_view(), d.y.view(), options);
    if (kernel == kGett) {
      const Problem problem = validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view());
      tally.add(std::string(kernel) + "/" + cuda::gett::choose(problem).variant->name);
    } else {
      tally.add(kernel);
    }
    const std::string label = p.description + (precision == Fp32Precision::tf32 ? " tf32" : "") + " kernel " +
                              std::string(kernel);
    d.forward(options, stream);
    const cudaError_t status = cudaStreamSynchronize(stream);
    ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status) << " " << label;
    const double err = downloaded_error(o, d);
    ASSERT_FALSE(std::isnan(err)) << label << ": NaN left in y";
    // cuBLASLt's bias epilogue rounds a 16-bit result a second time (up to 1.4 units here, and
    // only with a bias; PyTorch's F.linear runs the same epilogue): two units for the unfused path.
    const bool rounded_twice = kernel == kBaseline && is_low_precision(dtype) && d.has_bias;
    EXPECT_LE(err, rounding_tolerance(dtype, precision) * (rounded_twice ? 2 : 1)) << label;
    EXPECT_TRUE(gaps_untouched(o.y)) << label << ": wrote outside y's view";
  }
  std::cout << "kernels:" << tally.str() << "\n";
  if (is_sm90()) {
    for (const char* family : {"cuda_latency", "cuda_weight_stream", "cuda_tensor_core_mma", "cuda_gett_sm90/",
                               "cuda_unfused_cublaslt"})
      EXPECT_TRUE(tally.reached(family)) << family << " never chosen:" << tally.str();
  }
}

// The same kind of random problems (up to 2^22 multiply-adds) with every CUDA kernel forced where
// it takes the problem, so that layouts no sweep lists (zero strides, overlapping weight rows, any
// dimension order) reach the fallbacks too. The unfused baseline is held to the rounding bound;
// the others, in 16-bit and TF32, to twice the baseline's own error on the problem where it runs:
// a TF32 sum that cancels to a small result has a large relative error in any kernel.
TEST_F(CudaTest, RandomProblemsOnEveryKernel) {
  const TestStream stream;
  KernelTally tally;
  for (std::uint32_t seed = 0; seed < 250; ++seed) {
    const auto [dtype, precision] = kRandomModes[seed % std::size(kRandomModes)];
    RandomForwardProblem p = random_forward_problem(seed, dtype, std::int64_t{1} << 22);
    Operands& o = p.operands;
    const std::vector<std::byte> poisoned = o.y.storage;
    const std::string problem = p.description + (precision == Fp32Precision::tf32 ? " tf32" : "");
    // The forced kernel's error, or nothing where it does not take the problem.
    const auto error_of_kernel = [&](const KernelEntry& kernel) -> std::optional<double> {
      const DeviceOperands d(o);
      Options options;
      options.kernel = kernel.info.name;  // the registry's names live as long as the program
      options.fp32_precision = precision;
      const Problem forward_problem = validate_forward_args(d.x.view(), d.weight.view(), d.bias_view(), d.y.view());
      if (!kernel.why_not(forward_problem, options).empty()) return std::nullopt;
      tally.add(kernel.info.name);
      d.forward(options, stream);
      const cudaError_t status = cudaStreamSynchronize(stream);
      EXPECT_EQ(status, cudaSuccess) << cudaGetErrorString(status) << " " << problem << " kernel " << kernel.info.name;
      const double err = downloaded_error(o, d);
      EXPECT_TRUE(gaps_untouched(o.y)) << problem << " kernel " << kernel.info.name << ": wrote outside y's view";
      std::copy(poisoned.begin(), poisoned.end(), o.y.storage.begin());  // the view points into it
      return err;
    };
    std::optional<double> baseline;
    for (const KernelEntry& kernel : cuda::kernels())
      if (kernel.info.name == kBaseline) baseline = error_of_kernel(kernel);
    // cuBLASLt's bias epilogue rounds a 16-bit result a second time (RandomProblemsMatchTheReference)
    const bool rounded_twice = is_low_precision(dtype) && !o.bias.storage.empty();
    if (baseline) {
      ASSERT_FALSE(std::isnan(*baseline)) << problem << " kernel " << kBaseline << ": NaN left in y";
      EXPECT_LE(*baseline, rounding_tolerance(dtype, precision) * (rounded_twice ? 2 : 1)) << problem;
    }
    const bool rounding = is_low_precision(dtype) || precision == Fp32Precision::tf32;
    const double limit = std::max(rounding_tolerance(dtype, precision), rounding && baseline ? 2 * *baseline : 0.0);
    for (const KernelEntry& kernel : cuda::kernels()) {
      if (kernel.info.name == kBaseline) continue;
      const std::optional<double> err = error_of_kernel(kernel);
      if (!err) continue;
      ASSERT_FALSE(std::isnan(*err)) << problem << " kernel " << kernel.info.name << ": NaN left in y";
      EXPECT_LE(*err, limit) << problem << " kernel " << kernel.info.name;
    }
  }
  std::cout << "kernels:" << tally.str() << "\n";
  for (const char* kernel : {"cuda_latency", "cuda_simt_tiled", "cuda_tensor_core_mma", kBaseline})
    EXPECT_TRUE(tally.reached(kernel)) << kernel << " never ran:" << tally.str();
}

}  // namespace
}  // namespace gather_linear
