// The CPU GEMM engine, compiled once per instruction set by gather_gemm.cpp: it includes this
// file inside `namespace <isa>` under `#pragma GCC target(...)` after defining
//   GATHER_GEMM_VECTOR_BYTES  width of one SIMD register (16, 32 or 64)
//   GATHER_GEMM_MR            rows per micro-tile, sized so MR*2 accumulators + 3 fit the register file
// It must not include headers: everything it uses is included before the target region, so
// that only the functions defined here are compiled for that instruction set.
//
// Layout (BLIS style). The weight block [k_block0, k_block0 + nc) x [0, RH) is packed once
// into NR-wide panels, panel-major: packed[panel][c][j] = W[k_block0 + panel*NR + j, c].
// A row block of the gathered operand A[b, c] = x[c / H, b, c % H] is packed per KC-slice of c
// into MR-tall panels: a[panel][c][i] = A[b0 + panel*MR + i, c0 + c]. The gather happens in
// that packing, which a GEMM does anyway: the concatenation is never built.

template <class Acc>
struct Tiling {
  static constexpr int kLanes = GATHER_GEMM_VECTOR_BYTES / static_cast<int>(sizeof(Acc));
  static constexpr int kVectorsPerRow = 2;
  static constexpr int NR = kLanes * kVectorsPerRow;  // columns of a micro-tile
  static constexpr int MR = GATHER_GEMM_MR;           // rows of a micro-tile
  static constexpr int MC = MR * 8;                   // rows per packed A block: stays in L2
  // The reduction slice: an NR-wide panel slice of it stays in L1 (AVX2 and SSE2: 32 KB). On
  // AVX-512 one of 512 (64 KB, read from L2 with prefetching) took 0.85-0.99x the time of 256
  // where it makes R*H of 257 to 512 one slice (whose tiles go straight to y), 0.98-1.00x from 612
  // up, on the 2-core AMX VM, 0.91-1.00x on the GPU host's 16-core Xeon (docs/performance/cpu.md,
  // "Tiles stored straight to y, the same threads for short reductions, and slices of 512").
  static constexpr int KC = GATHER_GEMM_VECTOR_BYTES == 64 ? 512 : 256;
  // A reduction of one slice stores its tiles to y this many bytes of them at a time (they stay
  // in L2), not all of a task's at the end: 0.65-0.89x the time on short reductions of 512 to
  // 4096 rows on the 2-core AMX VM (64 KB 0.86-0.93x, 1 MB 0.67-0.96x; one 128-byte panel at a
  // time had taken 1.9x at (1, 4096, 64, 2048), y's rows being 8 KB apart). Where the tiles go
  // straight to y (store_tiles_to_y), a row tile walks this many bytes of packed panels instead.
  static constexpr std::int64_t kStoreChunkBytes = std::int64_t{256} << 10;
  // The direct path pays only with reductions long enough for its lane sums (gather_gemm.cpp):
  // R*H >= this many times B. On AVX2, 8 (also with the 4 x 3 tiles below: packed over direct
  // time 0.77-1.15 at R*H = 8B, B = 16 to 128). On AVX-512, 4 in float32 and float64 and 16 for
  // the 16-bit types, which the direct path widens on every load (docs/performance/cpu.md, "The
  // direct path's bound on AVX-512"; it had been 2B, measured on a Zen 4 against the packed path
  // before it packed inside its tasks). Packed time over direct, B = 8 to 64: at R*H = 2B 0.56-0.86
  // on the 2-core AMX VM and 0.47-1.02 on the GPU host's 16-core Xeon; at 4B 0.76-1.07 on the VM
  // and 1.12-1.23 on the Xeon; in 16-bit below 16B mostly 0.22-0.93 on both (up to 1.17 with 3 to 6
  // rows on the VM). But for a few rows
  // (direct_few_rows), where 2B still holds in float32 and float64 and 4B for the 16-bit types:
  // the direct path took 0.47-0.92x the packed one's time at R*H = 2B to 8B with 2 to 4 rows, but
  // 1.03-1.59x in 3 of those 12 cells (float64 at R*H = 2B with 2 and 4 rows, float32 at 16 with
  // 4); in float16 with 2 rows 0.72-0.94x at R*H = 8 and 16 (1.22-1.28x at 4).
  template <class In>
  static constexpr std::int64_t direct_few_rows() {
    if constexpr (GATHER_GEMM_VECTOR_BYTES == 64) return sizeof(In) == 2 ? 2 : 4;
    return 0;
  }
  template <class In>
  static constexpr std::int64_t direct_reduction_per_row(std::int64_t B) {
    if constexpr (GATHER_GEMM_VECTOR_BYTES == 64) {
      if (B <= direct_few_rows<In>()) return sizeof(In) == 2 ? 4 : 2;
      return sizeof(In) == 2 ? 16 : 4;
    }
    return 8;
  }
  // With AVX2's 16 vector registers a 4 x 4 tile (16 accumulators, 4 weight vectors, an A vector)
  // spills, a 4 x 3 one fits exactly. On a long reduction the fit pays: 0.69-0.84x the time in
  // float32 at R*H = 256-1024 with up to 16 rows (0.93-1.01x with 32 to 64), 0.64-0.78x in float64
  // from R*H = 64; on shorter ones the third more tiles' setup and lane sums outweigh it (float32:
  // 0.92-1.13x at R*H = 128, 1.06-1.45x at 64 and below), and with fewer than 3 rows of A the
  // 2 x 4 tile fits already (docs/performance/cpu.md, "Direct tiles that fit AVX2's registers").
  static constexpr int kDirectFittedWeightRows = GATHER_GEMM_VECTOR_BYTES == 32 ? 3 : 4;
  static constexpr std::int64_t kDirectFittedMinReduction = std::int64_t{sizeof(Acc) == 8 ? 16 : 32} * kLanes;
  // Whether tiles of `rows` rows of A (all B, or a row block's) against a reduction of RH take
  // kDirectFittedWeightRows weight rows rather than 4.
  static constexpr bool direct_tiles_fitted(std::int64_t rows, std::int64_t RH) {
    return kDirectFittedWeightRows != 4 && rows >= 3 && RH >= kDirectFittedMinReduction;
  }
  // With those tiles the direct path outruns packing on AVX2 in float32 beyond the small problems
  // too (given R*H >= direct_reduction_per_row(B) * B and a reduction long enough for them), while its
  // gathered rows of A, read again for each 3 weight rows, stay within this many bytes: 0.51-0.96x
  // the packed path's time with up to 2 MB of them, 0.67-1.03x at 3-4 MB, 1.5-2.3x from 6 MB.
  // Not float64 (0.78-1.1x, and 1.57x with few outputs at (16, 66, 78, 7)), nor 16-bit inputs
  // (widened on every load: 1.0-1.06x); 0 where not measured (docs/performance/cpu.md, "Direct
  // tiles that fit AVX2's registers").
  static constexpr std::int64_t kDirectWideRowsBytes =
      GATHER_GEMM_VECTOR_BYTES == 32 && sizeof(Acc) == 4 ? std::int64_t{2} << 20 : 0;
  // Batches of up to kDirectBatchMaxRows rows (beyond gather_gemm.cpp's kDirectRows) take the
  // direct path too where the reduction is at least kDirectBatchMinReduction elements and
  // direct_batch_reduction_per_row() a row: packing widens and copies the whole weight for those few
  // rows to reuse, the direct path reads it in place. Direct time over packed at B = 17 to 32:
  // on AVX2 (2-core EPYC of family 23), 16-bit inputs with R*H >= 32B 0.67-1.02x (B = 48:
  // 0.84-1.32x; R*H = 256 to 512, below 32B: 0.84-1.17x), float32 there on the wide rule above; on
  // AVX-512 (the GPU host's 16-core Xeon) float32 and float16 with R*H >= 256 0.27-0.80x (B = 48
  // to 64: 0.44-0.90x, B = 96 0.63-2.01x; docs/performance/cpu.md, "float16 remainders through
  // F16C, and batches of 17 to 32 rows on the direct path"; a 2-core Zen 4 had put float32 at
  // 0.66-1.13x at B = 32, "Short batches"). Not float64: not measured. On AVX-512 that was against
  // the packed path before it packed inside its tasks; since, the direct path's bound per row
  // applies here too (2B had been the rule).
  static constexpr std::int64_t kDirectBatchMaxRows = sizeof(Acc) == 4 && GATHER_GEMM_VECTOR_BYTES >= 32 ? 32 : 0;
  static constexpr std::int64_t kDirectBatchMinReduction = GATHER_GEMM_VECTOR_BYTES == 64 ? 256 : 0;
  template <class In>
  static constexpr std::int64_t direct_batch_reduction_per_row() {
    if constexpr (GATHER_GEMM_VECTOR_BYTES == 64) return direct_reduction_per_row<In>(direct_few_rows<In>() + 1);
    return 32;
  }
  // The weight-rows path (weight_rows_tiles) reads the weight in place where packing it would cost
  // more than its few rows of A save. automatic_path takes it for float32 and float64 from NR rows
  // (a whole panel of A) to weight_rows_max_rows(R*H), while A's panels take at most
  // kWeightRowsMaxPanelsBytes (they are read from L2 for every weight tile). Against the path it
  // replaced, 2 threads on the 2-core AMX VM (docs/performance/cpu.md, "The weight read in place:
  // y's tiles transposed"), within these bounds:
  // - AVX-512 float32, up to half the reduction's length in rows, or all of it from 512: 0.52-0.99x
  //   in all 44 grid cells of that region at B = 32 to 512, and in 12 more at R*H = 64 to 128;
  //   beyond, up to 1.18x at R*H = 256 and 1.54x at 32 to 128; with 598 to 768 rows 0.99-1.15x.
  // - AVX-512 float64, from R*H = 64 up to half the reduction's length in rows (at least 64), and
  //   from R*H = 1024 up to all of it, at most 1024 rows: against the packed path forced, 0.42-0.97x
  //   inside at B = 16 to 1024 and R*H = 64 to 2048 but 0.89-1.06x at its edge (B = R*H / 2 from 192;
  //   1.05-1.08x at (12, 384, 64, 4096)); beyond, 1.02-1.31x at B = 96 to 128 and R*H = 64 to 192, up
  //   to 1.27x at R*H = 256 to 768, 0.92-1.58x below R*H = 64. (It had been up to 4 R*H, measured
  //   while the packed path's float64 one-slice loop spilled: see micro_kernel.) On an H100 host's
  //   16-core Xeon the rule took 0.54-0.98x the old one's time in 16 of 20 A/B cells at B = 128 to
  //   512 (16 and 8 threads; 1.05-1.29x in four); forced, the path still took 0.85-0.86x packed's
  //   time at (12, 512, 64, 1024), outside the region.
  // - AVX2, up to half the reduction's length: float32 0.75-0.97x at B = 16 to 256 (1.08x at (4,
  //   128, 64, 256)), 1.04x with 2 MB of panels; float64 0.84-0.91x at 256 rows with 1.5-2 MB of
  //   panels (not taken), 1.08-1.22x at 512.
  // Not the portable build's: not measured.
  static constexpr std::int64_t kWeightRowsMaxPanelsBytes = GATHER_GEMM_VECTOR_BYTES == 64   ? std::int64_t{4} << 20
                                                            : GATHER_GEMM_VECTOR_BYTES == 32 ? std::int64_t{1} << 20
                                                                                             : 0;
  static constexpr std::int64_t weight_rows_max_rows(std::int64_t RH) {
    if constexpr (GATHER_GEMM_VECTOR_BYTES == 64) {
      if constexpr (sizeof(Acc) == 8)
        return RH >= 1024 ? std::min<std::int64_t>(1024, RH) : RH >= 64 ? std::max<std::int64_t>(64, RH / 2) : 0;
      return std::min<std::int64_t>(512, RH >= 512 ? RH : RH / 2);
    }
    return std::min<std::int64_t>(512, RH / 2);
  }
  // What a flop costs against one of an AVX-512 float32 multiply-add (16 lanes): the thread
  // thresholds count flops in those.
  static constexpr double kFlopWeight = 16.0 / kLanes;
  // Outputs a row up to which row blocks beat packing (gather_gemm.cpp's automatic_path). On a
  // 2-core AMD EPYC of family 23 (AVX2) row blocks took 0.26-0.64x the direct path's time and
  // 0.1-0.8x the packed one's at K = 1 to 8 (float64: to 6; docs/performance/cpu.md, "Short
  // reductions and few outputs"). AVX-512's packed tiles are twice as wide, so more of them is
  // padding: on the 2-core AMX VM row blocks took 0.17-0.92x the packed path's time up to K = 20 in
  // float32 (0.65-1.12x at 24), 0.22-0.92x up to 12 in float16 (0.65-1.11x at 16) and 0.32-1.00x up
  // to 12 in float64 (0.75-1.35x at 16; docs/performance/cpu.md, "Row blocks on AVX-512").
  template <class In>
  static constexpr std::int64_t row_block_max_outputs() {
    if constexpr (GATHER_GEMM_VECTOR_BYTES == 64) return std::is_same_v<In, float> ? 20 : 12;
    return sizeof(Acc) == 8 ? 6 : 8;
  }
  // ... and the reduction they need beyond automatic_path's 4 elements an output. On AVX-512 a
  // reduction shorter than a vector or so leaves each output's 16-lane (float64: 8-lane) sum most
  // of the work, where the packed path's tiles are cheap: row blocks took 1.16-5.8x its time in
  // float64 at R*H = 4 to 12 (and 1.12-1.18x at 16 with K = 2 to 4), 1.07-1.9x in float32 up to 9
  // (0.95-1.13x at 12), 1.15-1.52x in float16 at 4 (and 8 with K = 2), at B = 1694 and K = 1 to 8
  // on the 2-core AMX VM; from these bounds they took 0.19-1.03x (1.12x in float16 at R*H = 32 with
  // K = 8; docs/performance/cpu.md, "Row blocks need a reduction on AVX-512"). On the AVX2 build
  // they paid from R*H = 4 (0.44-1.0x where automatic_path takes them).
  template <class In>
  static constexpr std::int64_t row_block_min_reduction() {
    if constexpr (GATHER_GEMM_VECTOR_BYTES == 64) return sizeof(In) == 2 ? 12 : 16;
    return 0;
  }
};

// The AVX-512 engine's packing and epilogue use avx512_helpers.hpp: a 16 x 16 transposition of
// 32-bit words, with 16-bit inputs widened to float32 on the way, 16 at a time (a scalar
// conversion of each element had made float16 calls take 1.6x float32's time).
#if GATHER_GEMM_VECTOR_BYTES == 64 && defined(GATHER_LINEAR_HAS_AVX512_HELPERS)
#define GATHER_GEMM_AVX512 1

// 16 consecutive values from src as float32 words for transpose_words_16x16: float32 read in
// place, 16-bit widened into `widened`.
template <class In>
inline const std::uint32_t* float_words(const In* src, float* widened) {
  if constexpr (std::is_same_v<In, float>) {
    return reinterpret_cast<const std::uint32_t*>(src);
  } else {
    _mm512_storeu_ps(widened, load16_as_float(src));
    return reinterpret_cast<const std::uint32_t*>(widened);
  }
}
#else
#define GATHER_GEMM_AVX512 0
#endif
#if GATHER_GEMM_VECTOR_BYTES == 32 && defined(GATHER_GEMM_HAS_X86_VARIANTS)
#define GATHER_GEMM_AVX2 1

// The AVX2 engine (compiled with F16C) widens 16-bit inputs 8 at a time (avx2_helpers.hpp's
// load8_as_float): a scalar conversion of each float16 element had made short float16 batches take
// 3-6x eager PyTorch's time on a Zen 3.
template <class In>
constexpr bool kLoads8AsFloat = std::is_same_v<In, Half> || std::is_same_v<In, BFloat16>;

// 8 float32 values rounded to T (Half or BFloat16), the bits to_half or to_bfloat16 gives, as
// avx512_helpers.hpp's round16_from_float does 16: float16 through VCVTPS2PH with each NaN first
// made the quiet NaN of its sign, bfloat16 on the integer bits.
template <class T>
inline __m128i round8_from_float(__m256 v) {
  if constexpr (std::is_same_v<T, Half>) {
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256 sign = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u))));
    const __m256 quiet = _mm256_or_ps(sign, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
    return _mm256_cvtps_ph(_mm256_blendv_ps(v, quiet, nan), _MM_FROUND_TO_NEAREST_INT);
  } else {
    static_assert(std::is_same_v<T, BFloat16>);
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), odd);
    const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
    const __m256i high = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
    return _mm_packus_epi32(_mm256_castsi256_si128(high), _mm256_extracti128_si256(high, 1));
  }
}

// out[u * out_stride + i] = rows[i][u] for 8 rows of 8 floats: two rounds of interleaving within
// 128-bit lanes, then one of lane swaps.
inline void transpose_8x8_ps(const __m256 (&rows)[8], float* out, std::int64_t out_stride) {
  __m256 pairs[8], quads[8];
  for (int i = 0; i < 8; i += 2) {
    pairs[i] = _mm256_unpacklo_ps(rows[i], rows[i + 1]);      // r_i[0] r_i+1[0] r_i[1] r_i+1[1] (per lane)
    pairs[i + 1] = _mm256_unpackhi_ps(rows[i], rows[i + 1]);  // r_i[2] r_i+1[2] r_i[3] r_i+1[3]
  }
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; ++h) {
      quads[i + 2 * h] = _mm256_shuffle_ps(pairs[i + h], pairs[i + 2 + h], 0x44);      // column 2h (per lane)
      quads[i + 2 * h + 1] = _mm256_shuffle_ps(pairs[i + h], pairs[i + 2 + h], 0xee);  // column 2h + 1
    }
  for (int u = 0; u < 4; ++u) {
    _mm256_storeu_ps(out + u * out_stride, _mm256_permute2f128_ps(quads[u], quads[4 + u], 0x20));
    _mm256_storeu_ps(out + (u + 4) * out_stride, _mm256_permute2f128_ps(quads[u], quads[4 + u], 0x31));
  }
}

// out[u * out_stride + i] = rows[i][u] for 4 rows of 4 doubles: pairs interleaved within 128-bit
// lanes, then the lanes swapped.
inline void transpose_4x4_pd(const __m256d (&rows)[4], double* out, std::int64_t out_stride) {
  const __m256d low01 = _mm256_unpacklo_pd(rows[0], rows[1]), high01 = _mm256_unpackhi_pd(rows[0], rows[1]);
  const __m256d low23 = _mm256_unpacklo_pd(rows[2], rows[3]), high23 = _mm256_unpackhi_pd(rows[2], rows[3]);
  _mm256_storeu_pd(out, _mm256_permute2f128_pd(low01, low23, 0x20));
  _mm256_storeu_pd(out + out_stride, _mm256_permute2f128_pd(high01, high23, 0x20));
  _mm256_storeu_pd(out + 2 * out_stride, _mm256_permute2f128_pd(low01, low23, 0x31));
  _mm256_storeu_pd(out + 3 * out_stride, _mm256_permute2f128_pd(high01, high23, 0x31));
}
#else
#define GATHER_GEMM_AVX2 0
#endif

// One element converted, for what vectors leave over in packing and epilogues: float16 through
// F16C's scalar instructions on AVX-512 and AVX2 (core/numeric.hpp's portable to_float and
// to_half, branches and all, had made such remainders most of a narrow float16 call), and a
// float32 result rounded straight to its 16-bit type (store_as takes a double, rounded to odd
// first, which a float leaves as it is).
template <class Acc, class In>
inline Acc widen_one(In v) {
#if GATHER_GEMM_AVX512 || GATHER_GEMM_AVX2
  if constexpr (std::is_same_v<In, Half>) return static_cast<Acc>(_cvtsh_ss(v.bits));
#endif
  return load_as<Acc>(v);
}

template <class Out, class Acc>
inline Out round_one(Acc v) {
  if constexpr (std::is_same_v<Acc, float> && std::is_same_v<Out, Half>) {
#if GATHER_GEMM_AVX512 || GATHER_GEMM_AVX2
    if (v == v) return {static_cast<std::uint16_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT))};
#endif
    return to_half(v);  // and a NaN the quiet NaN of its sign, as the vector roundings make it
  } else if constexpr (std::is_same_v<Acc, float> && std::is_same_v<Out, BFloat16>) {
    return to_bfloat16(v);
  } else {
    return store_as<Out>(v);
  }
}

#if GATHER_GEMM_AVX2
// y[j] = T(c[j] + bias[j]) for j < n (no bias where it is null), rounded as to_half or
// to_bfloat16 round: 8 at a time, the rest one by one.
template <class T>
inline void round_row8_from_float(const float* c, const T* bias, T* y, int n) {
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 sum = _mm256_loadu_ps(c + j);
    if (bias != nullptr) sum = _mm256_add_ps(sum, load8_as_float(bias + j));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + j), round8_from_float<T>(sum));
  }
  for (; j < n; ++j) y[j] = round_one<T>(c[j] + (bias != nullptr ? widen_one<float>(bias[j]) : 0.f));
}
#endif

// One SIMD register of accumulators (GCC's vector extension: a `using` alias would drop the
// attribute on a dependent type).
template <class Acc>
struct Vector {
  typedef Acc type __attribute__((vector_size(GATHER_GEMM_VECTOR_BYTES)));
};
template <class Acc>
using VectorOf = typename Vector<Acc>::type;

// Where a micro-kernel's broadcast values come from: A's packed MR-tall panel, a[kk * MR + i] ...
template <class Acc>
struct PackedPanel {
  const Acc* a;
  Acc operator()(int kk, int i) const { return a[kk * Tiling<Acc>::MR + i]; }
  // A's panel streams from L2 too. Where a step reads a cache line of it or more (AVX-512 float64:
  // 96 bytes) it is fetched 16 steps ahead: 0.92-0.94x the time at R*H = 1024 and 4096 on the
  // 2-core AMX VM. Narrower steps gain nothing (AVX-512 float32 and float16 0.97-1.01x; AVX2
  // float32, 24 bytes a step, 1.04x at (12, 1278, 30, 900)).
  void prefetch(int kk) const {
    if constexpr (Tiling<Acc>::MR * sizeof(Acc) >= 64) {
      const auto ahead = reinterpret_cast<std::uintptr_t>(a) + (kk + 16) * Tiling<Acc>::MR * sizeof(Acc);
      __builtin_prefetch(reinterpret_cast<const void*>(ahead), 0, 3);
    }
  }
};
// ... or rows read in place, `stride` apart, each along a unit stride (the weight's, on the
// weight-rows path).
template <class In, class Acc>
struct RowsInPlace {
  const In* rows;
  std::int64_t stride;
  Acc operator()(int kk, int i) const { return widen_one<Acc>(rows[i * stride + kk]); }
  void prefetch(int) const {}  // rows read in place: the weight-rows path fetches none ahead
};

// What a micro-kernel fetches into L2 for the kernels after it: nothing ...
struct NothingAhead {
  void operator()(int) const {}
};
// ... or its share of the next weight panel's slice from `at`, a 64-byte line every 2^shift steps.
struct PanelAhead {
  std::uintptr_t at;
  int shift;
  void operator()(int kk) const {
    if ((kk & ((1 << shift) - 1)) == 0)
      __builtin_prefetch(reinterpret_cast<const void*>(at + (static_cast<std::uintptr_t>(kk) >> shift) * 64), 0, 2);
  }
};

// The first Rows rows of the broadcast values a(kk, i) times the first Vectors vectors of the
// NR-wide panel b over kc reduction steps, each of the tile's vectors handed to store(i, v, sum):
// row i, columns [v * kLanes, (v + 1) * kLanes).
template <class Acc, int Rows = Tiling<Acc>::MR, int Vectors = Tiling<Acc>::kVectorsPerRow, class Broadcasts,
          class Store, class Ahead = NothingAhead>
inline void micro_kernel(int kc, Broadcasts a, const Acc* __restrict b, Store&& store, Ahead l2_ahead = {}) {
  using T = Tiling<Acc>;
  using Vec = VectorOf<Acc>;
  Vec acc[Rows][Vectors];
#pragma GCC unroll 16
  for (int i = 0; i < Rows; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < Vectors; ++v) acc[i][v] = Vec{};
#if GATHER_GEMM_AVX2
  // Four steps per iteration: 0.965-0.978x the time on a 2-core Zen 3, in one process against the
  // loop as written (docs/performance/cpu.md, "The AVX2 micro-kernel unrolled").
#pragma GCC unroll 4
#endif
  for (int kk = 0; kk < kc; ++kk) {
    Vec bv[Vectors];
#pragma GCC unroll 4
    for (int v = 0; v < Vectors; ++v) std::memcpy(&bv[v], b + kk * T::NR + v * T::kLanes, sizeof(Vec));
    // The weight's panel slice (32 KB in AVX-512) does not stay in L1 beside the streaming rows
    // of A: fetching it 16 steps ahead made float32 calls 5-9% faster (and A's panel on the
    // weight-rows path: 5.1-5.3 G FMAs a second against 4.7-4.8 in a stand-alone loop). A prefetch
    // never faults, so the last steps may name addresses past the panel (as integers, not pointers).
    const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(b + kk * T::NR) + 16 * T::NR * sizeof(Acc);
#pragma GCC unroll 4
    for (std::size_t line = 0; line < T::NR * sizeof(Acc); line += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(ahead + line), 0, 3);
    l2_ahead(kk);
    a.prefetch(kk);
#pragma GCC unroll 16
    for (int i = 0; i < Rows; ++i) {
      const Acc ai = a(kk, i);
#pragma GCC unroll 4
      for (int v = 0; v < Vectors; ++v) acc[i][v] += ai * bv[v];
    }
  }
  // Nothing that store reads may be loaded before the loop ends. At 6077838 GCC hoisted the bias
  // vectors of the tiles stored straight to y above it, and with two registers fewer the float64
  // loop reloaded its weight vectors from the stack every step: 0.73x the speed (test_cpu_codegen
  // guards the loops).
  asm volatile("" ::: "memory");
#pragma GCC unroll 16
  for (int i = 0; i < Rows; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < Vectors; ++v) store(i, v, acc[i][v]);
}

// micro_kernel for a tile of `rows` rows and `columns` columns, at most MR and NR: a tile short of
// rows runs a kernel of a third or two thirds of MR rows where those hold them (on AVX-512,
// 0.92-0.97x the engine's time where B leaves 1 to 6 rows in its last tile of 12, 2 threads on
// the AMX VM; AVX2's tiles of 6, 0.985-1.015x), and one short of columns a kernel of one vector
// where that holds them (0.88-0.92x at K = 40 to 100 on AVX-512; docs/performance/cpu.md, "A
// short last tile of rows, and of columns"). store sees only the rows and vectors computed.
template <class Acc, class Broadcasts, class Store, class Ahead = NothingAhead>
inline void micro_kernel_fitted(int kc, Broadcasts a, const Acc* __restrict b, int rows, int columns, Store&& store,
                                Ahead l2_ahead = {}) {
  using T = Tiling<Acc>;
  const auto with_rows = [&]<int Vectors>() {
    if constexpr (T::MR % 3 == 0) {
      if (rows <= T::MR / 3) return micro_kernel<Acc, T::MR / 3, Vectors>(kc, a, b, store, l2_ahead);
      if (rows <= 2 * T::MR / 3) return micro_kernel<Acc, 2 * T::MR / 3, Vectors>(kc, a, b, store, l2_ahead);
    }
    micro_kernel<Acc, T::MR, Vectors>(kc, a, b, store, l2_ahead);
  };
  if constexpr (T::kVectorsPerRow > 1)
    if (columns <= T::kLanes) return with_rows.template operator()<1>();
  with_rows.template operator()<T::kVectorsPerRow>();
}

// micro_kernel's first `rows` rows and `columns` columns (micro_kernel_fitted) into c (row stride
// ldc): c = (accumulate ? c : 0) + the product.
template <class Acc, class Ahead = NothingAhead>
inline void micro_kernel(int kc, const Acc* __restrict a, const Acc* __restrict b, Acc* __restrict c,
                         std::int64_t ldc, bool accumulate, int rows, int columns, Ahead l2_ahead = {}) {
  using T = Tiling<Acc>;
  const auto into_c = [&](int i, int v, VectorOf<Acc> sum) {
    Acc* to = c + i * ldc + v * T::kLanes;
    if (accumulate) {
      VectorOf<Acc> before;
      std::memcpy(&before, to, sizeof(before));
      sum += before;
    }
    std::memcpy(to, &sum, sizeof(sum));
  };
  micro_kernel_fitted<Acc>(kc, PackedPanel<Acc>{a}, b, rows, columns, into_c, l2_ahead);
}

// One NR-wide panel of weight rows starting at output k_first, columns [c_first, c_end) (out
// holds column c_first first), zero-padded past K. Walking c in the outer loop keeps the stores
// contiguous; the NR rows being read stay in L1.
template <class In, class Acc>
void pack_weight_panel(const Problem& p, std::int64_t k_first, std::int64_t c_first, std::int64_t c_end,
                       Acc* __restrict out) {
  constexpr int NR = Tiling<Acc>::NR;
  const In* rows[NR];
  const int valid = static_cast<int>(std::min<std::int64_t>(NR, p.K - k_first));
  for (int j = 0; j < valid; ++j) rows[j] = static_cast<const In*>(p.weight) + (k_first + j) * p.weight_stride_k;
  const std::int64_t stride_c = p.weight_stride_c;  // 1, except in the backward's transposed views
  std::int64_t c = c_first;
#if GATHER_GEMM_AVX512
  // Rows along a unit stride: blocks transposed in registers, 16 x 16 32-bit words (float32, the
  // 16-bit types widened) or 8 x 8 float64 words (one element at a time, packing took about a
  // tenth of a call whose batch is short).
  if constexpr ((kLoads16AsFloat<In> && NR % 16 == 0) || (std::is_same_v<In, double> && NR % 8 == 0))
    if (stride_c == 1) {
      constexpr int kBlock = std::is_same_v<In, double> ? 8 : 16;
      for (; c + kBlock <= c_end; c += kBlock)
        for (int j0 = 0; j0 < NR; j0 += kBlock) {
          const int last = std::min(j0 + kBlock, valid);  // rows from `last` on read as zeros
          Acc* dst = out + (c - c_first) * NR + j0;
          if constexpr (std::is_same_v<In, double>) {
            const double* block[8] = {};
            for (int j = j0; j < last; ++j) block[j - j0] = rows[j] + c;
            transpose_doublewords_8x8(block, dst, NR);
          } else {
            const std::uint32_t* words[16] = {};
            alignas(64) float widened[16][16];
            for (int j = j0; j < last; ++j) words[j - j0] = float_words(rows[j] + c, widened[j - j0]);
            transpose_words_16x16(words, reinterpret_cast<std::uint32_t*>(dst), NR);
          }
        }
    }
#elif GATHER_GEMM_AVX2
  // float32 and 16-bit rows along a unit stride: 8 x 8 blocks (16-bit ones widened 8 at a time)
  // transposed in registers.
  if constexpr ((std::is_same_v<In, float> || kLoads8AsFloat<In>) && std::is_same_v<Acc, float> && NR % 8 == 0)
    if (stride_c == 1)
      for (; c + 8 <= c_end; c += 8)
        for (int j0 = 0; j0 < NR; j0 += 8) {
          __m256 block[8];
          for (int j = 0; j < 8; ++j) {
            if (j0 + j >= valid)
              block[j] = _mm256_setzero_ps();
            else if constexpr (std::is_same_v<In, float>)
              block[j] = _mm256_loadu_ps(rows[j0 + j] + c);
            else
              block[j] = load8_as_float(rows[j0 + j] + c);
          }
          transpose_8x8_ps(block, out + (c - c_first) * NR + j0, NR);
        }
  // float64 rows along a unit stride: 4 x 4 blocks transposed in registers.
  if constexpr (std::is_same_v<In, double> && NR % 4 == 0)
    if (stride_c == 1)
      for (; c + 4 <= c_end; c += 4)
        for (int j0 = 0; j0 < NR; j0 += 4) {
          __m256d block[4];
          for (int j = 0; j < 4; ++j)
            block[j] = j0 + j < valid ? _mm256_loadu_pd(rows[j0 + j] + c) : _mm256_setzero_pd();
          transpose_4x4_pd(block, out + (c - c_first) * NR + j0, NR);
        }
#endif
  if (p.weight_stride_k == 1 && stride_c != 1) {
    // Rows side by side (the backward's transposed views): each step of the panel is one
    // contiguous run of `valid` elements.
    for (; c < c_end; ++c) {
      Acc* dst = out + (c - c_first) * NR;
      const In* src = rows[0] + c * stride_c;
      if constexpr (std::is_same_v<In, Acc>)
        if (valid == NR) {
          std::memcpy(dst, src, sizeof(Acc) * NR);  // a fixed size: vector moves, not a call
          continue;
        }
#if GATHER_GEMM_AVX512
      if constexpr (!std::is_same_v<In, Acc> && kLoads16AsFloat<In> && NR % 16 == 0)
        if (valid == NR) {
          for (int j = 0; j < NR; j += 16) _mm512_storeu_ps(dst + j, load16_as_float(src + j));
          continue;
        }
#elif GATHER_GEMM_AVX2
      if constexpr (kLoads8AsFloat<In> && std::is_same_v<Acc, float> && NR % 8 == 0)
        if (valid == NR) {
          for (int j = 0; j < NR; j += 8) _mm256_storeu_ps(dst + j, load8_as_float(src + j));
          continue;
        }
#endif
      for (int j = 0; j < valid; ++j) dst[j] = widen_one<Acc>(src[j]);
      for (int j = valid; j < NR; ++j) dst[j] = Acc(0);
    }
    return;
  }
  for (; c < c_end; ++c) {
    Acc* dst = out + (c - c_first) * NR;
    if (stride_c == 1)
      for (int j = 0; j < valid; ++j) dst[j] = widen_one<Acc>(rows[j][c]);
    else
      for (int j = 0; j < valid; ++j) dst[j] = widen_one<Acc>(rows[j][c * stride_c]);
    for (int j = valid; j < NR; ++j) dst[j] = Acc(0);
  }
}

// n elements along a unit stride as accumulators. 16-bit ones widened a vector at a time: with
// the epilogues' vector rounding, a float16 seed-sized call went from 11.2 to 4.0 us on AVX-512
// (docs/performance/cpu.md, "The direct path's 16-bit vectors").
template <class In, class Acc>
void widen_run(const In* src, std::int64_t n, Acc* __restrict out) {
  std::int64_t h = 0;
#if GATHER_GEMM_AVX512
  if constexpr (kLoads16AsFloat<In> && !std::is_same_v<In, float>) {
    for (; h + 16 <= n; h += 16) _mm512_storeu_ps(out + h, load16_as_float(src + h));
    if (h < n) {
      const int rest = static_cast<int>(n - h);
      _mm512_mask_storeu_ps(out + h, static_cast<__mmask16>((1u << rest) - 1), load_first_as_float(src + h, rest));
      return;
    }
  }
#elif GATHER_GEMM_AVX2
  if constexpr (kLoads8AsFloat<In> && std::is_same_v<Acc, float>)
    for (; h + 8 <= n; h += 8) _mm256_storeu_ps(out + h, load8_as_float(src + h));
#endif
  for (; h < n; ++h) out[h] = widen_one<Acc>(src[h]);
}

// Whether each slice of a gathered row ends where the next begins (x_stride_r == H * x_stride_h:
// x viewed from a head-major (B, R, H) buffer, say), so that the row is one run along
// x_stride_h: slices of one element had cost a loop each in the direct path, and a (B, R, 2)
// buffer had gone through the packing's scalar tail two columns at a time.
inline bool slices_adjacent(const Problem& p) { return p.x_stride_r == p.H * p.x_stride_h; }

// Columns [c0, c0 + n) of a gathered row of A in runs along x_stride_h: run(offset, first, length)
// for each, `offset` from the row's start in x, `first` counted from c0: the rest of a slice at a
// time, or all n at once where slices_adjacent. The slices are walked without a division a run
// (offsets computed from each run's column had taken 1.05-1.3x the time with one-element slices).
template <class Run>
inline void for_each_gathered_run(const Problem& p, std::int64_t c0, std::int64_t n, Run&& run) {
  if (slices_adjacent(p)) {
    if (n > 0) run(c0 * p.x_stride_h, std::int64_t{0}, n);
    return;
  }
  std::int64_t r = c0 / p.H, h = c0 % p.H;
  for (std::int64_t first = 0; first < n; ++r, h = 0) {
    const std::int64_t length = std::min(p.H - h, n - first);
    run(r * p.x_stride_r + h * p.x_stride_h, first, length);
    first += length;
  }
}

// Row b of A, all RH columns, contiguous (for the direct path and row blocks): one run where a
// single slice or slices_adjacent, else a slice at a time. (Through for_each_gathered_run, calls
// of one-element slices took 1.01-1.07x the time.)
template <class In, class Acc>
void pack_gathered_rows_to_line(const Problem& p, std::int64_t b, Acc* __restrict out) {
  const In* x = static_cast<const In*>(p.x) + b * p.x_stride_b;
  if (p.x_stride_h == 1 && (p.R == 1 || slices_adjacent(p))) {
    widen_run(x, p.RH, out);
    return;
  }
  for (std::int64_t r = 0; r < p.R; ++r) {
    if (p.x_stride_h == 1)
      widen_run(x + r * p.x_stride_r, p.H, out + r * p.H);
    else
      for (std::int64_t h = 0; h < p.H; ++h) out[r * p.H + h] = widen_one<Acc>(x[r * p.x_stride_r + h * p.x_stride_h]);
  }
}

// Gathers rows [b0, b0 + mc) x columns [c0, c0 + kc) of A straight from x into Height-tall panels
// (MR for the packed path; NR for the weight-rows path, whose vectors run along A's rows).
template <class In, class Acc, int Height = Tiling<Acc>::MR>
void pack_gathered_rows(const Problem& p, std::int64_t b0, int mc, std::int64_t c0, int kc, Acc* __restrict out) {
  const In* x = static_cast<const In*>(p.x);
#if GATHER_GEMM_AVX512
  // Rows along a unit stride: a panel's rows transposed in registers a block of columns at a time,
  // 16 x 16 32-bit words (float32, the 16-bit types widened) or 8 x 8 float64 words.
  if constexpr (kLoads16AsFloat<In> || std::is_same_v<In, double>)
    if (p.x_stride_h == 1) {
      constexpr int kColumns = std::is_same_v<In, double> ? 8 : 16;
      // dst[u * Height + i] = src[i * x_stride_b + u] for u < kColumns, rows from `rows` on zeros.
      const auto transpose_block = [&](const In* src, int rows, Acc* dst) {
        for (int i1 = 0; i1 < Height; i1 += kColumns) {
          if constexpr (std::is_same_v<In, double>) {
            const double* block[8] = {};
            for (int i = i1; i < std::min(i1 + 8, rows); ++i) block[i - i1] = src + i * p.x_stride_b;
            transpose_doublewords_8x8(block, dst + i1, Height, std::min(8, Height - i1));
          } else {
            const std::uint32_t* words[16] = {};
            alignas(64) float widened[std::min(Height, 16)][16];
            for (int i = i1; i < std::min(i1 + 16, rows); ++i) words[i - i1] = float_words(src + i * p.x_stride_b, widened[i - i1]);
            transpose_words_16x16(words, reinterpret_cast<std::uint32_t*>(dst + i1), Height, std::min(16, Height - i1));
          }
        }
      };
      for (int i0 = 0; i0 < mc; i0 += Height) {
        Acc* panel = out + (i0 / Height) * kc * Height;
        const int rows = std::min(Height, mc - i0);
        for_each_gathered_run(p, c0, kc, [&](std::int64_t offset, std::int64_t kk, std::int64_t run) {
          const In* src = x + (b0 + i0) * p.x_stride_b + offset;
          std::int64_t t = 0;
          for (; t + kColumns <= run; t += kColumns) transpose_block(src + t, rows, panel + (kk + t) * Height);
          for (; t < run; ++t) {
            Acc* dst = panel + (kk + t) * Height;
            for (int i = 0; i < rows; ++i) dst[i] = widen_one<Acc>(src[i * p.x_stride_b + t]);
            for (int i = rows; i < Height; ++i) dst[i] = Acc(0);
          }
        });
      }
      return;
    }
#endif
  if (p.x_stride_b == 1) {
    // Rows side by side (the backward's grad_y^T, or an x stored (R, H, B)): each step is one
    // contiguous run of mc elements, cut into the panels (reading each run once, in order).
    const int full = mc / Height * Height;
    for_each_gathered_run(p, c0, kc, [&](std::int64_t offset, std::int64_t kk, std::int64_t run) {
      const In* src = x + b0 + offset;
      for (std::int64_t t = 0; t < run; ++t) {
        const In* step = src + t * p.x_stride_h;
        // The step's mc values as accumulators: in place, or widened (16 at a time on AVX-512).
        const Acc* line = nullptr;
        alignas(64) Acc widened[Tiling<Acc>::MC];  // mc <= MC: one block's rows
        if constexpr (std::is_same_v<In, Acc>) {
          line = step;
        } else {
          int i = 0;
#if GATHER_GEMM_AVX512
          if constexpr (kLoads16AsFloat<In>)
            for (; i + 16 <= mc; i += 16) _mm512_store_ps(widened + i, load16_as_float(step + i));
#elif GATHER_GEMM_AVX2
          if constexpr (kLoads8AsFloat<In> && std::is_same_v<Acc, float>)
            for (; i + 8 <= mc; i += 8) _mm256_store_ps(widened + i, load8_as_float(step + i));
#endif
          for (; i < mc; ++i) widened[i] = widen_one<Acc>(step[i]);
          line = widened;
        }
        Acc* dst = out + (kk + t) * Height;
        int i0 = 0;
        for (; i0 < full; i0 += Height, dst += kc * Height) std::memcpy(dst, line + i0, sizeof(Acc) * Height);  // vector moves
        if (i0 < mc)
          for (int i = 0; i < Height; ++i) dst[i] = i0 + i < mc ? line[i0 + i] : Acc(0);
      }
    });
    return;
  }
  const int mc_padded = (mc + Height - 1) / Height * Height;
  for (int i = 0; i < mc_padded; ++i) {
    Acc* dst = out + (i / Height) * kc * Height + (i % Height);
    if (i >= mc) {
      for (int kk = 0; kk < kc; ++kk) dst[kk * Height] = Acc(0);
      continue;
    }
    const In* row = x + (b0 + i) * p.x_stride_b;
    for_each_gathered_run(p, c0, kc, [&](std::int64_t offset, std::int64_t kk, std::int64_t run) {
      const In* src = row + offset;
      if (p.x_stride_h == 1) {
        std::int64_t t = 0;
#if GATHER_GEMM_AVX2
        if constexpr (kLoads8AsFloat<In> && std::is_same_v<Acc, float>)
          for (; t + 8 <= run; t += 8) {
            alignas(32) float widened[8];
            _mm256_store_ps(widened, load8_as_float(src + t));
            for (int u = 0; u < 8; ++u) dst[(kk + t + u) * Height] = widened[u];
          }
#endif
        for (; t < run; ++t) dst[(kk + t) * Height] = widen_one<Acc>(src[t]);
      } else
        for (std::int64_t t = 0; t < run; ++t) dst[(kk + t) * Height] = widen_one<Acc>(src[t * p.x_stride_h]);
    });
  }
}

// y[b0 .. b0+mc, k_first .. k_first+n) = bias + c (row stride ldc), rounded to In.
template <class In, class Acc>
void store_rows(const Problem& p, const Acc* c, int ldc, std::int64_t b0, int mc, std::int64_t k_first, int n) {
  const In* bias = static_cast<const In*>(p.bias);
  In* y = static_cast<In*>(p.y);
  for (int i = 0; i < mc; ++i) {
    In* y_row = y + (b0 + i) * p.y_stride_b + k_first * p.y_stride_k;
    const Acc* c_row = c + i * ldc;
    const auto sum = [&](int j) { return round_one<In>(c_row[j] + (bias ? widen_one<Acc>(bias[k_first + j]) : Acc(0))); };
#if GATHER_GEMM_AVX512
    if constexpr (std::is_same_v<In, Half> || std::is_same_v<In, BFloat16>)
      if (p.y_stride_k == 1) {  // the compiler does not vectorize the rounding to 16 bits
        round_row_from_float(c_row, bias ? bias + k_first : nullptr, y_row, n);
        continue;
      }
#elif GATHER_GEMM_AVX2
    if constexpr (kLoads8AsFloat<In>)
      if (p.y_stride_k == 1) {  // the compiler does not vectorize the rounding to 16 bits
        round_row8_from_float(c_row, bias ? bias + k_first : nullptr, y_row, n);
        continue;
      }
#endif
    if (p.y_stride_k == 1)  // the forward's: a loop the compiler vectorizes
      for (int j = 0; j < n; ++j) y_row[j] = sum(j);
    else
      for (int j = 0; j < n; ++j) y_row[j * p.y_stride_k] = sum(j);
  }
}

// Loads L consecutive inputs as accumulators (16-bit ones widened L at a time on AVX-512 and AVX2).
template <class In, class Acc, class Vec>
inline Vec load_vector(const In* src) {
  constexpr int L = Tiling<Acc>::kLanes;
  Vec v;
  if constexpr (std::is_same_v<In, Acc>) {
    std::memcpy(&v, src, sizeof(Vec));
#if GATHER_GEMM_AVX512
  } else if constexpr (kLoads16AsFloat<In>) {
    const __m512 widened = load16_as_float(src);
    std::memcpy(&v, &widened, sizeof(Vec));
#elif GATHER_GEMM_AVX2
  } else if constexpr (kLoads8AsFloat<In> && std::is_same_v<Acc, float>) {
    const __m256 widened = load8_as_float(src);
    std::memcpy(&v, &widened, sizeof(Vec));
#endif
  } else {
    for (int i = 0; i < L; ++i) v[i] = widen_one<Acc>(src[i]);
  }
  return v;
}

// Whether store_vector rounds a vector at a time (elsewhere: one element at a time).
template <class In, class Acc>
constexpr bool kStoresVectors = std::is_same_v<In, Acc>
#if GATHER_GEMM_AVX512
                                || kLoads16AsFloat<In>
#elif GATHER_GEMM_AVX2
                                || (kLoads8AsFloat<In> && std::is_same_v<Acc, float>)
#endif
    ;

// Stores L accumulators to consecutive outputs, rounded to In as store_rows rounds them.
template <class In, class Acc, class Vec>
inline void store_vector(In* dst, Vec v) {
  if constexpr (std::is_same_v<In, Acc>) {
    std::memcpy(dst, &v, sizeof(Vec));
#if GATHER_GEMM_AVX512
  } else if constexpr (kLoads16AsFloat<In>) {
    __m512 sum;
    std::memcpy(&sum, &v, sizeof(Vec));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), round16_from_float<In>(sum));
#elif GATHER_GEMM_AVX2
  } else if constexpr (kLoads8AsFloat<In> && std::is_same_v<Acc, float>) {
    __m256 sum;
    std::memcpy(&sum, &v, sizeof(Vec));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), round8_from_float<In>(sum));
#endif
  } else {
    for (int i = 0; i < Tiling<Acc>::kLanes; ++i) dst[i] = round_one<In>(v[i]);
  }
}

// compute_tile's one-slice reduction where y runs along a unit stride in a type that
// store_vector rounds a vector at a time: each whole micro-tile goes from the registers to y with
// the bias added, not through c_buf to be written out and read back (0.60-0.98x the time on the
// 2-core AMX VM; 0.71-1.01x on the GPU host's 16-core Xeon, but for one call bound by writing y
// that kSameThreadsMaxReduction then set right; docs/performance/cpu.md, "Tiles stored straight
// to y, the same threads for short reductions, and slices of 512"). A block packed beforehand is
// read one row tile across a chunk of panels (kStoreChunkBytes of them, in L2) at a time, so that
// y is written MR rows at a time along their length: a panel at a time down all the task's rows
// had taken 1.1-1.4x the base's time with 1024 and 4096 rows. A task that packs its own panels
// (at most MC rows) keeps each panel in L1 for its row tiles (a chunk of them packed into L2 had
// taken 1.07-1.23x as long at 27 to 78 rows). Partial tiles go through c_buf (MR x NR).
template <class In, class Acc>
void store_tiles_to_y(const Problem& p, const Acc* packed_weight, std::int64_t k_block0, std::int64_t b0, int mc,
                      std::int64_t k0, int nc, Acc* __restrict a_buf, Acc* __restrict b_buf, Acc* __restrict c_buf) {
  using T = Tiling<Acc>;
  using Vec = VectorOf<Acc>;
  const int kc = static_cast<int>(p.RH);
  const In* bias = static_cast<const In*>(p.bias);
  In* y = static_cast<In*>(p.y);
  const std::int64_t ldy = p.y_stride_b;
  const int panels = (nc + T::NR - 1) / T::NR;
  const auto tile = [&](int ir, int q, const Acc* b) {
    const int rows = std::min(T::MR, mc - ir);
    const Acc* a = a_buf + ir * kc;
    const std::int64_t k_first = k0 + q * T::NR;
    const int columns = std::min(T::NR, nc - q * T::NR);
    if (rows < T::MR || columns < T::NR) {
      micro_kernel<Acc>(kc, a, b, c_buf, T::NR, false, rows, columns);
      store_rows<In, Acc>(p, c_buf, T::NR, b0 + ir, rows, k_first, columns);
      return;
    }
    Vec bias_v[T::kVectorsPerRow] = {};
    if (bias != nullptr)
      for (int v = 0; v < T::kVectorsPerRow; ++v) bias_v[v] = load_vector<In, Acc, Vec>(bias + k_first + v * T::kLanes);
    In* to = y + (b0 + ir) * ldy + k_first;
    // By value: the stores to y might otherwise alias what the lambda refers to.
    micro_kernel<Acc>(kc, PackedPanel<Acc>{a}, b, [&bias_v, to, ldy](int i, int v, Vec sum) {
      store_vector<In, Acc>(to + i * ldy + v * T::kLanes, sum + bias_v[v]);
    });
  };
  pack_gathered_rows<In, Acc>(p, b0, mc, 0, kc, a_buf);
  if (packed_weight == nullptr) {
    for (int q = 0; q < panels; ++q) {
      pack_weight_panel<In, Acc>(p, k0 + q * T::NR, 0, kc, b_buf);
      for (int ir = 0; ir < mc; ir += T::MR) tile(ir, q, b_buf);
    }
    return;
  }
  const std::int64_t panel_elems = std::int64_t{kc} * T::NR;
  const Acc* first = packed_weight + (k0 - k_block0) / T::NR * panel_elems;
  const int chunk_panels =
      std::clamp(static_cast<int>(T::kStoreChunkBytes / (panel_elems * std::int64_t{sizeof(Acc)})), 1, panels);
  for (int q0 = 0; q0 < panels; q0 += chunk_panels)
    for (int ir = 0; ir < mc; ir += T::MR)
      for (int q = q0; q < std::min(q0 + chunk_panels, panels); ++q) tile(ir, q, first + q * panel_elems);
}

// y[b0 .. b0+mc, k0 .. k0+nc) = bias + A_rows * W_cols^T, reading the packed weight block that
// starts at output k_block0, or with a null packed_weight packing each panel's slice into b_buf
// just before its micro-kernels. a_buf holds MC*KC, b_buf KC*NR and c_buf mc_padded*nc_padded
// accumulators.
template <class In, class Acc>
void compute_tile(const Problem& p, const Acc* packed_weight, std::int64_t k_block0, std::int64_t b0, int mc,
                  std::int64_t k0, int nc, Acc* __restrict a_buf, Acc* __restrict b_buf, Acc* __restrict c_buf) {
  using T = Tiling<Acc>;
  const int nc_padded = (nc + T::NR - 1) / T::NR * T::NR;
  const int mc_padded = (mc + T::MR - 1) / T::MR * T::MR;
  const auto panel = [&](std::int64_t c0, int kc, int jr) {
    if (packed_weight != nullptr) return packed_weight + ((k0 - k_block0 + jr) / T::NR) * p.RH * T::NR + c0 * T::NR;
    pack_weight_panel<In, Acc>(p, k0 + jr, c0, c0 + kc, b_buf);
    return static_cast<const Acc*>(b_buf);
  };
  if (p.RH > 0 && p.RH <= T::KC) {
    const int kc = static_cast<int>(p.RH);
    if constexpr (kStoresVectors<In, Acc>)
      if (p.y_stride_k == 1) {
        store_tiles_to_y<In, Acc>(p, packed_weight, k_block0, b0, mc, k0, nc, a_buf, b_buf, c_buf);
        return;
      }
    // One slice: the tiles are stored to y a chunk of columns at a time, while the chunk's tiles
    // are still in L2, rather than all of mc x nc being written out and read back.
    const int chunk = std::max(T::NR, static_cast<int>(T::kStoreChunkBytes / (mc_padded * sizeof(Acc))) / T::NR * T::NR);
    pack_gathered_rows<In, Acc>(p, b0, mc, 0, kc, a_buf);
    for (int j0 = 0; j0 < nc_padded; j0 += chunk) {
      const int width = std::min(chunk, nc_padded - j0);
      for (int jr = j0; jr < j0 + width; jr += T::NR) {
        const Acc* b_panel = panel(0, kc, jr);
        for (int ir = 0; ir < mc_padded; ir += T::MR)
          micro_kernel<Acc>(kc, a_buf + ir * kc, b_panel, c_buf + ir * width + (jr - j0), width, false, mc - ir,
                            nc - jr);
      }
      store_rows<In, Acc>(p, c_buf, width, b0, mc, k0 + j0, std::min(width, nc - j0));
    }
    return;
  }
  // Every micro-tile of c_buf is written by the first slice: no clearing, unless there is none.
  if (p.RH == 0) std::memset(c_buf, 0, sizeof(Acc) * static_cast<std::size_t>(mc_padded) * nc_padded);
  for (std::int64_t c0 = 0; c0 < p.RH; c0 += T::KC) {
    const int kc = static_cast<int>(std::min<std::int64_t>(T::KC, p.RH - c0));
    pack_gathered_rows<In, Acc>(p, b0, mc, c0, kc, a_buf);
    // The packed block's next panel slice is read from L3 or memory by its first row tile: on
    // AVX-512, while this panel's tiles run, each fetches its share of the next one into L2 (engine
    // A/B on the 2-core AMX VM, R*H of 1024 to 4096: 0.94-0.96x the time on 2 threads, 0.93-0.98x
    // on one). The AVX2 build on that VM was mixed (0.93-0.97x on five problems, 1.01-1.06x at K =
    // 900 on three), and no AVX2 processor was at hand to decide.
    constexpr bool kFetchesNextPanel = GATHER_GEMM_VECTOR_BYTES == 64;
    const int tiles = mc_padded / T::MR;
    const int share = kc * T::NR * static_cast<int>(sizeof(Acc)) / tiles;
    const int share_lines = (share + 63) / 64;
    int shift = 0;  // the fewest steps a line that still cover the share
    while ((kc >> (shift + 1)) >= share_lines) ++shift;
    for (int jr = 0; jr < nc_padded; jr += T::NR) {
      const Acc* b_panel = panel(c0, kc, jr);
      if (kFetchesNextPanel && packed_weight != nullptr && jr + T::NR < nc_padded) {
        const auto next = reinterpret_cast<std::uintptr_t>(b_panel + p.RH * T::NR);
        for (int ir = 0; ir < mc_padded; ir += T::MR)
          micro_kernel<Acc>(kc, a_buf + ir * kc, b_panel, c_buf + ir * nc_padded + jr, nc_padded, c0 > 0, mc - ir,
                            nc - jr, PanelAhead{next + static_cast<std::uintptr_t>(ir / T::MR * share), shift});
      } else {
        for (int ir = 0; ir < mc_padded; ir += T::MR)
          micro_kernel<Acc>(kc, a_buf + ir * kc, b_panel, c_buf + ir * nc_padded + jr, nc_padded, c0 > 0, mc - ir,
                            nc - jr);
      }
    }
  }
  store_rows<In, Acc>(p, c_buf, nc_padded, b0, mc, k0, nc);
}

// One round of lane_sums for L lanes in groups of Group: lane i of a pair's result sums half-group
// i % (Group / 2) of group i / (Group / 2), the first vector's groups before the second's. The two
// shuffle patterns (lower halves, then upper), as indices into the pair.
template <class Index, int L, int Group>
constexpr std::array<Index, 2 * L> halving_indices() {
  std::array<Index, 2 * L> m{};
  const int half = Group / 2, groups = L / Group;
  for (int i = 0; i < L; ++i) {
    const int q = i / half, o = i % half;
    m[i] = static_cast<Index>(q < groups ? q * Group + o : L + (q - groups) * Group + o);
    m[L + i] = static_cast<Index>(m[i] + half);
  }
  return m;
}

template <class Acc, class Vec, int Group, int Vectors>
inline void halve_groups(Vec* v) {
  if constexpr (Group > 1) {
    constexpr int L = Tiling<Acc>::kLanes;
    using Index = std::conditional_t<sizeof(Acc) == 4, std::int32_t, std::int64_t>;
    typedef Index Mask __attribute__((vector_size(sizeof(Vec))));
    static constexpr std::array<Index, 2 * L> indices = halving_indices<Index, L, Group>();
    Mask lo, hi;
    std::memcpy(&lo, indices.data(), sizeof(Mask));
    std::memcpy(&hi, indices.data() + L, sizeof(Mask));
#pragma GCC unroll 16
    for (int m = 0; m < Vectors / 2; ++m)
      v[m] = __builtin_shuffle(v[2 * m], v[2 * m + 1], lo) + __builtin_shuffle(v[2 * m], v[2 * m + 1], hi);
    halve_groups<Acc, Vec, Group / 2, Vectors / 2>(v);
  }
}

// The lane sums of N accumulators at once, N a multiple of the lanes L: each round pairs the
// vectors and halves their groups of lanes (two two-source shuffles and an add a pair), so that
// log2(L) rounds leave N / L vectors of L sums, in the accumulators' order. Summed one accumulator
// at a time, a tree of shuffles each, the sums had cost as much as the multiply-adds of a short
// reduction.
template <class Acc, class Vec, int N>
inline void lane_sums(Vec (&v)[N], Acc* sums) {
  constexpr int L = Tiling<Acc>::kLanes;
  static_assert(N % L == 0);
  halve_groups<Acc, Vec, L, N>(v);
  std::memcpy(sums, v, sizeof(Vec) * (N / L));
}

// Gathered rows of A on the direct path: each padded with zeros to whole vectors, so that a
// reduction's last partial vector is one more vector step rather than a scalar tail.
template <class Acc>
std::int64_t direct_row_stride(std::int64_t RH) {
  constexpr int L = Tiling<Acc>::kLanes;
  return (RH + L - 1) / L * L;
}

// Rows b0 .. b0+rows of A gathered into buf, each padded with zeros to direct_row_stride.
template <class In, class Acc>
void gather_padded_rows(const Problem& p, std::int64_t b0, std::int64_t rows, Acc* __restrict buf) {
  const std::int64_t lda = direct_row_stride<Acc>(p.RH);
  for (std::int64_t i = 0; i < rows; ++i) {
    pack_gathered_rows_to_line<In, Acc>(p, b0 + i, buf + i * lda);
    std::fill(buf + i * lda + p.RH, buf + (i + 1) * lda, Acc(0));
  }
}

// On AVX-512 (and for float32 on AVX2) a weight row's last partial vector comes from masked
// loads; elsewhere it is copied element by element into a zeroed vector.
#if GATHER_GEMM_AVX512
template <class In> constexpr bool kMaskedWeightTail = kLoads16AsFloat<In>;
#elif GATHER_GEMM_AVX2
template <class In> constexpr bool kMaskedWeightTail = std::is_same_v<In, float>;
#else
template <class In> constexpr bool kMaskedWeightTail = false;
#endif

// How a direct-path tile walks the reduction: whole vectors, then the tail as one more vector step
// (A's gathered rows are padded with zeros to whole vectors, the weight rows' tail comes from
// weight_tail_vector) rather than a scalar tail per output (which had made odd slice widths, e.g.
// H = 13 or 21, take 2-3x the time of OpenBLAS's cat + sgemm). A float32 reduction shorter than
// one vector stays scalar where the tail is copied: the copy costs more than the few multiply-adds
// (1.16x the time at R*H = 7); float16 and bfloat16 gain (0.72x), and so does float32 with the
// masked load (0.31-0.47x at R*H = 7-15).
struct ReductionSplit {
  std::int64_t vectors_end;  // whole vectors of the reduction
  int tail;                  // elements after them
  bool vector_tail;          // the tail is one more vector step
  std::int64_t summed;       // elements the vector steps cover; the rest is summed per output
};
template <class In, class Acc>
ReductionSplit split_reduction(std::int64_t RH) {
  constexpr int L = Tiling<Acc>::kLanes;
  const std::int64_t vectors_end = RH / L * L;
  const int tail = static_cast<int>(RH - vectors_end);
  const bool vector_tail = tail > 0 && (kMaskedWeightTail<In> || !(std::is_same_v<In, Acc> && vectors_end == 0));
  return {vectors_end, tail, vector_tail, vector_tail ? RH : vectors_end};
}

// The first `tail` (below one vector) elements of a weight row from src, as a vector whose other
// lanes are zeros.
template <class In, class Acc, class Vec>
Vec weight_tail_vector(const In* src, int tail) {
  Vec v;
#if GATHER_GEMM_AVX512
  if constexpr (kMaskedWeightTail<In>) {
    // The element-wise copy had taken 1.1-1.5x the time of a whole call with odd slice widths in
    // float32, 1.1-1.6x in float16 and bfloat16; on AVX2 1.25-1.9x in float32
    // (docs/performance/cpu.md, "The weight's tail as a masked load").
    const __m512 part = load_first_as_float(src, tail);
    std::memcpy(&v, &part, sizeof(Vec));
    return v;
  }
#elif GATHER_GEMM_AVX2
  if constexpr (kMaskedWeightTail<In>) {  // VMASKMOVPS does not read, or fault on, masked-off lanes
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 part = _mm256_maskload_ps(src, _mm256_cmpgt_epi32(_mm256_set1_epi32(tail), lanes));
    std::memcpy(&v, &part, sizeof(Vec));
    return v;
  }
#endif
  Acc padded[Tiling<Acc>::kLanes] = {};
  for (int t = 0; t < tail; ++t) padded[t] = widen_one<Acc>(src[t]);
  std::memcpy(&v, padded, sizeof(Vec));
  return v;
}

// y[b0 .. b0+BT, k0 .. k0+kt) from BT gathered rows of A (`rows` the first, each
// direct_row_stride long) and kt <= KT weight rows along a unit stride, read once for the BT
// rows: vectors run along the reduction, KT * BT partial sums (4 along each weight row for a
// single row of A on a short reduction), added up at the end. Row blocks take KT below 4 where
// the weight has fewer rows.
template <class In, class Acc, int BT, int KT = 4>
void direct_tile(const Problem& p, const Acc* rows, std::int64_t b0, std::int64_t k0, int kt) {
  constexpr int L = Tiling<Acc>::kLanes;
  using Vec = VectorOf<Acc>;
  const In* w[KT];
  direct_tile_weight_rows(p, k0, kt, w);
  const Acc* a[BT];
  const std::int64_t lda = direct_row_stride<Acc>(p.RH);
  for (int i = 0; i < BT; ++i) a[i] = rows + i * lda;
  Vec acc[BT][KT] = {};
  // Elements past `summed` are added in the epilogue.
  const auto [vectors_end, tail, vector_tail, summed] = split_reduction<In, Acc>(p.RH);
  const auto weight_tail = [&](int j) { return weight_tail_vector<In, Acc, Vec>(w[j] + vectors_end, tail); };
  if (BT == 1 && p.RH <= kSingleRowStreamMaxReduction) {
    // A single row of A: the weight's rows one after another, four partial sums along each
    // (kSingleRowStreamMaxReduction says when one stream beats four).
    for (int j = 0; j < kt; ++j) {
      Vec part[4] = {};
      std::int64_t c = 0;
      for (; c + 4 * L <= p.RH; c += 4 * L)
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
          Vec av;
          std::memcpy(&av, a[0] + c + u * L, sizeof(Vec));
          part[u] += av * load_vector<In, Acc, Vec>(w[j] + c + u * L);
        }
      for (; c < vectors_end; c += L) {
        Vec av;
        std::memcpy(&av, a[0] + c, sizeof(Vec));
        part[0] += av * load_vector<In, Acc, Vec>(w[j] + c);
      }
      if (vector_tail) {
        Vec av;
        std::memcpy(&av, a[0] + vectors_end, sizeof(Vec));
        part[1] += av * weight_tail(j);
      }
      acc[0][j] = (part[0] + part[1]) + (part[2] + part[3]);
    }
  } else {
    for (std::int64_t c = 0; c < vectors_end; c += L) {
      Vec wv[KT];
#pragma GCC unroll 4
      for (int j = 0; j < KT; ++j) wv[j] = load_vector<In, Acc, Vec>(w[j] + c);
#pragma GCC unroll 4
      for (int i = 0; i < BT; ++i) {
        Vec av;
        std::memcpy(&av, a[i] + c, sizeof(Vec));
#pragma GCC unroll 4
        for (int j = 0; j < KT; ++j) acc[i][j] += av * wv[j];
      }
    }
    if (vector_tail) {  // unrolled like the loop above, so that acc stays in registers
      Vec wv[KT];
#pragma GCC unroll 4
      for (int j = 0; j < KT; ++j) wv[j] = weight_tail(j);
#pragma GCC unroll 4
      for (int i = 0; i < BT; ++i) {
        Vec av;
        std::memcpy(&av, a[i] + vectors_end, sizeof(Vec));
#pragma GCC unroll 4
        for (int j = 0; j < KT; ++j) acc[i][j] += av * wv[j];
      }
    }
  }
  // All accumulators' lane sums at once, with compile-time indices, so that the accumulators stay
  // in registers (indexed by the run-time kt, they had been kept on the stack, zeroed there with a
  // string store on every tile: 13% of a (4, 12, 32, 56) call). Padded to whole vectors of sums in
  // a copy: padding acc itself made single rows ~5% slower (a 16-vector accumulator to zero a tile).
  constexpr int kSums = (BT * KT + L - 1) / L * L;
  Vec all[kSums];
#pragma GCC unroll 16
  for (int n = 0; n < kSums; ++n) all[n] = n < BT * KT ? acc[n / KT][n % KT] : Vec{};
  Acc sums[kSums];
  lane_sums<Acc, Vec, kSums>(all, sums);
  const In* bias = static_cast<const In*>(p.bias);
  In* y = static_cast<In*>(p.y);
  if constexpr (std::is_same_v<Acc, float> && KT == 4)
    if (kt == KT && summed == p.RH && p.y_stride_k == 1) {
      // A row's 4 outputs at once (one at a time, this epilogue had taken a fifth of a seed-sized
      // float32 call): the sums of row i are sums[4i .. 4i+3]; 16-bit outputs rounded as a vector.
      typedef float Quad __attribute__((vector_size(16)));
      Quad bias4 = {};
      if (bias != nullptr)
        for (int j = 0; j < KT; ++j) bias4[j] = widen_one<float>(bias[k0 + j]);
      for (int i = 0; i < BT; ++i) {
        Quad row;
        std::memcpy(&row, sums + i * KT, sizeof(Quad));
        row += bias4;
        In* out = y + (b0 + i) * p.y_stride_b + k0;
        if constexpr (std::is_same_v<In, float>) {
          std::memcpy(out, &row, sizeof(Quad));
        } else {
#if GATHER_GEMM_AVX512
          const __m128i rounded = _mm256_castsi256_si128(round16_from_float<In>(_mm512_zextps128_ps512(row)));
          _mm_storel_epi64(reinterpret_cast<__m128i*>(out), rounded);
#elif GATHER_GEMM_AVX2
          _mm_storel_epi64(reinterpret_cast<__m128i*>(out), round8_from_float<In>(_mm256_zextps128_ps256(row)));
#else
          for (int j = 0; j < KT; ++j) out[j] = round_one<In>(row[j]);
#endif
        }
      }
      return;
    }
  for (int i = 0; i < BT; ++i)
    for (int j = 0; j < kt; ++j) {
      Acc sum = sums[i * KT + j];
      for (std::int64_t t = summed; t < p.RH; ++t) sum += a[i][t] * widen_one<Acc>(w[j][t]);
      y[(b0 + i) * p.y_stride_b + (k0 + j) * p.y_stride_k] =
          round_one<In>(sum + (bias ? widen_one<Acc>(bias[k0 + j]) : Acc(0)));
    }
}

// A single gathered row of A against as many weight rows at once as a vector has lanes (16 on
// AVX-512, 8 on AVX2): one accumulator each, one lane-sum round for all of them. Against short
// weight rows the 4-row tiles' setup and lane sums (12 of their 16 vectors zeros on AVX-512)
// outweighed their few multiply-adds.
template <class In, class Acc>
void single_row_tile(const Problem& p, const Acc* row, std::int64_t k0, int kt) {
  constexpr int L = Tiling<Acc>::kLanes, KT = L;
  using Vec = VectorOf<Acc>;
  const In* w[KT];
  direct_tile_weight_rows(p, k0, kt, w);
  const auto [vectors_end, tail, vector_tail, summed] = split_reduction<In, Acc>(p.RH);
  Vec acc[KT] = {};
  for (std::int64_t c = 0; c < vectors_end; c += L) {
    Vec av;
    std::memcpy(&av, row + c, sizeof(Vec));
#pragma GCC unroll 16
    for (int j = 0; j < KT; ++j) acc[j] += av * load_vector<In, Acc, Vec>(w[j] + c);
  }
  if (vector_tail) {
    Vec av;
    std::memcpy(&av, row + vectors_end, sizeof(Vec));
#pragma GCC unroll 16
    for (int j = 0; j < KT; ++j) acc[j] += av * weight_tail_vector<In, Acc, Vec>(w[j] + vectors_end, tail);
  }
  Acc sums[KT];
  lane_sums<Acc, Vec, KT>(acc, sums);
  const In* bias = static_cast<const In*>(p.bias);
  In* y = static_cast<In*>(p.y);
  if constexpr (!std::is_same_v<In, Acc>)
    if (summed == p.RH && p.y_stride_k == 1) {  // 16-bit outputs rounded a vector at a time
#if GATHER_GEMM_AVX512
      round_row_from_float(sums, bias == nullptr ? nullptr : bias + k0, y + k0, kt);
      return;
#elif GATHER_GEMM_AVX2
      round_row8_from_float(sums, bias == nullptr ? nullptr : bias + k0, y + k0, kt);
      return;
#endif
    }
  for (int j = 0; j < kt; ++j) {
    Acc sum = sums[j];
    for (std::int64_t t = summed; t < p.RH; ++t) sum += row[t] * widen_one<Acc>(w[j][t]);
    y[(k0 + j) * p.y_stride_k] = round_one<In>(sum + (bias ? widen_one<Acc>(bias[k0 + j]) : Acc(0)));
  }
}

#if GATHER_GEMM_AVX512
// Whether the direct path takes gathered_columns_tile (float32 and float64, AVX-512): reductions of
// up to a vector, where dotting rows leaves lanes idle and most of the time in lane sums. Against
// those tiles, on the 2-core AMX VM: 0.23-0.68x the time up to R*H = 8 in float32 and 6 in float64
// with 1 to 4 rows, 0.62-0.88x at R*H = 12 in float32; at a whole vector 0.39-0.76x with 2 to 4
// rows, but 0.91-1.16x (float64) and 1.16-1.30x (float32) with one, whose row fills the vector
// (docs/performance/cpu.md, "Short reductions as gathered weight columns").
template <class Acc>
constexpr bool gathered_columns_pay(std::int64_t B, std::int64_t RH) {
  constexpr std::int64_t L = Tiling<Acc>::kLanes;
  return RH < L || (RH == L && B >= 2);
}

// The intrinsics' register and mask types for a vector of Acc.
template <class Acc>
struct Avx512Register;
template <>
struct Avx512Register<float> {
  using type = __m512;
  using mask = __mmask16;
};
template <>
struct Avx512Register<double> {
  using type = __m512d;
  using mask = __mmask8;
};

// y[b0 + i, k0 .. k0+kt) for i < BT: column c of the weight's kt rows gathered into a vector (a
// lane per row, weight_stride_k apart) and multiplied by A[i, c] broadcast, so that the sums come
// out a vector of outputs at a time, with no lane sums. Needs the weight's rows along a unit stride,
// (L-1) * weight_stride_k below 2^31 (32-bit gather offsets) and y along a unit stride.
template <class Acc, int BT>
void gathered_columns_tile(const Problem& p, const Acc* rows, std::int64_t b0, std::int64_t k0, int kt) {
  using Vec = typename Avx512Register<Acc>::type;
  using Mask = typename Avx512Register<Acc>::mask;
  const Mask mask = static_cast<Mask>((1u << kt) - 1);
  const std::int64_t lda = direct_row_stride<Acc>(p.RH);
  const Acc* w = static_cast<const Acc*>(p.weight) + k0 * p.weight_stride_k;
  const int stride = static_cast<int>(p.weight_stride_k);
  Vec acc[BT];
  for (int i = 0; i < BT; ++i) {
    if constexpr (std::is_same_v<Acc, float>)
      acc[i] = _mm512_setzero_ps();
    else
      acc[i] = _mm512_setzero_pd();
  }
  // Lane j reads row j: j * weight_stride_k elements on (16 lanes for float32, 8 for float64).
  const __m512i offsets16 = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(stride));
  const __m256i offsets8 = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));
  for (std::int64_t c = 0; c < p.RH; ++c) {
    Vec column;
    if constexpr (std::is_same_v<Acc, float>)
      column = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, offsets16, w + c, sizeof(float));
    else
      column = _mm512_mask_i32gather_pd(_mm512_setzero_pd(), mask, offsets8, w + c, sizeof(double));
#pragma GCC unroll 4
    for (int i = 0; i < BT; ++i) {
      if constexpr (std::is_same_v<Acc, float>)
        acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(rows[i * lda + c]), column, acc[i]);
      else
        acc[i] = _mm512_fmadd_pd(_mm512_set1_pd(rows[i * lda + c]), column, acc[i]);
    }
  }
  const Acc* bias = static_cast<const Acc*>(p.bias);
  Acc* y = static_cast<Acc*>(p.y);
  for (int i = 0; i < BT; ++i) {
    Acc* out = y + (b0 + i) * p.y_stride_b + k0;
    if constexpr (std::is_same_v<Acc, float>) {
      const __m512 sum = bias ? _mm512_add_ps(acc[i], _mm512_maskz_loadu_ps(mask, bias + k0)) : acc[i];
      _mm512_mask_storeu_ps(out, mask, sum);
    } else {
      const __m512d sum = bias ? _mm512_add_pd(acc[i], _mm512_maskz_loadu_pd(mask, bias + k0)) : acc[i];
      _mm512_mask_storeu_pd(out, mask, sum);
    }
  }
}

#pragma GCC diagnostic push
// GCC 12's lane broadcasts and extractions start from _mm512_undefined
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Row quads (float32 and float64 on AVX-512): a vector holds four rows of A, a 128-bit lane
// each, E = 4 (float32) or 2 (float64) consecutive reduction elements a lane; a weight row's E
// elements are broadcast to all four lanes. A multiply-add so advances 4 rows by 1 weight row by E
// elements, the work of one of direct_tile's (1 by 1 by 4E), but a row quad's 16 outputs against 4
// weight rows come out of 4 accumulators through operations within 128-bit lanes (quad_lane_sums:
// 9 of them; pair_lane_sums: 6), where direct_tile's 16 accumulators took 45 (float64: 42)
// two-source permutations and adds: on the seed problem, timed alone on a Zen 4, 0.6-0.9 us of
// lane sums beside 1.56 us of multiply-adds, where row quads took 1.57 us in all
// (docs/performance/cpu.md, "Row quads: lane sums within 128-bit lanes").
template <class Acc>
constexpr int kQuadLaneElements = 16 / static_cast<int>(sizeof(Acc));

// A's rows are gathered 4 at a time into `lines` (4 * direct_row_stride) and interleaved into
// `quads`: quad q holds rows 4q .. 4q+3 (rows past B as zeros), quads[(q * lda + c / E * 4 + i) * E
// + c % E] = A[4q + i, c] for lda = direct_row_stride(R*H) (zeros past R*H).
template <class Acc>
void gather_row_quads(const Problem& p, Acc* __restrict lines, Acc* __restrict quads) {
  const std::int64_t lda = direct_row_stride<Acc>(p.RH);
  for (std::int64_t q = 0; q < ceil_div(p.B, 4); ++q) {
    const int rows = static_cast<int>(std::min<std::int64_t>(4, p.B - 4 * q));
    gather_padded_rows<Acc, Acc>(p, 4 * q, rows, lines);
    std::fill(lines + rows * lda, lines + 4 * lda, Acc(0));
    interleave_row_quad(lines, lda * std::int64_t{sizeof(Acc)}, quads + q * 4 * lda);
  }
}

// y[4q .. 4q+4, k0 .. k0+kt) for the G row quads from q0 (rows past B not stored), kt <= 4 weight
// rows along a unit stride from k0.
template <class Acc, int G>
void row_quads_tile(const Problem& p, const Acc* quads, std::int64_t q0, std::int64_t k0, int kt) {
  using Vec = typename Avx512Register<Acc>::type;
  constexpr int E = kQuadLaneElements<Acc>;
  constexpr int KT = 4;
  const Acc* w[KT];
  direct_tile_weight_rows(p, k0, kt, w);
  const std::int64_t lda = direct_row_stride<Acc>(p.RH);
  const Acc* a = quads + q0 * 4 * lda;
  // A quad alone keeps 4 chains of multiply-adds, each of 4 cycles' latency on a Zen 4: it takes
  // two sets of accumulators, for alternate steps.
  constexpr int S = G == 1 ? 2 : 1;
  Vec acc[S][G][KT];
#pragma GCC unroll 2
  for (int s = 0; s < S; ++s)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
      for (int j = 0; j < KT; ++j) zmm_clear(acc[s][g][j]);
  const auto step = [&](auto set, std::int64_t c, auto weight_lane) {
    Vec av[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) av[g] = zmm_load(a + g * 4 * lda + 4 * c);
#pragma GCC unroll 4
    for (int j = 0; j < KT; ++j) {
      const Vec wv = weight_lane(j, c);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[set][g][j] = zmm_fmadd(av[g], wv, acc[set][g][j]);
    }
  };
  const auto whole_lane = [&](int j, std::int64_t c) { return broadcast_lane(w[j] + c); };
  const std::int64_t whole = p.RH / E * E;
  std::int64_t c = 0;
  for (; c + E * S <= whole; c += E * S) {
    step(std::integral_constant<int, 0>{}, c, whole_lane);
    if constexpr (S == 2) step(std::integral_constant<int, S - 1>{}, c + E, whole_lane);
  }
  if (c < whole) step(std::integral_constant<int, 0>{}, c, whole_lane);
  if (whole < p.RH) {  // the last elements, masked (A's quads hold zeros past them)
    const int tail = static_cast<int>(p.RH - whole);
    step(std::integral_constant<int, S - 1>{}, whole,
         [&](int j, std::int64_t) { return broadcast_first_of_lane(w[j] + whole, tail); });
  }
  if constexpr (S == 2)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
      for (int j = 0; j < KT; ++j) acc[0][g][j] = zmm_add(acc[0][g][j], acc[1][g][j]);
  const Acc* bias = static_cast<const Acc*>(p.bias);
  Acc* y = static_cast<Acc*>(p.y);
  // Sums of a quad against 4 weight rows, row-major: 16 floats in one vector, or 8 doubles in
  // each of two (weight rows 0-1, then 2-3), each with the bias of its columns.
  constexpr int kSumVectors = 4 / E;
  Vec bias_of[kSumVectors];
  for (int v = 0; v < kSumVectors; ++v) {
    const int columns = std::clamp(kt - v * E, 0, E);
    zmm_clear(bias_of[v]);
    if (bias != nullptr && columns > 0) bias_of[v] = broadcast_first_of_lane(bias + k0 + v * E, columns);
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    Vec sums[kSumVectors];
    if constexpr (E == 4) {
      sums[0] = quad_lane_sums(acc[0][g][0], acc[0][g][1], acc[0][g][2], acc[0][g][3]);
    } else {
      sums[0] = pair_lane_sums(acc[0][g][0], acc[0][g][1]);
      sums[1] = pair_lane_sums(acc[0][g][2], acc[0][g][3]);
    }
    for (int v = 0; v < kSumVectors; ++v) sums[v] = zmm_add(sums[v], bias_of[v]);
    const std::int64_t b0 = 4 * (q0 + g);
    const int rows = static_cast<int>(std::min<std::int64_t>(4, p.B - b0));
    if (kt == KT && p.y_stride_k == 1) {
      const auto store_row = [&]<int I>(std::integral_constant<int, I>) {
        if (I < rows)
          for (int v = 0; v < kSumVectors; ++v) store_lane<I>(y + (b0 + I) * p.y_stride_b + k0 + v * E, sums[v]);
      };
      store_row(std::integral_constant<int, 0>{});
      store_row(std::integral_constant<int, 1>{});
      store_row(std::integral_constant<int, 2>{});
      store_row(std::integral_constant<int, 3>{});
    } else {
      alignas(64) Acc s[kSumVectors][4 * E];
      for (int v = 0; v < kSumVectors; ++v) std::memcpy(s[v], &sums[v], sizeof(Vec));
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < kt; ++j) y[(b0 + i) * p.y_stride_b + (k0 + j) * p.y_stride_k] = s[j / E][E * i + j % E];
    }
  }
}

// Where the direct path takes row quads: block_tasks.hpp's bounds, unless gathered columns do.
template <class Acc>
constexpr bool direct_row_quads_pay(std::int64_t B, std::int64_t RH) {
  return row_quads_pay(B, RH) && !gathered_columns_pay<Acc>(B, RH);
}

// All of y on row quads: `buf` holds 4 gathered lines, then the quads (gather_row_quads); tiles of
// 4 weight rows go to the threads where `parallel`, each against up to 4 quads at a time.
template <class Acc>
void row_quads(const Problem& p, Acc* __restrict buf, bool parallel) {
  const std::int64_t lda = direct_row_stride<Acc>(p.RH);
  Acc* quads = buf + 4 * lda;
  gather_row_quads(p, buf, quads);
  for_each_direct_tile(ceil_div(p.B, 4), p.K, parallel, [&](auto G, std::int64_t q0, std::int64_t k0, int kt) {
    row_quads_tile<Acc, decltype(G)::value>(p, quads, q0, k0, kt);
  });
}
#pragma GCC diagnostic pop
#endif

// A single row of A takes single_row_tile up to this reduction length: on AVX-512 0.44-0.80x the
// time of the 4-row tiles at R*H = 9-256 on the Zen 4 VM, but about 2x at 1024, where 16 weight
// rows read side by side stream worse than one (docs/performance/cpu.md, "A single row against 16
// weight rows at once"); on AVX2 0.44-0.90x at R*H = 9-256 on a Zen 3 VM, and from 512 no clear
// gain beside that VM's noise ("A single row against 8 weight rows at once on AVX2").
constexpr std::int64_t kSingleRowTileMaxReduction = 256;

// The weight-rows path, for a weight large against the rows of A that reuse it (gather_gemm.cpp's
// automatic_path says where): y's tiles transposed. Each micro-tile multiplies MR weight rows, read
// in place along their unit stride, by NR rows of A from NR-wide panels into which all of A is
// packed once, at[panel][c][j] = A[panel * NR + j, c]; its outputs go to y transposed. The weight
// is read once and never packed (the packed path reads and writes it once more, then reads its
// packed copy once per block of MC rows). A tile walks the whole reduction: its MR weight rows stay
// in L1 or L2 while they meet every panel of A, and A's panels stay in L2.

// A's rows [panel * NR, panel * NR + NR) as panel `panel` of `at` (rows past B as zeros).
template <class In, class Acc>
void pack_rows_panel(const Problem& p, std::int64_t panel, Acc* at) {
  constexpr int NR = Tiling<Acc>::NR;
  const int rows = static_cast<int>(std::min<std::int64_t>(NR, p.B - panel * NR));
  pack_gathered_rows<In, Acc, NR>(p, panel * NR, rows, 0, static_cast<int>(p.RH), at + panel * p.RH * NR);
}

// y[b0 .. b0+columns, k0 .. k0+rows) = t transposed (t[i * NR + j] is y[b0 + j, k0 + i]), rounded
// to In. On AVX-512, whole blocks of 16 (float64: 8) rows of y go through the register
// transpositions that packing uses, stored under a mask where y runs along a unit stride.
template <class In, class Acc>
void store_transposed(const Problem& p, const Acc* t, std::int64_t b0, int columns, std::int64_t k0, int rows) {
  constexpr int NR = Tiling<Acc>::NR;
  In* y = static_cast<In*>(p.y) + b0 * p.y_stride_b + k0 * p.y_stride_k;
  int j0 = 0;
#if GATHER_GEMM_AVX512
  if constexpr (std::is_same_v<In, Acc>)
    if (p.y_stride_k == 1) {
      constexpr int kBlock = std::is_same_v<Acc, double> ? 8 : 16;
      for (; j0 + kBlock <= columns; j0 += kBlock)
        for (int i1 = 0; i1 < rows; i1 += kBlock) {
          Acc* out = y + j0 * p.y_stride_b + i1;
          if constexpr (std::is_same_v<Acc, double>) {
            const double* block[8] = {};
            for (int i = i1; i < std::min(i1 + 8, rows); ++i) block[i - i1] = t + i * NR + j0;
            transpose_doublewords_8x8(block, out, p.y_stride_b, std::min(8, rows - i1));
          } else {
            const std::uint32_t* words[16] = {};
            for (int i = i1; i < std::min(i1 + 16, rows); ++i)
              words[i - i1] = reinterpret_cast<const std::uint32_t*>(t + i * NR + j0);
            transpose_words_16x16(words, reinterpret_cast<std::uint32_t*>(out), p.y_stride_b, std::min(16, rows - i1));
          }
        }
    }
#endif
  for (int j = j0; j < columns; ++j)
    for (int i = 0; i < rows; ++i) y[j * p.y_stride_b + i * p.y_stride_k] = round_one<In>(t[i * NR + j]);
}

// y[b, k0 .. k0+MR) for the rows b of A's panels [panel0, panel0 + panels) (fewer outputs where K
// ends first), from the weight's rows [k0, k0 + MR) and A's packed panels `at`. The last tile's
// rows past K would be read past the weight: its rows are copied into w_tail (MR * RH inputs),
// zeros after them.
template <class In, class Acc>
void weight_rows_tiles(const Problem& p, std::int64_t k0, std::int64_t panel0, std::int64_t panels, const Acc* at,
                       In* w_tail) {
  using T = Tiling<Acc>;
  using Vec = VectorOf<Acc>;
  const int rows = static_cast<int>(std::min<std::int64_t>(T::MR, p.K - k0));
  const In* w = static_cast<const In*>(p.weight) + k0 * p.weight_stride_k;
  std::int64_t w_stride = p.weight_stride_k;
  if (rows < T::MR) {
    std::memset(static_cast<void*>(w_tail), 0, sizeof(In) * static_cast<std::size_t>(T::MR * p.RH));
    for (int i = 0; i < rows; ++i) std::memcpy(static_cast<void*>(w_tail + i * p.RH), w + i * w_stride, sizeof(In) * p.RH);
    w = w_tail;
    w_stride = p.RH;
  }
  const In* bias = static_cast<const In*>(p.bias);
  Acc bias_of[T::MR] = {};
  if (bias != nullptr)
    for (int i = 0; i < rows; ++i) bias_of[i] = widen_one<Acc>(bias[k0 + i]);
  alignas(64) Acc t[T::MR * T::NR];
  const auto into_t = [&](int i, int v, Vec sum) {
    sum += bias_of[i];
    std::memcpy(t + i * T::NR + v * T::kLanes, &sum, sizeof(sum));
  };
  const RowsInPlace<In, Acc> weight_rows{w, w_stride};
  const int kc = static_cast<int>(p.RH);
  for (std::int64_t b0 = panel0 * T::NR; b0 < std::min(p.B, (panel0 + panels) * T::NR); b0 += T::NR) {
    const Acc* panel = at + b0 * p.RH;
    const int columns = static_cast<int>(std::min<std::int64_t>(T::NR, p.B - b0));
    micro_kernel_fitted<Acc>(kc, weight_rows, panel, rows, columns, into_t);
    store_transposed<In, Acc>(p, t, b0, columns, k0, rows);
  }
}

// For problems whose weight packing would not pay: too small overall, or a batch too short for
// the packed weight to be reused (packing reads and writes the weight once more than the GEMM
// reads it). A's rows are gathered once into rows_buf (B * direct_row_stride accumulators); then
// each weight row is read once, straight from memory, against up to 4 rows of A at a time, 4
// weight rows a tile (a single row of A on AVX-512 against short weight rows: 16 weight rows a
// tile; float32 and float64 on AVX-512, where direct_row_quads_pay, up to 16 rows as 4 row quads);
// threads split the weight's rows.
template <class In, class Acc>
void direct_rows(const Problem& p, Acc* __restrict rows_buf) {
  const std::int64_t lda = direct_row_stride<Acc>(p.RH);
#if GATHER_GEMM_AVX512
  if constexpr (std::is_same_v<In, Acc>)
    if (p.weight_stride_c == 1 && direct_row_quads_pay<Acc>(p.B, p.RH)) {
      row_quads(p, rows_buf, direct_parallel_pays(p, Tiling<Acc>::kFlopWeight));
      return;
    }
#endif
  gather_padded_rows<In, Acc>(p, 0, p.B, rows_buf);
  if (p.weight_stride_c != 1) {
    // A transposed view in the backward: too small here to repay packing it.
    const In* bias = static_cast<const In*>(p.bias);
    In* y = static_cast<In*>(p.y);
    for (std::int64_t b = 0; b < p.B; ++b)
      for (std::int64_t k = 0; k < p.K; ++k) {
        const In* w = static_cast<const In*>(p.weight) + k * p.weight_stride_k;
        Acc sum = 0;
        for (std::int64_t c = 0; c < p.RH; ++c) sum += rows_buf[b * lda + c] * widen_one<Acc>(w[c * p.weight_stride_c]);
        y[b * p.y_stride_b + k * p.y_stride_k] = round_one<In>(sum + (bias ? widen_one<Acc>(bias[k]) : Acc(0)));
      }
    return;
  }
  const bool parallel = direct_parallel_pays(p, Tiling<Acc>::kFlopWeight);
#if GATHER_GEMM_AVX512
  if constexpr (std::is_same_v<In, Acc>)
    if (gathered_columns_pay<Acc>(p.B, p.RH) && p.y_stride_k == 1 &&
        p.weight_stride_k < (std::int64_t{1} << 31) / Tiling<Acc>::kLanes) {
      for_each_direct_tile<Tiling<Acc>::kLanes>(p.B, p.K, parallel, [&](auto rows, std::int64_t b0, std::int64_t k0,
                                                                          int kt) {
        gathered_columns_tile<Acc, decltype(rows)::value>(p, rows_buf + b0 * lda, b0, k0, kt);
      });
      return;
    }
#endif
#if GATHER_GEMM_AVX512 || GATHER_GEMM_AVX2
  if (p.B == 1 && p.RH <= kSingleRowTileMaxReduction) {
    constexpr int KT = Tiling<Acc>::kLanes;
    for_each_index(ceil_div(p.K, KT), parallel, [&](std::int64_t t) {
      single_row_tile<In, Acc>(p, rows_buf, t * KT, static_cast<int>(std::min<std::int64_t>(KT, p.K - t * KT)));
    });
    return;
  }
#endif
  const auto tiles = [&]<int KT>(std::integral_constant<int, KT>) {
    for_each_direct_tile<KT>(p.B, p.K, parallel, [&](auto rows, std::int64_t b0, std::int64_t k0, int kt) {
      direct_tile<In, Acc, decltype(rows)::value, KT>(p, rows_buf + b0 * lda, b0, k0, kt);
    });
  };
  using T = Tiling<Acc>;
  if (T::direct_tiles_fitted(p.B, p.RH)) return tiles(std::integral_constant<int, T::kDirectFittedWeightRows>{});
  tiles(std::integral_constant<int, 4>{});
}

// For problems of few outputs per row (K up to Tiling's row_block_max_outputs): y[b0 .. b0+rows)
// from those rows of A gathered into rows_buf (rows * direct_row_stride accumulators, a thread's
// own), each against all K weight rows. The weight is read once per block of rows and stays in cache; x is
// read once, a block of rows at a time that stays in cache for every 4 weight rows. (direct_rows
// gathers every row first and reads them all again for each 4 weight rows; the packed path
// spends NR lanes on fewer outputs.)
template <class In, class Acc>
void row_block(const Problem& p, std::int64_t b0, int rows, Acc* __restrict rows_buf) {
  const std::int64_t lda = direct_row_stride<Acc>(p.RH);
  gather_padded_rows<In, Acc>(p, b0, rows, rows_buf);
  // Tiles of exactly as many weight rows as there are (up to 4): no lane is spent on a repeated row.
  const auto tiles = [&]<int KT>(std::integral_constant<int, KT>, std::int64_t k0) {
    int i = 0;
    for (; i + 4 <= rows; i += 4) direct_tile<In, Acc, 4, KT>(p, rows_buf + i * lda, b0 + i, k0, KT);
    switch (rows - i) {
      case 3: direct_tile<In, Acc, 3, KT>(p, rows_buf + i * lda, b0 + i, k0, KT); break;
      case 2: direct_tile<In, Acc, 2, KT>(p, rows_buf + i * lda, b0 + i, k0, KT); break;
      case 1: direct_tile<In, Acc, 1, KT>(p, rows_buf + i * lda, b0 + i, k0, KT); break;
      default: break;
    }
  };
  // Where AVX2's 4 x 4 tiles would spill, tiles of 3 weight rows first (0.81-0.97x the time at
  // K = 4-8 with R*H from 256 in float32, from 64 in float64).
  std::int64_t k0 = 0;
  using T = Tiling<Acc>;
  constexpr int kFitted = T::kDirectFittedWeightRows;
  if (T::direct_tiles_fitted(rows, p.RH))
    for (; k0 + kFitted <= p.K; k0 += kFitted) tiles(std::integral_constant<int, kFitted>{}, k0);
  for (; k0 + 4 <= p.K; k0 += 4) tiles(std::integral_constant<int, 4>{}, k0);
  switch (p.K - k0) {
    case 3: tiles(std::integral_constant<int, 3>{}, k0); break;
    case 2: tiles(std::integral_constant<int, 2>{}, k0); break;
    case 1: tiles(std::integral_constant<int, 1>{}, k0); break;
    default: break;
  }
}

// The non-template entry points the driver calls (instantiating the templates in this region).
template <class In>
void pack_weight_panel_for(const Problem& p, std::int64_t k_first, void* out) {
  pack_weight_panel<In, AccumulatorOf<In>>(p, k_first, 0, p.RH, static_cast<AccumulatorOf<In>*>(out));
}
template <class In>
void compute_tile_for(const Problem& p, const void* packed_weight, std::int64_t k_block0, std::int64_t b0, int mc,
                      std::int64_t k0, int nc, void* a_buf, void* b_buf, void* c_buf) {
  using Acc = AccumulatorOf<In>;
  compute_tile<In, Acc>(p, static_cast<const Acc*>(packed_weight), k_block0, b0, mc, k0, nc,
                        static_cast<Acc*>(a_buf), static_cast<Acc*>(b_buf), static_cast<Acc*>(c_buf));
}

template <class In>
void pack_rows_panel_for(const Problem& p, std::int64_t panel, void* at) {
  pack_rows_panel<In, AccumulatorOf<In>>(p, panel, static_cast<AccumulatorOf<In>*>(at));
}
template <class In>
void weight_rows_tiles_for(const Problem& p, std::int64_t k0, std::int64_t panel0, std::int64_t panels, const void* at,
                           void* w_tail) {
  weight_rows_tiles<In, AccumulatorOf<In>>(p, k0, panel0, panels, static_cast<const AccumulatorOf<In>*>(at),
                                           static_cast<In*>(w_tail));
}

template <class In>
void direct_rows_for(const Problem& p, void* row_buf) {
  direct_rows<In, AccumulatorOf<In>>(p, static_cast<AccumulatorOf<In>*>(row_buf));
}

template <class In>
void row_block_for(const Problem& p, std::int64_t b0, int rows, void* rows_buf) {
  row_block<In, AccumulatorOf<In>>(p, b0, rows, static_cast<AccumulatorOf<In>*>(rows_buf));
}

template <class In>
Engine engine() {
  using T = Tiling<AccumulatorOf<In>>;
  constexpr std::int64_t few = T::template direct_few_rows<In>();
  return {{T::MR, T::NR, T::MC, T::KC, T::template direct_reduction_per_row<In>(few + 1),
           T::template direct_reduction_per_row<In>(few), few, T::kDirectWideRowsBytes,
           T::kDirectFittedMinReduction, T::kDirectBatchMaxRows, T::kDirectBatchMinReduction,
           T::template direct_batch_reduction_per_row<In>(), T::kFlopWeight, T::template row_block_max_outputs<In>(),
           T::template row_block_min_reduction<In>(), &T::weight_rows_max_rows, T::kWeightRowsMaxPanelsBytes},
          &pack_weight_panel_for<In>,
          &compute_tile_for<In>,
          &direct_rows_for<In>,
          &row_block_for<In>,
          &pack_rows_panel_for<In>,
          &weight_rows_tiles_for<In>};
}

#undef GATHER_GEMM_AVX512  // defined again by the next instruction set's inclusion
#undef GATHER_GEMM_AVX2
