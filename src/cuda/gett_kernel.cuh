// The Hopper tensor-core GETT as a CUTLASS 3.x kernel (TMA loads, wgmma, TMA store; sm_90a).
//
// The gathered operand A[b, r*H + h] = x[r, b, h] has the two-level K mode (H, R) : (1, stride_r).
// CuTe takes that nested stride as it is, so the TMA unit reads x's slices in place (a box over h,
// b and, when a K tile spans slices, r) and the mainloop never sees a concatenation. W's K mode is
// the same (H, R) : (1, H) under its row stride. Bias is added in the epilogue. Either operand
// may be the GEMM's A (M mode): x's rows by default, the weight's rows for a few rows of x. With
// the weight's rows as M the reduction may also be split: parts of R's slices as the GEMM's batch
// mode, each writing float32 partial sums, which a second kernel adds into y with the bias.
//
// Included only by the generated translation units (gett_*.cu, compiled for sm_90a alone)
// and by the benchmark's extra configurations.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/kernel_registry.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_info.hpp"
#include "cuda/gett_kernel.hpp"

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace gather_linear::cuda::gett {

enum class Schedule { cooperative, pingpong };

// CUTLASS's element type for each of ours. float32 data runs as TF32, and the operands are declared
// `float`, not `tfloat32_t`: CUTLASS then gives the TMA descriptors the TF32 data type, so the TMA
// unit rounds each value to nearest TF32 as it loads it. Declared tfloat32_t, the raw float32 bits
// reach shared memory and wgmma truncates them, which had 2.5x cuBLAS TF32's error.
template <DType D> struct Elements;
template <> struct Elements<DType::bfloat16> { using Input = cutlass::bfloat16_t; using Output = cutlass::bfloat16_t; };
template <> struct Elements<DType::float16> { using Input = cutlass::half_t; using Output = cutlass::half_t; };
template <> struct Elements<DType::float32> { using Input = float; using Output = float; };

// kEpilogueM x kEpilogueN: the epilogue's sub-tile (each is staged through shared memory and stored
// by TMA); 0 x 0 lets CUTLASS choose (64x32 for ping-pong, 128x32 for cooperative).
// kWeightRowsAsM: the GEMM's M mode is the weight's rows and N x's (y^T = W A^T, y stored
// column-major as y^T), for a few rows of x: 64-row tiles of W then spread the weight over the
// SMs while a narrow N tile (32 or 64) covers all of x's rows.
// kSplitReduction (with kWeightRowsAsM): the GEMM's output is float32 partial sums in the
// workspace, one batch per part of R's slices (gett::reduction_splits), added into y afterwards.
template <DType kDType, int kTileM, int kTileN, int kTileK, int kClusterM, int kClusterN, Schedule kSchedule,
          int kEpilogueM = 0, int kEpilogueN = 0, bool kWeightRowsAsM = false, bool kSplitReduction = false>
struct Gett {
  static_assert(!kSplitReduction || kWeightRowsAsM, "the reduction is split only with the weight's rows as M");
  using Input = typename Elements<kDType>::Input;
  using Output = std::conditional_t<kSplitReduction, float, typename Elements<kDType>::Output>;
  using Accumulator = float;
  static constexpr int kInputAlignment = 16 / sizeof(Input);  // elements per 16-byte TMA granule
  static constexpr int kOutputAlignment = 16 / sizeof(Output);

  // (M, N, (H, R), batch) and the strides that make x's and W's K modes two-level (one type, so
  // that either may be the A operand).
  using ProblemShape = cute::Shape<int, int, cute::Shape<int, int>, int>;
  using StrideA = cute::Stride<std::int64_t, cute::Stride<cute::_1, std::int64_t>, std::int64_t>;
  using StrideB = StrideA;
  using StrideD = std::conditional_t<kWeightRowsAsM, cute::Stride<cute::_1, std::int64_t, std::int64_t>,
                                     cute::Stride<std::int64_t, cute::_1, std::int64_t>>;

  // The block tile: nested K mode for the mainloop (it tiles the (H, R) mode), flat for the
  // epilogue builder.
  using MmaTile = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Shape<cute::Int<kTileK>>>;
  using BlockTile = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Int<kTileK>>;
  using Cluster = cute::Shape<cute::Int<kClusterM>, cute::Int<kClusterN>, cute::_1>;
  using MainloopSchedule = std::conditional_t<kSchedule == Schedule::cooperative,
                                              cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                              cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using EpilogueSchedule = std::conditional_t<kSchedule == Schedule::cooperative,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative,
                                              cutlass::epilogue::TmaWarpSpecialized>;

  using EpilogueSubtile = std::conditional_t<(kEpilogueM > 0),
                                             cute::Shape<cute::Int<kEpilogueM>, cute::Int<kEpilogueN>>,
                                             cutlass::epilogue::collective::EpilogueTileAuto>;

  // D = alpha * acc + bias[n] (no C operand); a null bias reads as zeros. Partial sums have no
  // bias: add_partial_sums adds it once.
  using PartialSumsFusion = cutlass::epilogue::fusion::LinearCombination<Output, Accumulator, Output, Accumulator>;
  using RowBiasFusion = cutlass::epilogue::fusion::LinCombPerRowBias<Output, Accumulator, Output, Output, Accumulator>;
  using ColumnBiasFusion =
      cutlass::epilogue::fusion::LinCombPerColBias<Output, Accumulator, Output, Output, Accumulator>;
  using Fusion = std::conditional_t<kSplitReduction, PartialSumsFusion,
                                    std::conditional_t<kWeightRowsAsM, RowBiasFusion, ColumnBiasFusion>>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, BlockTile, Cluster,
      EpilogueSubtile, Accumulator, Accumulator, void, StrideD, kOutputAlignment,
      Output, StrideD, kOutputAlignment, EpilogueSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Input, StrideA, kInputAlignment, Input, StrideB,
      kInputAlignment, Accumulator, MmaTile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Arguments = typename Kernel::Arguments;

  // The number of parts the reduction is split into (1 without kSplitReduction).
  static int splits_for(const Problem& p, Tuning tuning) {
    if constexpr (!kSplitReduction) return 1;
    return tuning.reduction_splits > 0 ? tuning.reduction_splits : reduction_splits(p, kTileN, kTileK);
  }

  // splits: splits_for's count; partials: where the parts' sums go (kSplitReduction only).
  static Arguments arguments(const Problem& problem, Tuning tuning, int splits, float* partials = nullptr) {
    const Problem p = with_canonical_unit_strides(problem);
    const std::int64_t slices = p.R / splits;  // R's slices in each part (the batch mode)
    const auto hr = cute::make_shape(static_cast<int>(p.H), static_cast<int>(slices));
    const StrideA stride_x{p.x_stride_b, cute::make_stride(cute::_1{}, p.x_stride_r), slices * p.x_stride_r};
    const StrideB stride_w{p.weight_stride_k, cute::make_stride(cute::_1{}, p.H), slices * p.H};
    Arguments args{};
    args.mode = splits > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm;
    if constexpr (kWeightRowsAsM) {
      args.problem_shape = ProblemShape{static_cast<int>(p.K), static_cast<int>(p.B), hr, splits};
      args.mainloop = {static_cast<const Input*>(p.weight), stride_w, static_cast<const Input*>(p.x), stride_x};
      if constexpr (kSplitReduction) {
        const StrideD stride_partials{cute::_1{}, p.K, p.K * p.B};
        args.epilogue = {{}, nullptr, stride_partials, partials, stride_partials};
      } else {
        const StrideD stride_y{cute::_1{}, p.y_stride_b, 0};
        args.epilogue = {{}, nullptr, stride_y, static_cast<Output*>(p.y), stride_y};
      }
    } else {
      const StrideD stride_y{p.y_stride_b, cute::_1{}, 0};
      args.problem_shape = ProblemShape{static_cast<int>(p.B), static_cast<int>(p.K), hr, 1};
      args.mainloop = {static_cast<const Input*>(p.x), stride_x, static_cast<const Input*>(p.weight), stride_w};
      args.epilogue = {{}, nullptr, stride_y, static_cast<Output*>(p.y), stride_y};
    }
    args.epilogue.thread.alpha = 1.f;
    args.epilogue.thread.beta = 0.f;
    if constexpr (!kSplitReduction) args.epilogue.thread.bias_ptr = static_cast<const Output*>(p.bias);
    args.hw_info.device_id = p.device.index;
    args.hw_info.sm_count = multiprocessor_count(p.device.index);
    if constexpr (kClusterM * kClusterN > 1) args.hw_info.max_active_clusters = clusters_at_once(p.device.index);
    args.scheduler.max_swizzle_size = tuning.max_swizzle;
    using CutlassRaster = cutlass::gemm::kernel::detail::RasterOrderOptions;
    args.scheduler.raster_order = tuning.raster == Raster::along_m   ? CutlassRaster::AlongM
                                  : tuning.raster == Raster::along_n ? CutlassRaster::AlongN
                                                                     : CutlassRaster::Heuristic;
    return args;
  }

  // What the dispatcher asks of one problem, in the order it asks: whether the configuration can
  // run it, its workspace, then the kernel's parameters (three TMA descriptors among them). All of
  // it depends only on the problem's pointers, extents and strides (the parameters also on the
  // tile order the call asks for), so it is worked out once per problem and kept for the last few
  // problems on this thread: one forward builds CUTLASS's parameters once, and calls that repeat a
  // problem (a training loop under a caching allocator, a graph captured again) build nothing.
  // A split reduction's workspace holds the partial sums first, then any scratch of CUTLASS's own.
  using Params = typename Kernel::Params;
  using Key = std::array<std::int64_t, 16>;
  struct Plan {
    Key key{};
    std::string why_not;  // empty when the configuration can run the problem
    std::size_t workspace_bytes = 0;  // at reduction_splits' count of parts
    std::size_t cutlass_workspace_bytes = 0;
    bool has_params = false;  // params are set, for params_tuning and params_partials (only without CUTLASS scratch)
    Tuning params_tuning{};
    float* params_partials = nullptr;
    Params params{};
  };

  // The workspace's partial sums for `splits` parts, rounded to the scratch alignment.
  static std::size_t partials_region_bytes(const Problem& p, int splits) {
    if constexpr (!kSplitReduction) return 0;
    return (partial_sums_bytes(p, splits) + 255) / 256 * 256;
  }

  static Key key_of(const Problem& p) {
    const auto address = [](const void* ptr) { return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(ptr)); };
    return {p.R, p.B, p.H, p.K, p.x_stride_r, p.x_stride_b, p.x_stride_h, p.weight_stride_k, p.y_stride_b,
            address(p.x), address(p.weight), address(p.bias), address(p.y), static_cast<std::int64_t>(p.dtype), p.device.index,
            multiprocessor_count(p.device.index)};
  }

  static Plan& plan_for(const Problem& p) {
    constexpr int kPlans = 4;
    thread_local std::array<Plan, kPlans> recent{};
    thread_local int filled = 0, next = 0;
    const Key key = key_of(p);
    for (int i = 0; i < filled; ++i)
      if (recent[i].key == key) return recent[i];
    Plan& plan = recent[next];
    next = (next + 1) % kPlans;
    filled = std::min(filled + 1, kPlans);
    plan.key = key;
    plan.workspace_bytes = plan.cutlass_workspace_bytes = 0;
    plan.has_params = false;
    plan.why_not = p.dtype != kDType ? "compiled for " + std::string(dtype_name(kDType)) + " inputs"
                                     : shape_why_not(p, kTileK, sizeof(Input));
    if (!plan.why_not.empty()) return plan;
    if (clusters_at_once(p.device.index) < 1) {
      plan.why_not = "its clusters of " + std::to_string(kClusterM * kClusterN) + " blocks do not fit this device";
      return plan;
    }
    const int splits = splits_for(p, {});
    const Arguments args = arguments(p, {}, splits);
    if (!Kernel::can_implement(args)) {
      plan.why_not = "CUTLASS cannot implement this problem (alignment of x, weight or y)";
      return plan;
    }
    plan.cutlass_workspace_bytes = Kernel::get_workspace_size(args);
    plan.workspace_bytes = partials_region_bytes(p, splits) + plan.cutlass_workspace_bytes;
    return plan;
  }

  static std::string why_not(const Problem& p) { return plan_for(p).why_not; }

  static std::size_t workspace_bytes(const Problem& p) { return plan_for(p).workspace_bytes; }

  static void run(const Problem& p, Workspace workspace, CudaStream stream, Tuning tuning) {
    const int splits = splits_for(p, tuning);
    const Params& params = params_for(p, workspace, stream, tuning, splits);
    auto* kernel = &cutlass::device_kernel<Kernel>;
    allow_shared_memory(reinterpret_cast<const void*>(kernel), p.device.index);

    cudaLaunchAttribute cluster = cluster_dimension();
    cudaLaunchConfig_t config = launch_config(Kernel::get_grid_shape(params), cluster);
    config.stream = stream;
    check(cudaLaunchKernelEx(&config, kernel, params), "gett kernel launch");
    if constexpr (kSplitReduction)
      add_partial_sums(p, static_cast<const float*>(workspace.data), splits, stream);
  }

  static const Params& params_for(const Problem& p, Workspace workspace, CudaStream stream, Tuning tuning,
                                  int splits) {
    Plan& plan = plan_for(p);
    if (!plan.why_not.empty()) throw Error(ErrorCode::unsupported, "x", plan.why_not);
    float* partials = nullptr;
    std::size_t partials_bytes = 0;
    if constexpr (kSplitReduction) {
      if (!can_split_reduction(p, splits, kTileK))
        throw Error(ErrorCode::invalid_argument, "tuning.reduction_splits",
                    "cannot split this reduction into " + std::to_string(splits) +
                        " parts (each must hold whole K tiles of R's slices)");
      partials_bytes = partials_region_bytes(p, splits);
      const std::size_t need = partials_bytes + plan.cutlass_workspace_bytes;
      if (workspace.data == nullptr || workspace.bytes < need)
        throw Error(ErrorCode::invalid_argument, "workspace",
                    "needs " + std::to_string(need) + " bytes for the partial sums, got " +
                        std::to_string(workspace.bytes));
      partials = static_cast<float*>(workspace.data);
    }
    if (plan.cutlass_workspace_bytes == 0) {
      const bool same = plan.params_tuning.max_swizzle == tuning.max_swizzle &&
                        plan.params_tuning.raster == tuning.raster &&
                        plan.params_tuning.reduction_splits == tuning.reduction_splits &&
                        plan.params_partials == partials;
      if (!plan.has_params || !same) {
        plan.params = Kernel::to_underlying_arguments(arguments(p, tuning, splits, partials), nullptr);
        plan.params_tuning = tuning;
        plan.params_partials = partials;
        plan.has_params = true;
      }
      return plan.params;
    }
    // Scratch the kernel writes: its parameters point into this call's workspace.
    const Arguments args = arguments(p, tuning, splits, partials);
    void* scratch = static_cast<char*>(workspace.data) + partials_bytes;
    thread_local Params with_workspace{};
    with_workspace = Kernel::to_underlying_arguments(args, scratch);
    if (Kernel::initialize_workspace(args, scratch, stream) != cutlass::Status::kSuccess)
      throw Error(ErrorCode::cuda_error, "workspace", "CUTLASS could not initialise its workspace");
    return with_workspace;
  }

  static cudaLaunchAttribute cluster_dimension() {
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim = {kClusterM, kClusterN, 1};
    return cluster;
  }

  static cudaLaunchConfig_t launch_config(dim3 grid, cudaLaunchAttribute& cluster) {
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = Kernel::get_block_shape();
    config.dynamicSmemBytes = Kernel::SharedStorageSize;
    config.attrs = &cluster;
    config.numAttrs = 1;
    return config;
  }

  // Clusters of this configuration the device runs at once (cudaOccupancyMaxActiveClusters),
  // queried once per device. The persistent scheduler launches that many: left to itself it would
  // assume GH100's 18 SMs per GPC and launch 29 clusters of four on 132 SMs, however many fit.
  static int clusters_at_once(int device) {
    static CountPerDevice counts;
    return counts.get(device, [device] {
      const ScopedDevice on_device(device);
      auto* kernel = reinterpret_cast<const void*>(&cutlass::device_kernel<Kernel>);
      allow_shared_memory(kernel, device);
      cudaLaunchAttribute cluster = cluster_dimension();
      const cudaLaunchConfig_t config = launch_config(dim3(kClusterM, kClusterN, 1), cluster);
      int clusters = 0;
      check(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config),
            "cudaOccupancyMaxActiveClusters(gett kernel)");
      return clusters;
    });
  }

  // Blocks need more than the default 48 KB of shared memory; the limit is raised once per device.
  static void allow_shared_memory(const void* kernel, int device) {
    static std::array<std::atomic<bool>, kMaxDevices> raised{};
    std::atomic<bool>& done = raised[static_cast<std::size_t>(device)];
    if (done.load(std::memory_order_acquire)) return;
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::SharedStorageSize),
          "cudaFuncSetAttribute(gett kernel)");
    done.store(true, std::memory_order_release);
  }

  static Variant variant(const char* name) {
    return {name,           kDType,          kTileM,          kTileN, kTileK, kClusterM * kClusterN,
            kWeightRowsAsM, kSplitReduction, clusters_at_once, why_not, workspace_bytes, run};
  }
};

}  // namespace gather_linear::cuda::gett
