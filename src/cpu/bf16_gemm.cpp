// Fused CPU forward for bfloat16 on the instructions that multiply pairs of bfloat16 into float32
// sums: y = A * W^T + bias with A[b, r*H + h] = x[r, b, h], float32 accumulation, y rounded to
// bfloat16 once. Two kernels share the weight's packing, the blocking and the epilogue:
// - cpu_amx_bf16, on AMX (Intel's tile matrix unit). One tile multiply (TDPBF16PS) adds a 16 x 32
//   bfloat16 tile of A times a 32 x 16 tile of W^T into a 16 x 16 float32 tile: 8192
//   multiply-adds, where an AVX-512 FMA does 16. The micro-kernel keeps a 32 x 32 block of y in
//   four accumulator tiles and streams two A tiles and two W tiles per 32-deep step, which uses
//   all eight tile registers.
//   float16 takes the same path as three bfloat16 products a term (run_amx_split): each value
//   splits exactly into two bfloat16 parts, and the products of the parts but the two low ones
//   are exact in float32.
// - cpu_bf16_dot, on AVX512-BF16 where there is no AMX (AMD's Zen 4, for one). VDPBF16PS adds, in
//   each of 16 float32 lanes, the products of one pair of bfloat16: 32 multiply-adds an
//   instruction, twice an FMA's. The micro-kernel is the float32 engine's (gather_gemm.cpp) with
//   pairs for scalars: 12 rows x 32 outputs of y in 24 registers, a pair of A's row broadcast
//   against 16 pairs of the weight.
//
// Layouts (the blocking is the float32 engine's):
// - W is packed per call, in blocks of about 4 MB, into panels of 16 outputs in the pair-
//   interleaved form both instructions read: packed[panel][c / 2][j][c % 2] = W[panel*16 + j, c].
// - A row block of A is gathered straight from x per slice of the reduction: the gather is the
//   packing, as in the float32 engine. For AMX into a row-major buffer (a cache line of padding
//   per row); for the dot products into panels of 12 rows, pair-major: a[c / 2][i] holds the pair
//   (A[i, c], A[i, c + 1]) in one 32-bit word.
// Rows, outputs and the reduction are padded with zeros: to multiples of 32 for AMX; to 12 rows,
// 32 outputs and pairs for the dot products.
//
// Batches where packing the weight costs more than its reuse by B rows saves read it in place
// instead: on AMX up to 64 rows, and up to 256 or 512 against weights of 8 or 32 MB (amx_direct:
// y^T = W * A^T, the weight's rows as the tile multiply's first operand), on AVX512-BF16 up to 8
// or 16 rows (dot_direct: VDPBF16PS along the reduction). A's rows are gathered once.
//
// Both instructions treat subnormal inputs, and products below float32's normal range, as zeros
// (the SIMD engine keeps them); the bias is added, and y rounded, outside them.
//
// Linux hands out AMX state only on request (arch_prctl ARCH_REQ_XCOMP_PERM); without it, or
// without the instructions, the AMX kernel reports itself unsupported and is never chosen.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/numeric.hpp"
#include "cpu/block_tasks.hpp"
#include "cpu/cpu_kernels.hpp"
#include "cpu/scratch.hpp"
#include "cpu/avx512_helpers.hpp"
#include "gather_linear/error.hpp"

namespace gather_linear::cpu {
namespace {

constexpr int kPanel = 16;  // outputs of a packed weight panel (a tile's columns, a vector's lanes)
constexpr std::int64_t kGroupOutputs = 1024;  // outputs of y per task, at most: its float32 block stays in L2

// AMX: tiles of 16 rows, 32-deep tile multiplies, a 32 x 32 block of y per micro-kernel call.
constexpr int kTile = 16;   // rows of a tile, and float32 columns of an accumulator tile
constexpr int kStep = 32;   // bfloat16 reduction depth of one tile multiply
constexpr int kBlock = 32;  // rows and outputs of the micro-kernel's block of y
// Reduction slice gathered at a time: a row block's slice (532 KB) stays in L2. Each slice
// beyond the first loads and stores y's float32 block again, which a micro-kernel call waits
// for. With the next panels fetched ahead (amx_compute_block), against the path before both, at
// R*H = 1536 to 8192 on the 2-core AMX VM: slices of 2048 0.83-0.90x the time, of 1024 0.91-0.94x,
// of 4096 0.84-0.98x. 1024 had beaten 256 and 512 by 5-10% on (8, 1024, 128, 1024), (26, 512,
// 64, 1024) and (4, 4096, 256, 1024).
constexpr int kSlice = 2048;
constexpr int kRowBlock = 128;  // rows of y per task
// A task's packed panels beyond this many bytes are fetched ahead (amx_compute_block): half a 2 MB L2.
constexpr std::int64_t kPanelsInL2Bytes = std::int64_t{1} << 20;
constexpr int kCopyCallMinElements = 16;  // gather_rows: shorter runs of x are copied element by element

// Batches take AMX's direct path (amx_direct: the weight read in place) up to a number of rows
// that grows with the weight: the packed path's cost is packing it, which its reuse by the rows
// repays only at larger batches the larger it is. Against the packed path, the weight rotated past
// the caches, the direct path took 0.40-0.79 of the time at B = 48 to 128 and 0.61-0.96 at 192 to
// 512 with a 32 MB weight (0.46-0.71 at 64 to 256 with 64 MB); 0.53-0.87 at 48 to 128 and
// 0.87-1.03 at 192 to 256 with 8 MB; 0.70-0.94 at 48 to 64 with 2 MB, but 0.85-1.09 at 96 to 128
// and 1.02-1.26 at 192 to 256; 0.63-1.06 at 48 to 64 with 512 KB (eager PyTorch's time the
// yardstick in each run, two to six runs a point; the GPU host's 16-core Xeon, docs/performance/cpu.md,
// "Longer batches on AMX's direct path").
struct DirectRowsForWeight {
  std::int64_t weight_bytes, rows;
};
constexpr DirectRowsForWeight kAmxDirectRows[] = {{0, 64}, {std::int64_t{8} << 20, 256}, {std::int64_t{32} << 20, 512}};
// Those tiers were measured on 16 threads. With fewer, each thread's share of the packed path's
// rows is larger, and since the packed path fetches its next panels ahead it wins there sooner:
// packed time over direct, bfloat16 against 8 to 64 MB of weight (docs/performance/cpu.md, "The
// AMX packed path's weight fetched ahead, and float16 split once"), on the 2-core AMX VM 0.71-0.92
// at 256 to 512 rows on 2 threads and 0.75 at 256 on one, 0.93-1.07 at 160 to 192, 0.88-1.40 at
// 96 to 128 (direct slower only with 8 MB); on an H100 host's Xeon on 8 threads 0.86-0.99 at 256
// to 512 rows with 8 and 32 MB (1.01-1.26 with 64 MB), 0.94-1.59 at 96 to 192, and on 16 threads
// 1.07-1.79 at every point up to the tiers. So the tiers hold up to kAmxDirectRowsPerThread rows
// a thread, and never below kAmxDirectRowsAnyThreads.
constexpr std::int64_t kAmxDirectRowsPerThread = 32;
constexpr std::int64_t kAmxDirectRowsAnyThreads = 128;
// Weight rows this many bytes apart, or a multiple of it, are read from a copy by AMX's direct
// path where it can (amx_direct).
constexpr std::int64_t kAliasedRowBytes = 2048;

// AVX512-BF16 dot products: 12 rows x 32 outputs a micro-kernel call (24 accumulators, two
// weight vectors and a broadcast pair of the 32 vector registers).
constexpr int kDotRows = 12;
constexpr int kDotOutputs = 2 * kPanel;
// Pairs of the reduction gathered at a time: the weight's slice of 32 outputs (16 KB) and a
// 12-row panel of A (6 KB) stay in a 32 KB L1 data cache.
constexpr int kDotSlicePairs = 128;
constexpr int kDotRowBlock = 8 * kDotRows;  // rows of y per task: its gathered slice (48 KB) stays in L2
// Batches this short take the dot kernel's direct path (dot_direct): up to 16 rows (with A's
// gathered rows within kDirectRowsBytes). Against the packed path it took 0.16-0.63 of the time
// at B = 1 to 4, 0.46-0.69 at B = 8 to 16 with weights of 2 to 32 MB, and 0.81-1.43 at B = 24
// (2-core Zen 4, docs/performance/cpu.md, "Short batches"). With threads from 256 KB of weight it also
// won at B = 5 to 16 on 128-512 KB weights, and at B = 5 to 8 on 14-64 KB; not at B = 12 to 16 on
// 64 KB (docs/performance/cpu.md, "The dot kernel's direct path from 128 KB"). Since its tiles sum and
// store 16 outputs at once, it wins there too, 0.66-0.84x the packed path's time at B = 12 and 16
// on 14-64 KB; and since its reduction's tail is one vector step, with odd slice widths as well:
// 0.49-0.55x the time of the float32 engine, which had taken those at B = 9 to 16 on weights
// under 128 KB (docs/performance/cpu.md, "The bfloat16 dot kernel's tail as masked loads").
constexpr std::int64_t kDotDirectRows = 16;
// Where AMX is there too, up to this many rows still stream the weight faster here than on AMX's
// direct path: the dot kernel took 0.34-0.68x AMX's time at B = 1 (14 KB to 64 MB of weight),
// 0.50x at B = 2 and 0.80-0.88x at B = 4, but 1.21x at B = 8 (the GPU host's Xeon, 16 threads,
// timed call by call in one process: docs/performance/cpu.md, "bfloat16 on an Intel processor without
// AMX"). It had been measured against eager PyTorch's time before, a single row only from 1 MB.
constexpr std::int64_t kDotBeatsAmxRows = 4;
// But not with a reduction this short: there each of the dot kernel's outputs is mostly its lane
// sum, and the float32 engine took 0.25-1.01x its time at B = 1 to 4 and R*H = 2 to 256 (K = 256
// and 4096) on an H100 host's Xeon (16 and 8 threads) and 0.25-0.96x on the 2-core AMX VM (one
// cell 1.14x), where AMX took 1.0-2.5x the dot kernel's but 0.6-0.8x at B = 4 with R*H = 128 to
// 256. From R*H = 512 the engine took 0.97-1.43x the dot kernel's time at B = 1, 0.96-1.17x at
// B = 2 and 0.82-1.02x at B = 4 (docs/performance/cpu.md, "Short bfloat16 reductions of up to 4
// rows").
constexpr std::int64_t kEngineBeatsDotReduction = 256;
// Without AMX (engine_beats_dot) the same holds for single rows, and any batch's reductions up to
// this short go to the engine too. On the 2-core Zen 4 VM, forced kernels alternating in one
// process (docs/performance/cpu.md, "Short bfloat16 reductions on the Zen 4, few outputs, and odd
// slice widths on the dot kernel"), the engine took, at K = 256 to 4096: on single rows 0.11-0.80x
// the dot kernel's time at R*H = 4 to 128, 0.66-1.05x at 256, 1.38-1.54x from 512; on 2 to 16
// rows (the dot kernel's direct path) 0.26-1.00x at R*H = 4 and 16, 0.42-1.62x at 24 to 48; on 64
// to 2048 rows (its packed path) 0.32-1.17x at R*H = 2 to 16, 0.40-1.26x at 20 and 24, and at 32
// and more mostly above 1.
constexpr std::int64_t kEngineBeatsDotAnyRowsReduction = 16;
// The packed path's 32-output tiles are mostly padding for this few outputs, where the engine takes
// rows in blocks (as against AMX, kEngineBeatsAmxOutputs): at B = 64 and 2048 with R*H = 21 to 512
// (the same method and section) it took 0.13-0.80x the dot kernel's time at K = 1 to 8 (one cell
// 1.20x), 0.47-1.21x at 12 and 16, and from 24 mostly more. The direct path, which sums 16
// outputs at once, keeps them: the engine took 0.67-1.56x its time at K = 1 to 16 (B = 2 to 16).
constexpr std::int64_t kEngineBeatsDotPackedOutputs = 16;
// An odd H costs the packed path a copy of A's rows (gather_pair_panels), which few outputs do not
// repay on a short reduction: engine time over the dot kernel's, R*H = 17 to 99 (R = 1 to 63),
// B = 256 and 2048, two runs (the same section): at K = 24 0.46-0.87x up to R*H = 45 and
// 0.51-1.09x at 49 to 63, at K = 64 0.49-1.25x up to 63 (above 1 only with slices of 21 and 49);
// from K = 256 mostly above 1.
constexpr std::int64_t kEngineBeatsDotOddSliceReduction = 64;
constexpr std::int64_t kEngineBeatsDotOddSliceOutputs = 64;
// Reductions this short cost AMX about as much as one of 32 (a tile multiply's depth, zero-
// padded), and its time goes to the float32 block it stores and rounds: the float32 engine on
// bfloat16 widened took 0.34-0.94x AMX's time at R*H = 1 to 12 and 0.71-1.21x (median 0.90) at
// 16, with B = 64 to 4096 and K = 256 to 4096; medians 0.93 at 20, 1.04 at 24 and 1.17 at 32
// (the 2-core AMX VM, forced kernels alternating in one process: docs/performance/cpu.md, "Short
// reductions on AMX").
constexpr std::int64_t kEngineBeatsAmxReduction = 16;
// So do this few outputs a row, which leave AMX's 16-wide tiles mostly padding while the engine
// takes them in row blocks (Tiling's row_block_max_outputs). AMX time over the engine's, B = 64 to 2048,
// R*H = 64 to 1024 (the same method: docs/performance/cpu.md, "Few outputs on AMX"): on the VM
// 1.03-2.6x at K = 2 to 6 (but 0.77-0.83x at (8, 1024, 128, 5 and 6)), 0.69-1.34x at 7 and 8;
// on the GPU host's 16-core Xeon 0.99-4.2x at 6 to 8 (15 pairs each); from 10 or 12, 0.22-0.86x on both.
constexpr std::int64_t kEngineBeatsAmxOutputs = 8;
// And short reductions with few outputs, where AMX's padded tiles weigh most: engine time over
// AMX's on the VM, B = 512 and 2048 (docs/performance/cpu.md, "Short bfloat16 reductions with few
// outputs"): 0.45-0.75x at R*H = 17 to 32 with K = 9 to 32, 0.59-0.89x at R*H = 17 to 24 with
// K = 48 and 64; 0.78-1.08x at R*H = 48 with K <= 32, 0.87-1.00x at 32 with K = 48 and 64, and
// from K = 96 up 0.94-1.12x at R*H = 24 (the forty-third session's medians at K = 256 to 4096:
// 0.93 at 20, 1.04 at 24, 1.17 at 32).
struct ReductionAndOutputs {
  std::int64_t reduction, outputs;
};
constexpr ReductionAndOutputs kEngineBeatsAmxShort[] = {{32, 32}, {24, 64}};
// float16 on AMX as three bfloat16 products (run_amx_split) against the float32 engine, forced
// kernels alternating in one process (docs/performance/cpu.md, "float16 on AMX as bfloat16
// parts", and for the bound now "The AMX packed path's weight fetched ahead, and float16 split
// once"). Since the packed path fetches its next panels ahead and splits each value once: on the
// 2-core AMX VM 0.68-0.91x the engine's time from 80 rows a thread (B = 160 to 256, R*H = 512 to
// 1664, K = 512 to 4096), 0.91-1.24x at 64, 1.01-1.13x at 48; on an H100 host's 16-core Xeon
// 0.65-0.99x from 128 rows a thread (2048 and 4096 rows), 0.76-1.15x at 96, 0.96-1.43x at 64 and
// 80. So from 128 rows a thread (it had been 256, measured before those changes). At R*H = 24
// and 32, 0.85-1.13x from B = 512 (the VM, before them). Not measured with x's slices or the
// weight's rows along a stride (the backward's views), which it splits one element at a time.
// Those had 512 to 4096 outputs. With few, splitting x costs more than the products save: on the
// VM 1.8-17x the engine's time at K = 1 to 55 (random problems), 1.06-9.0x at K = 1 to 64, 0.79-1.08x
// at 128 and 0.70-0.91x at 192; on the Xeon, at 4096 and 8192 rows, 1.06-1.68x at 16 and 64,
// 0.76-1.07x at 128, 0.68-0.95x at 256 (docs/performance/cpu.md, "Few outputs on AMX").
// And x is split a slice at a time: short slices cost it more than K outputs repay, so H * K must
// reach kSplitMinSliceTimesOutputs. Engine time over the split's at B = 1024 and R*H = 256 or
// 1024 on the VM, two runs (docs/performance/cpu.md, "float16's split with short slices"):
// 0.24-0.85x where H * K < 4096 (H = 2 to 32, K = 128 to 1024), 0.97-1.12x at 4096, 1.09-1.49x
// above.
constexpr std::int64_t kSplitMinRowsPerThread = 128;
constexpr std::int64_t kSplitMinReduction = 48;
constexpr std::int64_t kSplitMinOutputs = 128;
constexpr std::int64_t kSplitMinSliceTimesOutputs = 4096;
// Where the dot kernel issues slower than the float32 FMA (bf16_dot_packed_beats_engine), its
// packed path still beats the engine on fewer rows than this, or this little work.
constexpr std::int64_t kDotPackedBeatsEngineRows = 32;
constexpr double kDotPackedBeatsEngineFlops = 4e6;

std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

// GCC 11 brought the AMX intrinsics (inline assembly: binutils 2.36 or later assembles it), and
// has AVX512-BF16's.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define GATHER_LINEAR_HAS_BF16_KERNELS 1

bool amx_usable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u;
  // AVX-512 packs the weight (and splits float16, with AVX512BW's masked 16-bit loads and
  // AVX512-BF16's conversions)
  if (!amx_bf16 || !amx_tile || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512bf16"))
    return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16")

// Every tile 16 rows of 64 bytes: accumulators 0-3, A tiles 4-5, W tiles 6-7.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {kTile, kTile, kTile, kTile, kTile, kTile, kTile, kTile};
};
// In static storage: GCC's _tile_loadconfig tells the compiler it reads only 8 bytes, so the
// stores of a local configuration could be dropped.
constexpr TileConfig kTileConfig{};

void configure_tiles() { _tile_loadconfig(&kTileConfig); }

// What a micro-kernel call fetches into L2 for the calls after it: `lines` 64-byte lines a step
// from `at` and from `at + second` (two panels' shares), none where `lines` is 0.
struct PanelsAhead {
  const char* at = nullptr;
  std::int64_t second = 0;
  int lines = 0;
};

// c (32 x 32 float32, row stride ldc elements) = (accumulate ? c : 0) + a (32 x depth bfloat16,
// row stride lda) * the two 16-output panels w0, w1 (pair-interleaved, from the slice's first
// pair row on).
void amx_micro_kernel(int depth, const BFloat16* a, std::int64_t lda, const BFloat16* w0, const BFloat16* w1, float* c,
                      std::int64_t ldc, bool accumulate, PanelsAhead ahead = {}) {
  const std::int64_t a_stride = lda * 2, c_stride = ldc * 4;
  // The tile instructions are asm statements the compiler does not know touch memory: fence
  // ordinary stores to a and c before them, and loads of c after.
  asm volatile("" ::: "memory");
  if (accumulate) {
    _tile_loadd(0, c, c_stride);
    _tile_loadd(1, c + kTile, c_stride);
    _tile_loadd(2, c + kTile * ldc, c_stride);
    _tile_loadd(3, c + kTile * ldc + kTile, c_stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  // Each operand is loaded just before its first multiply, so that the loads of a step overlap
  // the multiplies of the one before.
  for (int step = 0; step < depth; step += kStep) {
    for (int l = 0; l < ahead.lines; ++l, ahead.at += 64) {
      _mm_prefetch(ahead.at, _MM_HINT_T1);
      _mm_prefetch(ahead.at + ahead.second, _MM_HINT_T1);
    }
    _tile_loadd(4, a + step, a_stride);
    _tile_loadd(6, w0 + step * kTile, 64);  // 16 pair rows of 16 outputs
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, w1 + step * kTile, 64);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a + kTile * lda + step, a_stride);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, c_stride);
  _tile_stored(1, c + kTile, c_stride);
  _tile_stored(2, c + kTile * ldc, c_stride);
  _tile_stored(3, c + kTile * ldc + kTile, c_stride);
  asm volatile("" ::: "memory");
}

void release_tiles() { _tile_release(); }

// AMX's direct path (amx_direct): the weight's rows are the multiply's first operand, read in
// place, and A's rows, packed as a weight panel is, the second. One 32-deep step of a 32-output
// block: c tiles 0-1 (outputs 0-15 against A's rows 0-15 and 16-31), 2-3 (outputs 16-31) +=
// tile w0 (16 weight rows from w0, row stride s0 bytes) and w1 (if `two`) times A's Panels
// panels (16 pair rows of 16 rows of A each).
// Where given, `keep` (row stride keep_stride bytes) receives the step's weight tiles, the second
// 16 rows below the first.
template <int Panels>
void amx_direct_step(const BFloat16* w0, std::int64_t s0, const BFloat16* w1, std::int64_t s1, bool two,
                     const BFloat16* a0, const BFloat16* a1, BFloat16* keep = nullptr, std::int64_t keep_stride = 0) {
  _tile_loadd(6, a0, 64);
  if constexpr (Panels == 2) _tile_loadd(7, a1, 64);
  _tile_loadd(4, w0, s0);
  _tile_dpbf16ps(0, 4, 6);
  if constexpr (Panels == 2) _tile_dpbf16ps(1, 4, 7);
  if (keep) _tile_stored(4, keep, keep_stride);
  if (two) {
    _tile_loadd(5, w1, s1);
    _tile_dpbf16ps(2, 5, 6);
    if constexpr (Panels == 2) _tile_dpbf16ps(3, 5, 7);
    if (keep) _tile_stored(5, keep + kTile * (keep_stride / std::int64_t{sizeof(BFloat16)}), keep_stride);
  }
}

// Where one 16-output half of amx_direct's block reads the weight: `src` for the steps in
// [0, main_depth), `tail` for the last, partial one (row strides in bytes).
struct WeightTile {
  const BFloat16* src;
  std::int64_t stride;
  const BFloat16* tail;
  std::int64_t tail_stride;
};

// c (32 outputs x 32 rows of A, float32, row stride 32) = w[0] and w[1] (if `two`) times A's
// panels over the reduction [0, depth): whole steps up to main_depth, then one step from the
// tails where depth is longer.
// Where given, `keep` receives the block's weight tiles as they are read (amx_direct_step).
template <int Panels>
void amx_direct_block(const WeightTile (&w)[2], bool two, std::int64_t main_depth, std::int64_t depth,
                      const BFloat16* a_panels, std::int64_t panel_elements, float* c, BFloat16* keep = nullptr,
                      std::int64_t keep_stride = 0) {
  const BFloat16* a1 = a_panels + panel_elements;
  asm volatile("" ::: "memory");  // see amx_micro_kernel
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (std::int64_t step = 0; step < main_depth; step += kStep) {
    for (int t = 0; t < (two ? 2 : 1); ++t)
      for (int i = 0; i < kTile; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(w[t].src + step + 8 * kStep) + i * w[t].stride, _MM_HINT_T0);
    amx_direct_step<Panels>(w[0].src + step, w[0].stride, w[1].src + step, w[1].stride, two,
                            a_panels + step * kTile, a1 + step * kTile, keep ? keep + step : nullptr, keep_stride);
  }
  if (main_depth < depth)
    amx_direct_step<Panels>(w[0].tail, w[0].tail_stride, w[1].tail, w[1].tail_stride, two,
                            a_panels + main_depth * kTile, a1 + main_depth * kTile,
                            keep ? keep + main_depth : nullptr, keep_stride);
  constexpr std::int64_t kStride = kBlock * sizeof(float);
  _tile_stored(0, c, kStride);
  if constexpr (Panels == 2) _tile_stored(1, c + kTile, kStride);
  if (two) {
    _tile_stored(2, c + kTile * kBlock, kStride);
    if constexpr (Panels == 2) _tile_stored(3, c + kTile * kBlock + kTile, kStride);
  }
  asm volatile("" ::: "memory");
}

#pragma GCC pop_options

#pragma GCC push_options
// AVX512BW for the direct tiles' masked 16-bit loads: every processor with AVX512-BF16 has it, and
// bf16_dot_supported() checks it.
#pragma GCC target("avx512f,avx512bw,avx512bf16")
// acc (12 rows x 32 outputs) = a (pairs x 12 words: pair q of row i at a[q * 12 + i]) * the two
// 16-output panels w0, w1 (pairs x 16 words).
[[gnu::always_inline]] inline void dot_micro_tile(int pairs, const std::uint32_t* __restrict a,
                                                  const std::uint32_t* __restrict w0,
                                                  const std::uint32_t* __restrict w1, __m512 (&acc)[kDotRows][2]) {
#pragma GCC unroll 12
  for (int i = 0; i < kDotRows; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int q = 0; q < pairs; ++q) {
    const auto b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w0 + q * kPanel));
    const auto b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w1 + q * kPanel));
#pragma GCC unroll 12
    for (int i = 0; i < kDotRows; ++i) {
      const auto pair = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[q * kDotRows + i])));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], pair, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], pair, b1);
    }
  }
}

// c (12 x 32 float32, row stride ldc) = (accumulate ? c : 0) + the tile of a * w0, w1.
void dot_micro_kernel(int pairs, const std::uint32_t* __restrict a, const std::uint32_t* __restrict w0,
                      const std::uint32_t* __restrict w1, float* __restrict c, std::int64_t ldc, bool accumulate) {
  __m512 acc[kDotRows][2];
  dot_micro_tile(pairs, a, w0, w1, acc);
#pragma GCC unroll 12
  for (int i = 0; i < kDotRows; ++i)
    for (int v = 0; v < 2; ++v) {
      float* out = c + i * ldc + v * kPanel;
      _mm512_storeu_ps(out, accumulate ? _mm512_add_ps(acc[i][v], _mm512_loadu_ps(out)) : acc[i][v]);
    }
}

// A whole tile of a reduction of one slice straight to y (12 x 32 bfloat16, row stride ldy): the
// tile of a * w0, w1 plus `bias` (where given), rounded once, the bits store_rows gives from c.
void dot_micro_kernel_to_y(int pairs, const std::uint32_t* __restrict a, const std::uint32_t* __restrict w0,
                           const std::uint32_t* __restrict w1, BFloat16* __restrict y, std::int64_t ldy,
                           const BFloat16* bias) {
  __m512 acc[kDotRows][2];
  dot_micro_tile(pairs, a, w0, w1, acc);
  __m512 offset[2] = {};
  if (bias != nullptr)
    for (int v = 0; v < 2; ++v) offset[v] = load16_as_float(bias + v * kPanel);
#pragma GCC unroll 12
  for (int i = 0; i < kDotRows; ++i)
    for (int v = 0; v < 2; ++v) {
      // No bias, no addition: -0 + 0 would be +0.
      const __m512 sum = bias != nullptr ? _mm512_add_ps(acc[i][v], offset[v]) : acc[i][v];
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i * ldy + v * kPanel), round16_from_float<BFloat16>(sum));
    }
}

#pragma GCC diagnostic push
// GCC 12's _mm512_reduce_add_ps starts from _mm512_undefined
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 32 bfloat16 (16 pairs), unaligned.
inline __m512bh load_pairs(const BFloat16* src) { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(src)); }

// y[b0 .. b0+BT, k0 .. k0+kt) from BT gathered rows of A (bfloat16, row stride lda) and kt <= 4
// weight rows along a unit stride, each read once in place: vectors of 16 pairs along the
// reduction, VDPBF16PS into 16 float32 partial sums an output (four such vectors along each weight
// row for a single row of A on a short reduction), added up at the end. The reduction's last
// partial vector is one more step, from masked loads (masked-off lanes are zeros and are not
// read): summed one element at a time per output, it had made odd slice widths take 2.3-7.7x the
// time (docs/performance/cpu.md, "The bfloat16 dot kernel's tail as masked loads").
template <int BT>
void dot_direct_tile(const Problem& p, const BFloat16* rows, std::int64_t lda, std::int64_t b0, std::int64_t k0,
                     int kt) {
  constexpr int KT = 4;
  const BFloat16* w[KT];
  direct_tile_weight_rows(p, k0, kt, w);
  const BFloat16* a[BT];
  for (int i = 0; i < BT; ++i) a[i] = rows + (b0 + i) * lda;
  __m512 acc[BT][KT];
  for (int i = 0; i < BT; ++i)
    for (int j = 0; j < KT; ++j) acc[i][j] = _mm512_setzero_ps();
  constexpr int V = 2 * kPanel;  // bfloat16 a vector
  const std::int64_t vectors_end = p.RH / V * V;
  const int tail = static_cast<int>(p.RH - vectors_end);
  const auto tail_mask = static_cast<__mmask32>((std::uint64_t{1} << tail) - 1);
  const auto load_tail = [&](const BFloat16* src) {
    return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(tail_mask, src + vectors_end));
  };
  if (BT == 1 && p.RH <= kSingleRowStreamMaxReduction) {
    // A single row of A: the weight's rows one after another, four partial sums along each
    // (kSingleRowStreamMaxReduction says when one stream beats four).
    for (int j = 0; j < kt; ++j) {
      __m512 part[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      std::int64_t c = 0;
      for (; c + 4 * V <= p.RH; c += 4 * V)
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u)
          part[u] = _mm512_dpbf16_ps(part[u], load_pairs(a[0] + c + u * V), load_pairs(w[j] + c + u * V));
      for (; c < vectors_end; c += V) part[0] = _mm512_dpbf16_ps(part[0], load_pairs(a[0] + c), load_pairs(w[j] + c));
      if (tail > 0) part[1] = _mm512_dpbf16_ps(part[1], load_tail(a[0]), load_tail(w[j]));
      acc[0][j] = _mm512_add_ps(_mm512_add_ps(part[0], part[1]), _mm512_add_ps(part[2], part[3]));
    }
  } else {
    for (std::int64_t c = 0; c < vectors_end; c += V) {
      __m512bh wv[KT];
#pragma GCC unroll 4
      for (int j = 0; j < KT; ++j) wv[j] = load_pairs(w[j] + c);
#pragma GCC unroll 4
      for (int i = 0; i < BT; ++i) {
        const auto av = load_pairs(a[i] + c);
#pragma GCC unroll 4
        for (int j = 0; j < KT; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, wv[j]);
      }
    }
    if (tail > 0) {  // unrolled like the loop above, so that acc stays in registers
      __m512bh wv[KT];
#pragma GCC unroll 4
      for (int j = 0; j < KT; ++j) wv[j] = load_tail(w[j]);
#pragma GCC unroll 4
      for (int i = 0; i < BT; ++i) {
        const auto av = load_tail(a[i]);
#pragma GCC unroll 4
        for (int j = 0; j < KT; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, wv[j]);
      }
    }
  }
  const auto* bias = static_cast<const BFloat16*>(p.bias);
  auto* y = static_cast<BFloat16*>(p.y);
  if (kt == KT && p.y_stride_k == 1) {
    // A whole tile: its 16 sums at once (the same sums), then a row's 4 outputs at once.
    __m512 all[16];
    for (int n = 0; n < 16; ++n) all[n] = n < BT * KT ? acc[n / KT][n % KT] : _mm512_setzero_ps();
    alignas(64) float sums[16];
    _mm512_store_ps(sums, lane_sums_16(all));
    float bias4[KT] = {};
    if (bias != nullptr)
      for (int j = 0; j < KT; ++j) bias4[j] = to_float(bias[k0 + j]);
    for (int i = 0; i < BT; ++i) {
      BFloat16* out = y + (b0 + i) * p.y_stride_b + k0;
      for (int j = 0; j < KT; ++j) out[j] = to_bfloat16(sums[i * KT + j] + bias4[j]);
    }
    return;
  }
  for (int i = 0; i < BT; ++i)
    for (int j = 0; j < kt; ++j) {
      const float sum = _mm512_reduce_add_ps(acc[i][j]);
      y[(b0 + i) * p.y_stride_b + (k0 + j) * p.y_stride_k] = to_bfloat16(sum + (bias ? to_float(bias[k0 + j]) : 0.f));
    }
}

// Row quads (the float32 engine's, gather_gemm_engine.inl, in bfloat16): a vector holds four rows
// of A, a 128-bit lane each, 8 consecutive reduction elements a lane (4 pairs); a weight row's next
// 8 elements are broadcast to all four lanes. A VDPBF16PS so advances 4 rows by 1 weight row by 8
// elements, and a quad's 16 outputs against 4 weight rows come out of 4 accumulators through 9
// operations within 128-bit lanes (quad_lane_sums), where dot_direct_tile's took lane_sums_16's
// 45 (docs/performance/cpu.md, "Row quads in the bfloat16 dot kernel").
constexpr int kQuadPairs = 4;  // pairs of a quad's lane

// y[4q .. 4q+4, k0 .. k0+kt) for the G row quads from q0 of `quads` (quad stride 4 * ldq; rows past
// B not stored), kt <= 4 weight rows along a unit stride from k0.
template <int G>
void dot_row_quads_tile(const Problem& p, const BFloat16* quads, std::int64_t ldq, std::int64_t q0, std::int64_t k0,
                        int kt) {
  constexpr int KT = 4, E = 2 * kQuadPairs;
  const BFloat16* w[KT];
  direct_tile_weight_rows(p, k0, kt, w);
  const BFloat16* a = quads + q0 * 4 * ldq;
  constexpr int S = G == 1 ? 2 : 1;  // two sets of accumulators for a quad alone, as the engine's
  __m512 acc[S][G][KT];
  for (int s = 0; s < S; ++s)
    for (int g = 0; g < G; ++g)
      for (int j = 0; j < KT; ++j) acc[s][g][j] = _mm512_setzero_ps();
  const auto step = [&](auto set, std::int64_t c, auto weight_lane) {
    __m512bh av[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) av[g] = load_pairs(a + g * 4 * ldq + 4 * c);
#pragma GCC unroll 4
    for (int j = 0; j < KT; ++j) {
      const __m512bh wv = weight_lane(j, c);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[set][g][j] = _mm512_dpbf16_ps(acc[set][g][j], av[g], wv);
    }
  };
  const auto whole_lane = [&](int j, std::int64_t c) {
    return reinterpret_cast<__m512bh>(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[j] + c))));
  };
  const std::int64_t whole = p.RH / E * E;
  std::int64_t c = 0;
  for (; c + E * S <= whole; c += E * S) {
    step(std::integral_constant<int, 0>{}, c, whole_lane);
    if constexpr (S == 2) step(std::integral_constant<int, S - 1>{}, c + E, whole_lane);
  }
  if (c < whole) step(std::integral_constant<int, 0>{}, c, whole_lane);
  if (whole < p.RH) {  // the last 1-7 elements, masked (A's quads hold zeros past them)
    const auto mask = static_cast<__mmask32>((1u << (p.RH - whole)) - 1);
    step(std::integral_constant<int, S - 1>{}, whole, [&](int j, std::int64_t) {
      const __m512i part = _mm512_maskz_loadu_epi16(mask, w[j] + whole);
      return reinterpret_cast<__m512bh>(_mm512_shuffle_i32x4(part, part, 0));
    });
  }
  if constexpr (S == 2)
    for (int g = 0; g < G; ++g)
      for (int j = 0; j < KT; ++j) acc[0][g][j] = _mm512_add_ps(acc[0][g][j], acc[1][g][j]);
  const auto* bias = static_cast<const BFloat16*>(p.bias);
  alignas(16) float bias4[4] = {};
  if (bias != nullptr)
    for (int j = 0; j < kt; ++j) bias4[j] = to_float(bias[k0 + j]);
  const __m512 bias_lanes = _mm512_broadcast_f32x4(_mm_load_ps(bias4));
  auto* y = static_cast<BFloat16*>(p.y);
  for (int g = 0; g < G; ++g) {
    const __m512 sums = _mm512_add_ps(quad_lane_sums(acc[0][g][0], acc[0][g][1], acc[0][g][2], acc[0][g][3]), bias_lanes);
    alignas(32) BFloat16 out[16];  // row-major, 4 outputs a row, rounded as to_bfloat16 rounds
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), round16_from_float<BFloat16>(sums));
    const std::int64_t b0 = 4 * (q0 + g);
    const int rows = static_cast<int>(std::min<std::int64_t>(4, p.B - b0));
    for (int i = 0; i < rows; ++i) {
      BFloat16* row = y + (b0 + i) * p.y_stride_b + k0 * p.y_stride_k;
      if (kt == KT && p.y_stride_k == 1)
        std::memcpy(row, out + 4 * i, 4 * sizeof(BFloat16));
      else
        for (int j = 0; j < kt; ++j) row[j * p.y_stride_k] = out[4 * i + j];
    }
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f")
#pragma GCC diagnostic push
// GCC 12's conversion intrinsics start from _mm512_undefined
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// out[2j + t] = row_t[j] for j < 16: two rows of 16 bfloat16 interleaved into pairs.
void interleave_rows_16(const BFloat16* row0, const BFloat16* row1, BFloat16* out) {
  const __m512i low = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row0)));
  const __m512i high = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row1)));
  _mm512_storeu_si512(out, _mm512_or_si512(low, _mm512_slli_epi32(high, 16)));
}

// out[i] = (low[i], high[i]) as pairs for i < 12, from the first `rows` elements of each run (a
// null run, and elements past `rows`, read as zeros): one step of a 12-row panel of A whose rows
// sit side by side. Masked loads, which read nothing past `rows`.
#pragma GCC target("avx512f,avx512bw,avx512vl")
void interleave_runs_12(const BFloat16* low, const BFloat16* high, int rows, std::uint32_t* out) {
  const auto load_mask = static_cast<__mmask16>((1u << rows) - 1u);
  const auto widen = [&](const BFloat16* run) {
    return run ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(load_mask, run)) : _mm512_setzero_si512();
  };
  _mm512_mask_storeu_epi32(out, static_cast<__mmask16>((1u << kDotRows) - 1u),
                           _mm512_or_si512(widen(low), _mm512_slli_epi32(widen(high), 16)));
}

// float16 values v[i] (i < n, unit stride) split into bfloat16 hi[i] = v rounded to nearest even
// and lo[i] = v - hi[i], which is exact: v's 11 significant bits are hi's 8 and at most 4 more.
// False where some v is infinite or NaN (nothing is promised of hi and lo then). 32 values a
// step: VCVTNE2PS2BF16 rounds two vectors of them to bfloat16 in one instruction (and packs lo's,
// exact), where rounding by integer steps and narrowing each vector with a masked VPMOVDW store
// had made the split a quarter of the time at (12, 256, 128, 2048).
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
// 16 bfloat16 values widened to float32 (exactly: their bits become the high halves).
inline __m512 widen_bfloat16s(__m256i bfloat16s) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bfloat16s), 16));
}

bool split_half_row(const Half* v, std::int64_t n, BFloat16* hi, BFloat16* lo) {
  __mmask32 special = 0;
  const __m512i exponent = _mm512_set1_epi16(0x7c00);
  for (std::int64_t i = 0; i < n; i += 32) {
    const int count = static_cast<int>(std::min<std::int64_t>(32, n - i));
    const auto mask = static_cast<__mmask32>(count == 32 ? ~0u : (1u << count) - 1u);
    const __m512i halves = _mm512_maskz_loadu_epi16(mask, v + i);
    special |= _mm512_mask_cmpeq_epi16_mask(mask, _mm512_and_si512(halves, exponent), exponent);
    const __m512 v0 = _mm512_cvtph_ps(_mm512_castsi512_si256(halves));
    const __m512 v1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(halves, 1));
    const __m512bh high = _mm512_cvtne2ps_pbh(v1, v0);
    const __m512i high_bits = reinterpret_cast<__m512i>(high);
    const __m512 h0 = widen_bfloat16s(_mm512_castsi512_si256(high_bits));
    const __m512 h1 = widen_bfloat16s(_mm512_extracti64x4_epi64(high_bits, 1));
    const __m512bh low = _mm512_cvtne2ps_pbh(_mm512_sub_ps(v1, h1), _mm512_sub_ps(v0, h0));
    _mm512_mask_storeu_epi16(hi + i, mask, high_bits);
    _mm512_mask_storeu_epi16(lo + i, mask, reinterpret_cast<__m512i>(low));
  }
  return special == 0;
}
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

// One panel of 16 outputs from k_first, every reduction index up to depth (RH padded), in pairs.
// With a unit inner stride a pair is one 32-bit word, and the panel is a 16 x (depth / 2)
// transposition of words, 16 x 16 at a time.
void pack_weight_panel(const Problem& p, std::int64_t k_first, std::int64_t depth, BFloat16* out) {
  const auto* weight = static_cast<const BFloat16*>(p.weight);
  const int valid = static_cast<int>(std::clamp<std::int64_t>(p.K - k_first, 0, kPanel));
  const std::int64_t pairs = depth / 2, full_pairs = p.weight_stride_c == 1 ? p.RH / 2 : 0;
  const BFloat16* rows[kPanel] = {};
  for (int j = 0; j < valid; ++j) rows[j] = weight + (k_first + j) * p.weight_stride_k;
  std::int64_t q = 0;
#ifdef GATHER_LINEAR_HAS_BF16_KERNELS
  for (; q + kPanel <= full_pairs; q += kPanel) {
    const std::uint32_t* words[kPanel] = {};
    for (int j = 0; j < valid; ++j) words[j] = reinterpret_cast<const std::uint32_t*>(rows[j] + 2 * q);
    transpose_words_16x16(words, reinterpret_cast<std::uint32_t*>(out + q * 2 * kPanel), kPanel);
  }
#endif
  for (; q < full_pairs; ++q) {
    std::uint32_t words[kPanel] = {};
    for (int j = 0; j < valid; ++j) std::memcpy(&words[j], rows[j] + 2 * q, sizeof(std::uint32_t));
    std::memcpy(out + q * 2 * kPanel, words, sizeof words);
  }
#ifdef GATHER_LINEAR_HAS_BF16_KERNELS
  // A transposed view (the backward's): the panel's 16 outputs sit side by side in each of its
  // rows, so a pair is two such rows interleaved.
  if (p.weight_stride_k == 1 && valid == kPanel)
    for (; q < p.RH / 2; ++q) {
      const BFloat16* row0 = weight + 2 * q * p.weight_stride_c + k_first;
      interleave_rows_16(row0, row0 + p.weight_stride_c, out + q * 2 * kPanel);
    }
#endif
  for (; q < pairs; ++q)  // an odd RH's last pair, the padding, strided views
    for (int j = 0; j < kPanel; ++j)
      for (int t = 0; t < 2; ++t) {
        const std::int64_t c = 2 * q + t;
        out[(q * kPanel + j) * 2 + t] = j < valid && c < p.RH ? rows[j][c * p.weight_stride_c] : BFloat16{};
      }
}

// f(offset, done, run) for each run of A's reduction indices [c, c + count) that one slice of x
// holds: `run` indices from index c + done, at `offset` elements from x's row (x_stride_h apart).
template <class F>
void for_each_slice_run(const Problem& p, std::int64_t c, std::int64_t count, F f) {
  std::int64_t r = c / std::max<std::int64_t>(p.H, 1), h = c - r * p.H;
  for (std::int64_t done = 0; done < count; ++r, h = 0) {
    const std::int64_t run = std::min(p.H - h, count - done);  // rest of slice r
    f(r * p.x_stride_r + h * p.x_stride_h, done, run);
    done += run;
  }
}

// Rows [b0, b0 + rows) x reduction [c0, c0 + depth) of A gathered from x, row-major with row
// stride lda; rows up to padded_rows and indices past RH are zero.
void gather_rows(const Problem& p, std::int64_t b0, int rows, int padded_rows, std::int64_t c0, int depth, int lda,
                 BFloat16* out) {
  const auto* x = static_cast<const BFloat16*>(p.x);
  if (p.R == 1 && p.x_stride_b == 1 && p.x_stride_h != 1) {
    // A transposed view (the backward's grad_y^T): read each reduction index's rows, which are
    // adjacent in memory, and write them down a column.
    const int real = static_cast<int>(std::clamp<std::int64_t>(p.RH - c0, 0, depth));
    for (int i = 0; i < padded_rows; ++i)
      std::memset(out + static_cast<std::int64_t>(i) * lda + real, 0,
                  static_cast<std::size_t>(depth - real) * sizeof(BFloat16));
    for (int i = rows; i < padded_rows; ++i)
      std::memset(out + static_cast<std::int64_t>(i) * lda, 0, static_cast<std::size_t>(real) * sizeof(BFloat16));
    int c = 0;
#ifdef GATHER_LINEAR_HAS_BF16_KERNELS
    // 32 reduction indices x 16 rows at a time: pairs of adjacent indices interleaved into
    // 32-bit words, then a 16 x 16 transposition of the words. (One element at a time, this
    // gather was most of the kernel's time outside its tile multiplies in the backward.)
    const int full_rows = rows / kTile * kTile;
    for (; c + 2 * kTile <= real; c += 2 * kTile)
      for (int i0 = 0; i0 < full_rows; i0 += kTile) {
        alignas(64) std::uint32_t words[kTile][kTile];
        const std::uint32_t* word_rows[kTile];
        for (int q = 0; q < kTile; ++q) {
          const BFloat16* src = x + (c0 + c + 2 * q) * p.x_stride_h + b0 + i0;
          interleave_rows_16(src, src + p.x_stride_h, reinterpret_cast<BFloat16*>(words[q]));
          word_rows[q] = words[q];
        }
        transpose_words_16x16(word_rows, reinterpret_cast<std::uint32_t*>(out + static_cast<std::int64_t>(i0) * lda + c),
                              lda / 2);
      }
    for (int i = full_rows; i < rows && c > 0; ++i)  // rows past the last full 16 of those indices
      for (int t = 0; t < c; ++t) out[static_cast<std::int64_t>(i) * lda + t] = x[(c0 + t) * p.x_stride_h + b0 + i];
#endif
    for (; c < real; ++c) {
      const BFloat16* src = x + (c0 + c) * p.x_stride_h + b0;
      for (int i = 0; i < rows; ++i) out[static_cast<std::int64_t>(i) * lda + c] = src[i];
    }
    return;
  }
  for (int i = 0; i < padded_rows; ++i) {
    BFloat16* dst = out + static_cast<std::int64_t>(i) * lda;
    const int real = i < rows ? static_cast<int>(std::clamp<std::int64_t>(p.RH - c0, 0, depth)) : 0;
    const BFloat16* row = x + (b0 + i) * p.x_stride_b;
    for_each_slice_run(p, c0, real, [&](std::int64_t offset, std::int64_t done, std::int64_t run) {
      const BFloat16* src = row + offset;
      // Short slices element by element: with a copy call for each slice of 1 or 3 elements,
      // (32, 512, 1, 2048) and (64, 256, 3, 512) had taken 1.26x and 1.11x the time.
      if (p.x_stride_h == 1 && run >= kCopyCallMinElements)
        std::memcpy(dst + done, src, static_cast<std::size_t>(run) * sizeof(BFloat16));
      else
        for (std::int64_t t = 0; t < run; ++t) dst[done + t] = src[t * p.x_stride_h];
    });
    std::memset(dst + real, 0, static_cast<std::size_t>(depth - real) * sizeof(BFloat16));
  }
}

#ifdef GATHER_LINEAR_HAS_BF16_KERNELS
// panel[t * kDotRows + i] = the pair at first + i * row_stride + 2 * t, for t < count and i < rows
// (up to kDotRows; the panel's other rows zeros): 16 pairs at a time transposed in registers as
// words, as the float32 engine transposes floats.
void transpose_pair_rows(const BFloat16* first, std::int64_t row_stride, int rows, int count, std::uint32_t* panel) {
  int t = 0;
  for (; t + 16 <= count; t += 16) {
    const std::uint32_t* words[16] = {};  // rows past `rows` read as zeros
    for (int i = 0; i < rows; ++i) words[i] = reinterpret_cast<const std::uint32_t*>(first + i * row_stride + 2 * t);
    transpose_words_16x16(words, panel + t * kDotRows, kDotRows, kDotRows);
  }
  for (; t < count; ++t)
    for (int i = 0; i < kDotRows; ++i) {
      std::uint32_t word = 0;
      if (i < rows) std::memcpy(&word, first + i * row_stride + 2 * t, sizeof word);
      panel[t * kDotRows + i] = word;
    }
}
#endif

// Rows [b0, b0 + rows) x pairs [q0, q0 + pairs) of A gathered from x into panels of kDotRows
// rows, pair-major: pair q of row i0 + i of a panel at panel[q * kDotRows + i], one 32-bit word
// (the lower half the even index). Rows up to padded_rows and indices past RH are zero.
void gather_pair_panels(const Problem& p, std::int64_t b0, int rows, int padded_rows, std::int64_t q0, int pairs,
                        std::uint32_t* out) {
  const auto* x = static_cast<const BFloat16*>(p.x);
#ifdef GATHER_LINEAR_HAS_BF16_KERNELS
  if (p.x_stride_h == 1 && p.H % 2 == 0) {
    // Each slice of a row is a run of whole pairs along a unit stride, transposed from x itself.
    const std::int64_t slice_pairs = p.H / 2;
    const int real = static_cast<int>(std::clamp<std::int64_t>(p.RH / 2 - q0, 0, pairs));
    for (int i0 = 0; i0 < padded_rows; i0 += kDotRows) {
      std::uint32_t* panel = out + static_cast<std::int64_t>(i0) * pairs;
      const int panel_rows = std::clamp(rows - i0, 0, kDotRows);
      std::int64_t r = slice_pairs > 0 ? q0 / slice_pairs : 0, h = 2 * (q0 - r * slice_pairs);
      for (int done = 0; done < real; ++r, h = 0) {
        const int run = static_cast<int>(std::min<std::int64_t>(slice_pairs - h / 2, real - done));
        transpose_pair_rows(x + (b0 + i0) * p.x_stride_b + r * p.x_stride_r + h, p.x_stride_b, panel_rows, run,
                            panel + done * kDotRows);
        done += run;
      }
      std::memset(panel + real * kDotRows, 0,
                  static_cast<std::size_t>(pairs - real) * kDotRows * sizeof(std::uint32_t));
    }
    return;
  }
  if (p.x_stride_h == 1) {
    // An odd H, whose pairs straddle slices: each panel's rows are gathered first, a slice's run
    // at a time, into a row-major copy whose words are the pairs, then transposed as above.
    // Gathered one element at a time, (34, 250, 233, 55) had taken 2.6-4.3x the time, (21, 34, 57,
    // 2858) 1.04-1.51x (2-core Zen 4 VM, docs/performance/cpu.md, "Short bfloat16 reductions on
    // the Zen 4, few outputs, and odd slice widths on the dot kernel").
    constexpr int kStagedStride = 2 * kDotSlicePairs;
    alignas(64) BFloat16 staged[kDotRows * kStagedStride];
    for (int i0 = 0; i0 < padded_rows; i0 += kDotRows) {
      std::uint32_t* panel = out + static_cast<std::int64_t>(i0) * pairs;
      const int panel_rows = std::clamp(rows - i0, 0, kDotRows);
      gather_rows(p, b0 + i0, panel_rows, panel_rows, 2 * q0, 2 * pairs, kStagedStride, staged);
      transpose_pair_rows(staged, kStagedStride, panel_rows, pairs, panel);
    }
    return;
  }
  if (p.x_stride_b == 1) {
    // Rows side by side (the backward's grad_y^T, an x stored (R, H, B)): each step of a panel
    // interleaves two runs of adjacent rows, one per index of the pair.
    const BFloat16* runs[2 * kDotSlicePairs];  // row b0 of each index, null past RH
    for (int t = 0; t < 2 * pairs; ++t) {
      const std::int64_t c = 2 * q0 + t, r = c / std::max<std::int64_t>(p.H, 1);
      runs[t] = c < p.RH ? x + r * p.x_stride_r + (c - r * p.H) * p.x_stride_h + b0 : nullptr;
    }
    for (int i0 = 0; i0 < padded_rows; i0 += kDotRows) {
      std::uint32_t* panel = out + static_cast<std::int64_t>(i0) * pairs;
      const int panel_rows = std::clamp(rows - i0, 0, kDotRows);
      for (int q = 0; q < pairs; ++q)
        interleave_runs_12(runs[2 * q] ? runs[2 * q] + i0 : nullptr, runs[2 * q + 1] ? runs[2 * q + 1] + i0 : nullptr,
                           panel_rows, panel + q * kDotRows);
    }
    return;
  }
#endif
  // Any other view (slices along a stride): one element at a time.
  const auto element = [&](int i, std::int64_t c) -> std::uint32_t {
    if (i >= rows || c >= p.RH) return 0;
    const std::int64_t r = c / p.H, h = c - r * p.H;
    return x[(b0 + i) * p.x_stride_b + r * p.x_stride_r + h * p.x_stride_h].bits;
  };
  for (int i = 0; i < padded_rows; ++i) {
    std::uint32_t* dst = out + static_cast<std::int64_t>(i / kDotRows) * kDotRows * pairs + i % kDotRows;
    for (int q = 0; q < pairs; ++q) {
      const std::int64_t c = 2 * (q0 + q);
      dst[q * kDotRows] = element(i, c) | element(i, c + 1) << 16;
    }
  }
}

#ifdef GATHER_LINEAR_HAS_BF16_KERNELS
thread_local Scratch packed_weight_scratch, a_scratch, c_scratch, tile_copy_scratch, kept_tiles_scratch;

// y[b0 .. b0 + rows, k0 .. k0 + outputs) = c's rows (row stride ldc) + bias, rounded once to Out.
template <class Out>
void store_rows_as(const Problem& p, const float* c, std::int64_t ldc, std::int64_t b0, int rows, std::int64_t k0,
                   int outputs) {
  const auto* bias = static_cast<const Out*>(p.bias);
  auto* y = static_cast<Out*>(p.y);
  const auto round = [](float v) {
    if constexpr (std::is_same_v<Out, Half>)
      return to_half(v);
    else
      return to_bfloat16(v);
  };
  for (int i = 0; i < rows; ++i) {
    Out* y_row = y + (b0 + i) * p.y_stride_b + k0 * p.y_stride_k;
    const float* c_row = c + static_cast<std::int64_t>(i) * ldc;
    if (p.y_stride_k == 1) {
      round_row_from_float(c_row, bias ? bias + k0 : nullptr, y_row, outputs);
      continue;
    }
    for (int j = 0; j < outputs; ++j)
      y_row[j * p.y_stride_k] = round(c_row[j] + (bias ? to_float(bias[k0 + j]) : 0.f));
  }
}

// y and bias are float16 where the AMX kernel computes float16 as bfloat16 parts (run_amx_split).
void store_rows(const Problem& p, const float* c, std::int64_t ldc, std::int64_t b0, int rows, std::int64_t k0,
                int outputs) {
  if (p.dtype == DType::float16)
    store_rows_as<Half>(p, c, ldc, b0, rows, k0, outputs);
  else
    store_rows_as<BFloat16>(p, c, ldc, b0, rows, k0, outputs);
}

// AMX: y[b0 .. b0 + rows, k0 .. k0 + outputs) from the packed block whose first output is
// k_block0, its panels `depth` deep.
// `gather(b0, rows, padded_rows, c0, depth, lda, out)` fills the gathered rows as gather_rows does
// (run_amx_split's gathers float16 x's bfloat16 parts).
template <class GatherRows>
void amx_compute_block(const Problem& p, const BFloat16* packed, std::int64_t k_block0, std::int64_t depth,
                       std::int64_t b0, int rows, std::int64_t k0, int outputs, GatherRows gather) {
  const int padded_rows = static_cast<int>(round_up(rows, kBlock));
  const int padded_outputs = static_cast<int>(round_up(outputs, kBlock));
  // c's rows a line longer than its outputs: at 1024 outputs (4 KB) a tile's 16 rows would fall in
  // one L1 set (0.95-1.01x the time with the line, 2-core AMX VM).
  const std::int64_t ldc = padded_outputs + kTile;
  // Row stride of the gathered rows: a line past the longest slice, so that a tile's 16 rows do
  // not all fall in the same few L1 sets, and no longer, so that short reductions' rows stay close.
  const int lda = static_cast<int>(std::min<std::int64_t>(kSlice, depth)) + 32;
  auto* a = static_cast<BFloat16*>(a_scratch.bytes(static_cast<std::size_t>(kRowBlock) * lda * sizeof(BFloat16)));
  // Every 32 x 32 block of c is written by the first slice (from zeroed tiles): no clearing.
  auto* c = static_cast<float*>(c_scratch.bytes(static_cast<std::size_t>(padded_rows) * ldc * sizeof(float)));
  const std::int64_t panel_elements = depth * kPanel;
  // The task's panels come from L3 or memory where they outgrow L2 (the first row tile of each
  // pair waited for them): there, while a pair's slice is multiplied, the row tiles fetch the
  // next pair's slice into L2, a share each (0.91-0.94x the time at R*H = 1024 to 8192 with 1 to
  // 8 MB of weight, 2-core AMX VM).
  const bool fetch_ahead = static_cast<std::int64_t>(padded_outputs) * depth * 2 > kPanelsInL2Bytes;
  const int calls = padded_rows / kBlock;
  configure_tiles();
  for (std::int64_t c0 = 0; c0 < depth; c0 += kSlice) {
    const int slice = static_cast<int>(std::min<std::int64_t>(kSlice, depth - c0));
    gather(b0, rows, padded_rows, c0, slice, lda, a);
    for (int jr = 0; jr < padded_outputs; jr += kBlock) {
      const BFloat16* w0 = packed + ((k0 - k_block0 + jr) / kPanel) * panel_elements + c0 * kPanel;
      PanelsAhead ahead;
      if (fetch_ahead && jr + kBlock < padded_outputs) {
        // Each panel's slice is slice / 2 lines, over calls * slice / kStep steps.
        ahead.lines = static_cast<int>(ceil_div(kStep / 2, calls));
        ahead.at = reinterpret_cast<const char*>(w0 + 2 * panel_elements);
        ahead.second = panel_elements * static_cast<std::int64_t>(sizeof(BFloat16));
      }
      for (int ir = 0; ir < padded_rows; ir += kBlock) {
        amx_micro_kernel(slice, a + static_cast<std::int64_t>(ir) * lda, lda, w0, w0 + panel_elements,
                         c + ir * ldc + jr, ldc, c0 > 0, ahead);
        ahead.at += static_cast<std::int64_t>(ahead.lines) * (slice / kStep) * 64;
      }
    }
  }
  release_tiles();
  store_rows(p, c, ldc, b0, rows, k0, outputs);
}

// The most rows AMX's direct path takes against a weight of this size on `threads` threads
// (kAmxDirectRows, kAmxDirectRowsPerThread).
std::int64_t amx_direct_rows(std::int64_t weight_bytes, std::int64_t threads) {
  std::int64_t rows = 0;
  for (const auto& tier : kAmxDirectRows)
    if (weight_bytes >= tier.weight_bytes) rows = tier.rows;
  return std::min(rows, std::max(kAmxDirectRowsAnyThreads, kAmxDirectRowsPerThread * threads));
}

// Where amx_direct's block of `outputs` (<= 32) outputs from k0 reads the weight, one WeightTile a
// 16-output half (w[1] repeats w[0] where there is one half): in place, with the reduction's last
// partial step from a zero-padded copy in `tails`; or, for the weight's last rows, the whole
// reduction from a zero-padded copy (rows past K zeros, nothing read past the weight).
void weight_tiles_of_block(const Problem& p, std::int64_t k0, int outputs, std::int64_t depth,
                           BFloat16 (&tails)[2][kTile * kStep], WeightTile (&w)[2]) {
  const auto* weight = static_cast<const BFloat16*>(p.weight);
  const std::int64_t main_depth = p.RH / kStep * kStep;
  const bool two = outputs > kTile;
  for (int t = 0; t < (two ? 2 : 1); ++t) {
    const BFloat16* first = weight + (k0 + t * kTile) * p.weight_stride_k;
    const int valid = std::min(kTile, outputs - t * kTile);
    if (valid < kTile) {
      auto* copy = static_cast<BFloat16*>(tile_copy_scratch.bytes(kTile * depth * sizeof(BFloat16)));
      for (int i = 0; i < kTile; ++i) {
        const std::int64_t real = i < valid ? p.RH : 0;
        if (real > 0) std::memcpy(copy + i * depth, first + i * p.weight_stride_k, real * sizeof(BFloat16));
        std::memset(copy + i * depth + real, 0, (depth - real) * sizeof(BFloat16));
      }
      const std::int64_t stride = depth * static_cast<std::int64_t>(sizeof(BFloat16));
      w[t] = {copy, stride, copy + main_depth, stride};
      continue;
    }
    const std::int64_t rest = p.RH - main_depth;
    for (int i = 0; main_depth < depth && i < kTile; ++i) {
      std::memcpy(tails[t] + i * kStep, first + i * p.weight_stride_k + main_depth, rest * sizeof(BFloat16));
      std::memset(tails[t] + i * kStep + rest, 0, (kStep - rest) * sizeof(BFloat16));
    }
    w[t] = {first, p.weight_stride_k * static_cast<std::int64_t>(sizeof(BFloat16)), tails[t],
            kStep * static_cast<std::int64_t>(sizeof(BFloat16))};
  }
  if (!two) w[1] = w[0];
}

// AMX's direct path, for short and middling batches: y^T = W * A^T, so that the weight's rows are
// the tile multiply's first operand, loaded in place (16 outputs x 32 reduction indices a tile, at
// the weight's row stride), and A's rows the second: gathered once, then packed into panels of 16
// rows as the weight is for the packed path (pack_weight_panel over A). Threads split the weight's
// rows in blocks of 32 outputs; each block is read from memory once and multiplied by A's rows 32
// at a time (its 256 KB at R*H = 4096 stay in L2 between them), unless the blocks are too few for
// the threads, which then split A's rows too. Where a tile would reach past the weight (its last
// rows, or the reduction's last partial step) it reads a zero-padded copy instead.
void amx_direct(const Problem& p) {
  if (p.B == 0 || p.K == 0) return;
  const std::int64_t depth = round_up(std::max<std::int64_t>(p.RH, 1), kStep);
  const std::int64_t main_depth = p.RH / kStep * kStep;
  const std::int64_t panels = ceil_div(p.B, kTile);
  const bool parallel = direct_parallel_pays(p);
  const std::int64_t panel_elements = depth * kPanel;
  const bool rows_aliased = p.weight_stride_k * static_cast<std::int64_t>(sizeof(BFloat16)) % kAliasedRowBytes == 0;
  auto* rows = static_cast<BFloat16*>(a_scratch.bytes(static_cast<std::size_t>(p.B * depth) * sizeof(BFloat16)));
  auto* a_panels = static_cast<BFloat16*>(
      packed_weight_scratch.bytes(static_cast<std::size_t>(panels * panel_elements) * sizeof(BFloat16)));
  Problem rows_as_weight = p;
  rows_as_weight.weight = rows;
  rows_as_weight.K = p.B;
  rows_as_weight.weight_stride_k = depth;
  rows_as_weight.weight_stride_c = 1;
  for_each_index(panels, parallel && panels > 1, [&](std::int64_t q) {
    const std::int64_t b0 = q * kTile;
    const int panel_rows = static_cast<int>(std::min<std::int64_t>(kTile, p.B - b0));
    gather_rows(p, b0, panel_rows, panel_rows, 0, static_cast<int>(depth), static_cast<int>(depth), rows + b0 * depth);
    pack_weight_panel(rows_as_weight, b0, depth, a_panels + q * panel_elements);
  });

  // Tasks: a block of outputs by a group of A's 32-row chunks. One group a block unless the blocks
  // are too few for the threads; then each block's chunks are split among several tasks.
  const std::int64_t blocks = ceil_div(p.K, kBlock), chunks = ceil_div(p.B, kBlock);
  const std::int64_t groups = parallel ? std::clamp<std::int64_t>(ceil_div(omp_get_max_threads(), blocks), 1, chunks) : 1;
  for_each_index(blocks * groups, parallel, [&](std::int64_t task) {
    const std::int64_t block = task / groups, group = task % groups;
    const std::int64_t k0 = block * kBlock;
    const int outputs = static_cast<int>(std::min<std::int64_t>(kBlock, p.K - k0));
    const bool two = outputs > kTile;
    alignas(64) BFloat16 tails[2][kTile * kStep];
    WeightTile w[2];
    weight_tiles_of_block(p, k0, outputs, depth, tails, w);
    configure_tiles();
    const std::int64_t rows_begin = group * chunks / groups * kBlock;
    const std::int64_t rows_end = std::min(p.B, (group + 1) * chunks / groups * kBlock);
    // Weight rows a multiple of kAliasedRowBytes apart fall in the same few L1 sets, a tile's 16
    // and the other tile's, and evict each other. Where the block meets more than one chunk of
    // rows, the first keeps the tiles it reads in a copy whose rows are an odd number of lines
    // apart, and the others read that.
    BFloat16* kept = nullptr;
    const std::int64_t kept_row = (depth / kStep | 1) * kStep;  // elements
    if (rows_aliased && rows_end - rows_begin > kBlock)
      kept = static_cast<BFloat16*>(kept_tiles_scratch.bytes(2 * kTile * kept_row * sizeof(BFloat16)));
    const std::int64_t kept_stride = kept_row * static_cast<std::int64_t>(sizeof(BFloat16));
    WeightTile kept_w[2] = {w[0], w[1]};
    if (kept != nullptr)
      for (int t = 0; t < 2; ++t) {
        const BFloat16* half = kept + (two ? t * kTile * kept_row : 0);
        kept_w[t] = {half, kept_stride, half + main_depth, kept_stride};
      }
    for (std::int64_t b0 = rows_begin; b0 < rows_end; b0 += kBlock) {
      const int chunk_rows = static_cast<int>(std::min<std::int64_t>(kBlock, p.B - b0));
      const BFloat16* chunk_panels = a_panels + b0 / kTile * panel_elements;
      const bool first = b0 == rows_begin;
      const WeightTile(&from)[2] = kept != nullptr && !first ? kept_w : w;
      BFloat16* keep = kept != nullptr && first ? kept : nullptr;
      alignas(64) float c[kBlock * kBlock];
      if (chunk_rows <= kTile)
        amx_direct_block<1>(from, two, main_depth, depth, chunk_panels, panel_elements, c, keep, kept_stride);
      else
        amx_direct_block<2>(from, two, main_depth, depth, chunk_panels, panel_elements, c, keep, kept_stride);
      // c transposed into rows of y, 16 x 16 words at a time for each tile stored (one element at
      // a time, this was most of the time outside the tile multiplies at short reductions).
      alignas(64) float by_rows[kBlock * kBlock];
      for (int t = 0; t < (two ? 2 : 1); ++t)
        for (int u = 0; u < (chunk_rows > kTile ? 2 : 1); ++u) {
          const std::uint32_t* tile_rows[kTile];
          for (int j = 0; j < kTile; ++j)
            tile_rows[j] = reinterpret_cast<const std::uint32_t*>(c + (t * kTile + j) * kBlock + u * kTile);
          transpose_words_16x16(tile_rows, reinterpret_cast<std::uint32_t*>(by_rows + u * kTile * kBlock + t * kTile),
                                kBlock);
        }
      store_rows(p, by_rows, kBlock, b0, chunk_rows, k0, outputs);
    }
    release_tiles();
  });
}

// AVX512-BF16: the same block, with 12-row panels of pairs of A against 32 outputs at a time.
void dot_compute_block(const Problem& p, const BFloat16* packed, std::int64_t k_block0, std::int64_t depth,
                       std::int64_t b0, int rows, std::int64_t k0, int outputs) {
  const int padded_rows = static_cast<int>(round_up(rows, kDotRows));
  const int padded_outputs = static_cast<int>(round_up(outputs, kDotOutputs));
  auto* a = static_cast<std::uint32_t*>(
      a_scratch.bytes(static_cast<std::size_t>(kDotRowBlock) * kDotSlicePairs * sizeof(std::uint32_t)));
  // Every micro-tile of c is written by the first slice: no clearing.
  auto* c = static_cast<float*>(
      c_scratch.bytes(static_cast<std::size_t>(padded_rows) * padded_outputs * sizeof(float)));
  const std::int64_t panel_words = depth / 2 * kPanel;
  const auto* packed_words = reinterpret_cast<const std::uint32_t*>(packed);
  // A reduction of one slice sends its whole tiles straight to y, and only the partial ones
  // through c, whose second pass had cost short reductions against many outputs most: median
  // times 0.79-0.96x on seven problems of 512 to 2048 rows with K = 2048 and 4096 (R*H = 32 to
  // 256), 0.98-1.07x on six others (2-core Zen 4 VM, docs/performance/cpu.md, "Short bfloat16
  // reductions on the Zen 4, few outputs, and odd slice widths on the dot kernel").
  const bool one_slice = depth / 2 <= kDotSlicePairs && p.y_stride_k == 1;
  const int whole_rows = one_slice ? rows / kDotRows * kDotRows : 0;
  const int whole_outputs = one_slice ? outputs / kDotOutputs * kDotOutputs : 0;
  auto* y = static_cast<BFloat16*>(p.y);
  const auto* bias = static_cast<const BFloat16*>(p.bias);
  for (std::int64_t q0 = 0; q0 < depth / 2; q0 += kDotSlicePairs) {
    const int pairs = static_cast<int>(std::min<std::int64_t>(kDotSlicePairs, depth / 2 - q0));
    gather_pair_panels(p, b0, rows, padded_rows, q0, pairs, a);
    for (int jr = 0; jr < padded_outputs; jr += kDotOutputs) {
      const std::uint32_t* w0 = packed_words + ((k0 - k_block0 + jr) / kPanel) * panel_words + q0 * kPanel;
      for (int ir = 0; ir < padded_rows; ir += kDotRows) {
        const std::uint32_t* panel = a + static_cast<std::int64_t>(ir) * pairs;
        if (ir < whole_rows && jr < whole_outputs)
          dot_micro_kernel_to_y(pairs, panel, w0, w0 + panel_words, y + (b0 + ir) * p.y_stride_b + k0 + jr,
                                p.y_stride_b, bias ? bias + k0 + jr : nullptr);
        else
          dot_micro_kernel(pairs, panel, w0, w0 + panel_words, c + static_cast<std::int64_t>(ir) * padded_outputs + jr,
                           padded_outputs, q0 > 0);
      }
    }
  }
  if (!one_slice) {
    store_rows(p, c, padded_outputs, b0, rows, k0, outputs);
    return;
  }
  // The partial tiles: the whole rows' last outputs, then every output of the last rows.
  store_rows(p, c + whole_outputs, padded_outputs, b0, whole_rows, k0 + whole_outputs, outputs - whole_outputs);
  store_rows(p, c + static_cast<std::int64_t>(whole_rows) * padded_outputs, padded_outputs, b0 + whole_rows,
             rows - whole_rows, k0, outputs);
}

// All of y on row quads: A's rows gathered 4 at a time (zeros past R*H, to whole 64-byte blocks)
// and interleaved by 128-bit lanes into quads, then tiles of 4 weight rows against up to 4 quads.
void dot_row_quads(const Problem& p, bool parallel) {
  const std::int64_t ldq = round_up(std::max<std::int64_t>(p.RH, 1), 32);
  const std::int64_t quad_count = ceil_div(p.B, 4);
  auto* lines = static_cast<BFloat16*>(
      a_scratch.bytes(static_cast<std::size_t>((4 + 4 * quad_count) * ldq) * sizeof(BFloat16)));
  BFloat16* quads = lines + 4 * ldq;
  for (std::int64_t q = 0; q < quad_count; ++q) {
    const int rows = static_cast<int>(std::min<std::int64_t>(4, p.B - 4 * q));
    gather_rows(p, 4 * q, rows, 4, 0, static_cast<int>(ldq), static_cast<int>(ldq), lines);
    interleave_row_quad(lines, ldq * std::int64_t{sizeof(BFloat16)}, quads + q * 4 * ldq);
  }
  for_each_direct_tile(quad_count, p.K, parallel, [&](auto G, std::int64_t q0, std::int64_t k0, int kt) {
    dot_row_quads_tile<decltype(G)::value>(p, quads, ldq, q0, k0, kt);
  });
}
// The dot kernel for short batches, where packing the weight costs more than its reuse by B
// rows saves: A's rows gathered once (B * RH bfloat16), then each weight row read once in place
// against 4 rows of A at a time (threads split the weight's rows).
void dot_direct(const Problem& p) {
  if (p.B == 0 || p.K == 0) return;
  if (row_quads_pay(p.B, p.RH)) {
    dot_row_quads(p, direct_parallel_pays(p));
    return;
  }
  // An even row stride: gather_rows writes pairs of a transposed view as 32-bit words.
  const int lda = static_cast<int>(round_up(std::max<std::int64_t>(p.RH, 1), 2));
  auto* rows = static_cast<BFloat16*>(a_scratch.bytes(static_cast<std::size_t>(p.B * lda) * sizeof(BFloat16)));
  gather_rows(p, 0, static_cast<int>(p.B), static_cast<int>(p.B), 0, static_cast<int>(p.RH), lda, rows);
  const bool parallel = direct_parallel_pays(p);
  for_each_direct_tile(p.B, p.K, parallel, [&](auto tile_rows, std::int64_t b0, std::int64_t k0, int kt) {
    dot_direct_tile<decltype(tile_rows)::value>(p, rows, lda, b0, k0, kt);
  });
}

// The two kernels' driver: the weight packed in blocks of about 4 MB (panels `depth` deep, in
// pairs: a block's 32 outputs; pack_panel(k_first, out) packs the 16 from k_first), each block's
// rows of y then shared out among the threads in tasks of at most row_block rows (cut on multiples
// of row_granule) and kGroupOutputs outputs.
template <class ComputeBlock, class PackPanel>
void run_blocked(const Problem& p, std::int64_t depth, std::int64_t row_block, std::int64_t row_granule,
                 ComputeBlock compute_block, PackPanel pack_panel) {
  if (p.B == 0 || p.K == 0) return;
  const std::int64_t panel_elements = depth * kPanel;
  // Panels come in pairs (the micro-kernels' 32 outputs); a pair past K is zeros.
  const std::int64_t pairs_total = ceil_div(p.K, 2 * kPanel);
  const std::int64_t pair_bytes = 2 * panel_elements * static_cast<std::int64_t>(sizeof(BFloat16));
  const std::int64_t pairs_per_block = std::clamp<std::int64_t>(kPackedWeightBlockBytes / pair_bytes, 1, pairs_total);
  auto* packed =
      static_cast<BFloat16*>(packed_weight_scratch.bytes(static_cast<std::size_t>(pairs_per_block * pair_bytes)));
  const bool parallel = parallel_pays(p.flops());

  for (std::int64_t pair0 = 0; pair0 < pairs_total; pair0 += pairs_per_block) {
    const std::int64_t pairs = std::min(pairs_per_block, pairs_total - pair0);
    const std::int64_t k_block0 = pair0 * 2 * kPanel;
#pragma omp parallel for if (parallel) schedule(static)
    for (std::int64_t q = 0; q < 2 * pairs; ++q) pack_panel(k_block0 + q * kPanel, packed + q * panel_elements);

    // Enough tasks for every thread even when B is small (the block's outputs split too), and at
    // most kGroupOutputs outputs a task, so that its float32 block of y stays in L2.
    const std::int64_t for_threads = parallel ? groups_for_threads(p.B, row_block) : 1;
    const std::int64_t for_size = ceil_div(pairs * 2 * kPanel, kGroupOutputs);
    const std::int64_t groups = std::clamp<std::int64_t>(std::max(for_threads, for_size), 1, pairs);
    for_each_block_task(p.B, row_block, row_granule, pairs, groups, parallel, /*same_threads=*/false,
                        [&](std::int64_t b0, int rows, std::int64_t first_pair, std::int64_t group_pairs) {
                          const std::int64_t k0 = k_block0 + first_pair * 2 * kPanel;
                          const int outputs = static_cast<int>(std::min(group_pairs * 2 * kPanel, p.K - k0));
                          compute_block(p, packed, k_block0, depth, b0, rows, k0, outputs);
                        });
  }
}

// AMX's two paths for a bfloat16 problem.
void run_amx_tiles(const Problem& p) {
  const std::int64_t depth = round_up(std::max<std::int64_t>(p.RH, 1), kStep);
  if (p.weight_stride_c == 1 && p.B <= amx_direct_rows(p.weight_bytes(), omp_get_max_threads()) &&
      p.B * depth * std::int64_t{sizeof(BFloat16)} <= kDirectRowsBytes) {
    amx_direct(p);
    return;
  }
  run_blocked(
      p, depth, kRowBlock, kBlock,
      [&](const Problem& q, const BFloat16* packed, std::int64_t k_block0, std::int64_t d, std::int64_t b0, int rows,
          std::int64_t k0, int outputs) {
        amx_compute_block(q, packed, k_block0, d, b0, rows, k0, outputs,
                          [&](std::int64_t g0, int n, int padded, std::int64_t c0, int slice, int lda, BFloat16* out) {
                            gather_rows(q, g0, n, padded, c0, slice, lda, out);
                          });
      },
      [&](std::int64_t k_first, BFloat16* out) { pack_weight_panel(p, k_first, depth, out); });
}

// n float16 values from `v` at `stride` split as split_half_row splits them; false if any is
// infinite or NaN.
bool split_half_run(const Half* v, std::int64_t stride, std::int64_t n, BFloat16* hi, BFloat16* lo) {
  if (stride == 1) return split_half_row(v, n, hi, lo);
  bool finite = true;
  for (std::int64_t i = 0; i < n; ++i) {
    const float value = to_float(v[i * stride]);
    const BFloat16 high = to_bfloat16(value);
    hi[i] = high;
    lo[i] = to_bfloat16(value - to_float(high));  // exact
    finite &= std::isfinite(value);
  }
  return finite;
}

// float16 on AMX, whose tiles multiply bfloat16 only. Each float16 v splits exactly into bfloat16
// parts hi + lo (split_half_row), and x*w = hx*hw + hx*lw + lx*hw + lx*lw: the first three products
// are exact in float32, the last is below 2^-16 of x*w and left out. So y is a bfloat16 problem
// with three times the reduction, A' = [hx | hx | lx] and W' = [hw | lw | hw] along it, which the
// packed path's gather and packing split from x and the weight as they go; y and the bias stay
// float16 (store_rows). An infinity or NaN would turn such parts' products into NaNs where x*w is
// not one (inf * 0 in a part): a problem with any is computed again by the SIMD engine.
void run_amx_split(const Problem& p) {
  if (p.B == 0 || p.K == 0) return;
  const std::int64_t RH = p.RH, split = 3 * RH, depth = round_up(std::max<std::int64_t>(split, 1), kStep);
  std::atomic<bool> special{false};
  const auto* x = static_cast<const Half*>(p.x);
  const auto* weight = static_cast<const Half*>(p.weight);
  // Reduction indices [c0, c0 + n) of one row of A' or W' into `out`: for each third s of the
  // reduction, part parts[s] (0 hi, 1 lo) of the original indices. `split_run(c, count, hi, lo)`
  // splits the original indices the thirds need once, into both parts (splitting them for each
  // third, three times over, had been a third of the time at (12, 256, 128, 2048)); past 3 RH,
  // zeros.
  const auto split_row = [&](const int (&parts)[3], std::int64_t c0, std::int64_t n, BFloat16* out, auto split_run) {
    std::int64_t begin[3], end[3];      // each third's share of [c0, c0 + n), in A' or W' indices
    std::int64_t first = RH, last = 0;  // the original indices needed
    for (int s = 0; s < 3; ++s) {
      begin[s] = std::max(c0, s * RH), end[s] = std::min(c0 + n, (s + 1) * RH);
      if (begin[s] < end[s]) first = std::min(first, begin[s] - s * RH), last = std::max(last, end[s] - s * RH);
    }
    if (first < last) {
      thread_local Scratch parts_scratch;
      const auto count = static_cast<std::size_t>(last - first);
      auto* hi = static_cast<BFloat16*>(parts_scratch.bytes(count * 2 * sizeof(BFloat16)));
      BFloat16* lo = hi + count;
      if (!split_run(first, static_cast<std::int64_t>(count), hi, lo)) special.store(true, std::memory_order_relaxed);
      for (int s = 0; s < 3; ++s)
        if (begin[s] < end[s])
          std::memcpy(out + (begin[s] - c0), (parts[s] == 0 ? hi : lo) + (begin[s] - s * RH - first),
                      static_cast<std::size_t>(end[s] - begin[s]) * sizeof(BFloat16));
    }
    if (c0 + n > split) {
      const std::int64_t from = std::max(split, c0);
      std::memset(out + (from - c0), 0, static_cast<std::size_t>(c0 + n - from) * sizeof(BFloat16));
    }
  };
  run_blocked(
      p, depth, kRowBlock, kBlock,
      [&](const Problem& q, const BFloat16* packed, std::int64_t k_block0, std::int64_t d, std::int64_t b0, int rows,
          std::int64_t k0, int outputs) {
        amx_compute_block(
            q, packed, k_block0, d, b0, rows, k0, outputs,
            [&](std::int64_t g0, int n, int padded, std::int64_t c0, int slice, int lda, BFloat16* out) {
              constexpr int kX[3] = {0, 0, 1};  // hx, hx, lx
              for (int i = 0; i < n; ++i) {
                const Half* row = x + (g0 + i) * p.x_stride_b;
                split_row(kX, c0, slice, out + static_cast<std::int64_t>(i) * lda,
                          [&](std::int64_t c, std::int64_t count, BFloat16* hi, BFloat16* lo) {
                            bool finite = true;
                            for_each_slice_run(p, c, count, [&](std::int64_t offset, std::int64_t done, std::int64_t run) {
                              finite &= split_half_run(row + offset, p.x_stride_h, run, hi + done, lo + done);
                            });
                            return finite;
                          });
              }
              for (int i = n; i < padded; ++i)
                std::memset(out + static_cast<std::int64_t>(i) * lda, 0, static_cast<std::size_t>(slice) * 2);
            });
      },
      [&](std::int64_t k_first, BFloat16* out) {
        // The panel's weight rows split into a copy, [hw | lw | hw], then packed as bfloat16 rows.
        constexpr int kW[3] = {0, 1, 0};
        const int valid = static_cast<int>(std::clamp<std::int64_t>(p.K - k_first, 0, kPanel));
        thread_local Scratch panel_scratch;
        auto* rows = static_cast<BFloat16*>(panel_scratch.bytes(static_cast<std::size_t>(valid) * split * 2));
        for (int j = 0; j < valid; ++j) {
          const Half* row = weight + (k_first + j) * p.weight_stride_k;
          split_row(kW, 0, split, rows + j * split, [&](std::int64_t c, std::int64_t count, BFloat16* hi, BFloat16* lo) {
            return split_half_run(row + c * p.weight_stride_c, p.weight_stride_c, count, hi, lo);
          });
        }
        Problem panel = p;
        panel.dtype = DType::bfloat16;
        panel.K = valid;
        panel.RH = split;
        panel.weight = rows;
        panel.weight_stride_k = split;
        panel.weight_stride_c = 1;
        pack_weight_panel(panel, 0, depth, out);
      });
  if (special.load()) run_gather_gemm(p);
}
#endif

}  // namespace

bool amx_bf16_supported() {
#ifdef GATHER_LINEAR_HAS_BF16_KERNELS
  static const bool usable = amx_usable();
  return usable;
#else
  return false;
#endif
}

std::string amx_bf16_why_not(const Problem& p) {
  if (p.dtype != DType::bfloat16 && p.dtype != DType::float16) return "bfloat16 or float16 only";
  if (!amx_bf16_supported()) return "needs AMX-BF16 tiles, which this processor (or its operating system) lacks";
  return {};
}

void run_amx_bf16(const Problem& p) {
  if (const std::string why = amx_bf16_why_not(p); !why.empty()) throw Error(ErrorCode::unsupported, "kernel", why);
#ifdef GATHER_LINEAR_HAS_BF16_KERNELS
  if (p.dtype == DType::float16)
    run_amx_split(p);
  else
    run_amx_tiles(p);
#endif
}

bool bf16_dot_supported() {
#ifdef GATHER_LINEAR_HAS_BF16_KERNELS
  // AVX-512 (with its 16-bit masked loads) packs the weight and gathers x.
  static const bool usable = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return usable;
#else
  return false;
#endif
}

std::string bf16_dot_why_not(const Problem& p) {
  if (p.dtype != DType::bfloat16) return "bfloat16 only";
  if (!bf16_dot_supported()) return "needs AVX512-BF16, which this processor lacks";
  return {};
}

bool bf16_dot_reads_weight_in_place(const Problem& p) {
  return p.dtype == DType::bfloat16 && p.weight_stride_c == 1 && p.B <= kDotDirectRows &&
         p.B * p.RH * std::int64_t{sizeof(BFloat16)} <= kDirectRowsBytes;
}

// On AMD's Zen 4 the packed dot kernel took about half the float32 engine's time. An Intel Emerald
// Rapids VM without AMX issued a 512-bit VDPBF16PS (32 multiply-adds) at a quarter of its 512-bit
// FMA rate (1.3 against 5.0 G instructions/s per core, bench/cpu_issue_rates.cpp): there the dot
// kernel took 1.0-1.7x the engine's time from 48 rows and 15 MFLOP up, but still 0.78-0.95x below
// 32 rows, where the engine packs a float32 copy of the weight for few rows, and 0.61-0.80x at 32
// to 256 rows of small problems (up to 4 MFLOP; then all on the engine's unpacked path)
// (docs/performance/cpu.md, "bfloat16 on an Intel processor without AMX").
bool bf16_dot_packed_beats_engine(const Problem& p) {
#ifdef GATHER_LINEAR_HAS_BF16_KERNELS
  static const bool amd = __builtin_cpu_is("amd");
  return amd || p.B < kDotPackedBeatsEngineRows || p.flops() <= kDotPackedBeatsEngineFlops;
#else
  (void)p;
  return false;
#endif
}

// The batches that kDotBeatsAmxRows and kEngineBeatsDotReduction split between the dot kernel and
// the engine on AMX processors.
namespace {
bool few_rows_for_dot(const Problem& p) { return bf16_dot_reads_weight_in_place(p) && p.B <= kDotBeatsAmxRows; }
}  // namespace

bool bf16_dot_beats_amx(const Problem& p) { return few_rows_for_dot(p) && p.RH > kEngineBeatsDotReduction; }

bool engine_beats_dot(const Problem& p) {
  if (p.RH <= kEngineBeatsDotAnyRowsReduction || (p.B == 1 && p.RH <= kEngineBeatsDotReduction)) return true;
  if (bf16_dot_reads_weight_in_place(p)) return false;
  const bool copies_rows = p.x_stride_h == 1 && p.H % 2 != 0;
  return p.K <= kEngineBeatsDotPackedOutputs ||
         (copies_rows && p.RH <= kEngineBeatsDotOddSliceReduction && p.K <= kEngineBeatsDotOddSliceOutputs);
}

bool engine_beats_amx(const Problem& p) {
  if (p.RH <= kEngineBeatsAmxReduction || p.K <= kEngineBeatsAmxOutputs) return true;
  if (few_rows_for_dot(p) && p.RH <= kEngineBeatsDotReduction) return true;
  for (const auto& [reduction, outputs] : kEngineBeatsAmxShort)
    if (p.RH <= reduction && p.K <= outputs) return true;
  return false;
}

std::int64_t amx_split_min_rows() { return kSplitMinRowsPerThread * omp_get_max_threads(); }

bool amx_split_beats_engine(const Problem& p) {
  return p.dtype == DType::float16 && amx_bf16_supported() && p.B >= amx_split_min_rows() &&
         p.RH >= kSplitMinReduction && p.K >= kSplitMinOutputs && p.H * p.K >= kSplitMinSliceTimesOutputs &&
         p.x_stride_h == 1 && p.weight_stride_c == 1;
}

void run_bf16_dot(const Problem& p) {
  if (const std::string why = bf16_dot_why_not(p); !why.empty()) throw Error(ErrorCode::unsupported, "kernel", why);
#ifdef GATHER_LINEAR_HAS_BF16_KERNELS
  if (bf16_dot_reads_weight_in_place(p)) {
    dot_direct(p);
    return;
  }
  const std::int64_t depth = round_up(std::max<std::int64_t>(p.RH, 1), 2);
  run_blocked(p, depth, kDotRowBlock, kDotRows, dot_compute_block,
              [&](std::int64_t k_first, BFloat16* out) { pack_weight_panel(p, k_first, depth, out); });
#endif
}

}  // namespace gather_linear::cpu
