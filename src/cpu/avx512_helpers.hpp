// AVX-512 helpers the CPU engines share, compiled for AVX-512 whatever the translation unit's
// target (callers run them only where the processor has AVX-512):
// - a 16 x 16 transposition of 32-bit words, for packing: the SIMD engine's weight panels and
//   gathered rows (one word a float), and the AMX kernel's weight panels and transposed gathers
//   (one word a pair of bfloat16), and one of 8 x 8 64-bit words for float64's;
// - 16-wide conversions between float32 and the 16-bit types, exact on the way in and rounded
//   as to_half and to_bfloat16 round on the way out (core/numeric.hpp), for packing and epilogues.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/numeric.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#define GATHER_LINEAR_HAS_AVX512_HELPERS 1

namespace gather_linear::cpu {

#pragma GCC push_options
#pragma GCC target("avx512f")
#pragma GCC diagnostic push
// GCC 12's unpack and conversion intrinsics start from _mm512_undefined
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// out[q * out_stride + j] = rows[j][q] for q < 16 and j < lanes: 16 rows of 16 words (a null row
// reads as zeros), two rounds of interleaving within 128-bit lanes, then two of lane shuffles.
// Each of the 16 output rows is written in its first `lanes` words only.
inline void transpose_words_16x16(const std::uint32_t* const rows[16], std::uint32_t* out, std::int64_t out_stride,
                                  int lanes = 16) {
  __m512i r[16], a[16], b[16];
  for (int j = 0; j < 16; ++j) r[j] = rows[j] ? _mm512_loadu_si512(rows[j]) : _mm512_setzero_si512();
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // b[4i + m], lane L: rows 4i .. 4i+3 of word 4L + m
    b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1u);
  const auto store = [&](int q, __m512i v) {
    if (lanes == 16)
      _mm512_storeu_si512(out + q * out_stride, v);
    else
      _mm512_mask_storeu_epi32(out + q * out_stride, mask, v);
  };
  for (int m = 0; m < 4; ++m) {
    const __m512i c0 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0x88), c1 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0xdd);
    const __m512i d0 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0x88);
    const __m512i d1 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0xdd);
    store(0 + m, _mm512_shuffle_i32x4(c0, d0, 0x88));
    store(4 + m, _mm512_shuffle_i32x4(c1, d1, 0x88));
    store(8 + m, _mm512_shuffle_i32x4(c0, d0, 0xdd));
    store(12 + m, _mm512_shuffle_i32x4(c1, d1, 0xdd));
  }
}

// out[q * out_stride + j] = rows[j][q] for q < 8 and j < lanes: the same for 8 rows of 8 64-bit
// words (a float64 a word), one round of interleaving within 128-bit lanes, then two of lane
// shuffles.
inline void transpose_doublewords_8x8(const double* const rows[8], double* out, std::int64_t out_stride,
                                      int lanes = 8) {
  __m512d r[8], a[8];
  for (int j = 0; j < 8; ++j) r[j] = rows[j] ? _mm512_loadu_pd(rows[j]) : _mm512_setzero_pd();
  for (int i = 0; i < 4; ++i) {  // a[2i + s], lane L: rows 2i and 2i+1 of word 2L + s
    a[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
  }
  const __mmask8 mask = static_cast<__mmask8>((1u << lanes) - 1u);
  const auto store = [&](int q, __m512d v) {
    if (lanes == 8)
      _mm512_storeu_pd(out + q * out_stride, v);
    else
      _mm512_mask_storeu_pd(out + q * out_stride, mask, v);
  };
  for (int s = 0; s < 2; ++s) {
    const __m512d c0 = _mm512_shuffle_f64x2(a[s], a[2 + s], 0x88), c1 = _mm512_shuffle_f64x2(a[s], a[2 + s], 0xdd);
    const __m512d d0 = _mm512_shuffle_f64x2(a[4 + s], a[6 + s], 0x88);
    const __m512d d1 = _mm512_shuffle_f64x2(a[4 + s], a[6 + s], 0xdd);
    store(0 + s, _mm512_shuffle_f64x2(c0, d0, 0x88));
    store(2 + s, _mm512_shuffle_f64x2(c1, d1, 0x88));
    store(4 + s, _mm512_shuffle_f64x2(c0, d0, 0xdd));
    store(6 + s, _mm512_shuffle_f64x2(c1, d1, 0xdd));
  }
}

// Lane n of the result: the sum of v[n]'s 16 lanes, with _mm512_reduce_add_ps's pairing (lanes
// i and i+8, then i and i+4, i and i+2, i and i+1), so bit for bit its sums; 16 of them for 15
// shuffle pairs and adds instead of 16 reductions of 4 rounds each.
inline __m512 lane_sums_16(const __m512 (&v)[16]) {
  // The last round leaves lane 4t + s holding the input 4s + t: feed the inputs in that order.
  __m512 pairs[8], quads[4], eighths[2];
  const auto input = [&](int n) { return v[4 * (n % 4) + n / 4]; };
  for (int m = 0; m < 8; ++m) {  // lanes 8u .. 8u+7: input 2m+u's lanes i + (i+8)
    const __m512 a = input(2 * m), b = input(2 * m + 1);
    pairs[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
  }
  for (int m = 0; m < 4; ++m)  // 128-bit lane t: input 4m+t's lanes i + (i+4)
    quads[m] = _mm512_add_ps(_mm512_shuffle_f32x4(pairs[2 * m], pairs[2 * m + 1], 0x88),
                             _mm512_shuffle_f32x4(pairs[2 * m], pairs[2 * m + 1], 0xdd));
  for (int m = 0; m < 2; ++m) {  // lane 4t + {0,1}: input 8m+t, {2,3}: input 8m+4+t; i + (i+2)
    const __m512d a = _mm512_castps_pd(quads[2 * m]), b = _mm512_castps_pd(quads[2 * m + 1]);
    eighths[m] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // i + (i+1): lane 4t + s from input 4s + t
  return _mm512_add_ps(_mm512_shuffle_ps(eighths[0], eighths[1], 0x88), _mm512_shuffle_ps(eighths[0], eighths[1], 0xdd));
}

// The types load16_as_float reads.
template <class T>
constexpr bool kLoads16AsFloat = std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// 16 consecutive values from src as float32, exactly (VCVTPH2PS for float16, a shift for bfloat16).
template <class T>
inline __m512 load16_as_float(const T* src) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(src);
  } else {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    if constexpr (std::is_same_v<T, Half>) return _mm512_cvtph_ps(bits);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
}

// The first `count` (below 16) values from src as float32, the other lanes zeros; nothing past
// them is read, so a row that ends at the edge of a page cannot fault. AVX512F has no masked
// 16-bit load: whole pairs come from a masked 32-bit one, an odd last value by a masked broadcast.
template <class T>
inline __m512 load_first_as_float(const T* src, int count) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), src);
  } else {
    const int pairs = count / 2;
    __m512i words = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << pairs) - 1), src);
    if (count % 2 != 0) {
      std::uint16_t last;
      std::memcpy(&last, src + count - 1, sizeof(last));
      words = _mm512_or_si512(words, _mm512_maskz_set1_epi32(static_cast<__mmask16>(1u << pairs), last));
    }
    const __m256i bits = _mm512_castsi512_si256(words);
    if constexpr (std::is_same_v<T, Half>) return _mm512_cvtph_ps(bits);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
}

// 16 float32 values rounded to T (Half or BFloat16), the bits to_half or to_bfloat16 gives: to
// nearest even, subnormals kept, a NaN quiet. float16 through VCVTPS2PH, each NaN first made the
// quiet NaN of its sign (VCVTPS2PH would keep payload bits); bfloat16 on the integer bits
// (VCVTNEPS2BF16 would flush subnormals to zero).
template <class T>
inline __m256i round16_from_float(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  if constexpr (std::is_same_v<T, Half>) {
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i sign = _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
    const __m512 quiet = _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_set1_epi32(0x7fc00000)));
    return _mm512_cvtps_ph(_mm512_mask_mov_ps(v, nan, quiet), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    static_assert(std::is_same_v<T, BFloat16>);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i quiet = _mm512_or_si512(bits, _mm512_set1_epi32(0x00400000));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_mask_mov_epi32(rounded, nan, quiet), 16));
  }
}

// y[j] = T(c[j] + bias[j]) for j < n (no bias where it is null), rounded as to_half or
// to_bfloat16 round: 16 at a time, the rest as one more vector stored under a mask (rounded one
// by one through core/numeric.hpp, the rest had cost more than a narrow float16 row's products).
template <class T>
inline void round_row_from_float(const float* c, const T* bias, T* y, int n) {
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 sum = _mm512_loadu_ps(c + j);
    if (bias != nullptr) sum = _mm512_add_ps(sum, load16_as_float(bias + j));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + j), round16_from_float<T>(sum));
  }
  if (j < n) {  // AVX512F's narrowing store takes a mask, its 16-bit stores do not
    const int rest = n - j;
    __m512 sum = load_first_as_float(c + j, rest);
    if (bias != nullptr) sum = _mm512_add_ps(sum, load_first_as_float(bias + j, rest));
    _mm512_mask_cvtepi32_storeu_epi16(y + j, static_cast<__mmask16>((1u << rest) - 1),
                                      _mm512_cvtepu16_epi32(round16_from_float<T>(sum)));
  }
}

// Lane (i, j) of the result: the four words of 128-bit lane i of a_j summed (so four vectors of
// four rows' partial sums, a row a lane, give those rows' sums against four columns, row-major).
inline __m512 quad_lane_sums(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  return _mm512_add_ps(_mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Lane (i, j) of the result: the two words of 128-bit lane i of a_j summed, j < 2.
inline __m512d pair_lane_sums(__m512d a0, __m512d a1) {
  return _mm512_add_pd(_mm512_unpacklo_pd(a0, a1), _mm512_unpackhi_pd(a0, a1));
}

// Overloads for the row-quad tiles, which take float32 or float64 vectors.
inline void zmm_clear(__m512& v) { v = _mm512_setzero_ps(); }
inline void zmm_clear(__m512d& v) { v = _mm512_setzero_pd(); }
inline __m512 zmm_load(const float* src) { return _mm512_loadu_ps(src); }
inline __m512d zmm_load(const double* src) { return _mm512_loadu_pd(src); }
inline __m512 zmm_fmadd(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
inline __m512d zmm_fmadd(__m512d a, __m512d b, __m512d c) { return _mm512_fmadd_pd(a, b, c); }
inline __m512 zmm_add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
inline __m512d zmm_add(__m512d a, __m512d b) { return _mm512_add_pd(a, b); }

// The 16 bytes at src (four floats, two doubles) in every 128-bit lane.
inline __m512 broadcast_lane(const float* src) { return _mm512_broadcast_f32x4(_mm_loadu_ps(src)); }
inline __m512d broadcast_lane(const double* src) {
  return _mm512_castps_pd(_mm512_broadcast_f32x4(_mm_loadu_ps(reinterpret_cast<const float*>(src))));
}

// The first `count` values of those, zeros after them; nothing past them is read.
inline __m512 broadcast_first_of_lane(const float* src, int count) {
  const __m512 part = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), src);
  return _mm512_shuffle_f32x4(part, part, 0);
}
inline __m512d broadcast_first_of_lane(const double* src, int count) {
  const __m512d part = _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << count) - 1), src);
  return _mm512_shuffle_f64x2(part, part, 0);
}

// 128-bit lane I of v stored at out.
template <int I>
inline void store_lane(float* out, __m512 v) {
  _mm_storeu_ps(out, _mm512_extractf32x4_ps(v, I));
}
template <int I>
inline void store_lane(double* out, __m512d v) {
  _mm_storeu_ps(reinterpret_cast<float*>(out), _mm512_extractf32x4_ps(_mm512_castpd_ps(v), I));
}

// out[16 u + 4 i + e] = rows[i][4 u + e] for u, i, e < 4: four rows of 16 floats as 4 x 4 blocks
// of 128-bit lanes, transposed.
inline void transpose_quads_4x4(const float* const rows[4], float* out) {
  const __m512 r0 = _mm512_loadu_ps(rows[0]), r1 = _mm512_loadu_ps(rows[1]);
  const __m512 r2 = _mm512_loadu_ps(rows[2]), r3 = _mm512_loadu_ps(rows[3]);
  const __m512 lo01 = _mm512_shuffle_f32x4(r0, r1, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 hi01 = _mm512_shuffle_f32x4(r0, r1, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512 lo23 = _mm512_shuffle_f32x4(r2, r3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 hi23 = _mm512_shuffle_f32x4(r2, r3, _MM_SHUFFLE(3, 2, 3, 2));
  _mm512_storeu_ps(out, _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_storeu_ps(out + 16, _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(3, 1, 3, 1)));
  _mm512_storeu_ps(out + 32, _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_storeu_ps(out + 48, _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Four lines of `line_bytes` (a multiple of 64) from `lines`, one after another, interleaved by
// 128-bit lanes into `quad`: line i's k-th 16 bytes go to quad's (4k + i)-th, whatever the
// element type (the row quads' layout).
inline void interleave_row_quad(const void* lines, std::int64_t line_bytes, void* quad) {
  const auto* in = static_cast<const float*>(lines);
  auto* out = static_cast<float*>(quad);
  const std::int64_t line_floats = line_bytes / 4;
  for (std::int64_t c = 0; c < line_floats; c += 16) {
    const float* const at[4] = {in + c, in + line_floats + c, in + 2 * line_floats + c, in + 3 * line_floats + c};
    transpose_quads_4x4(at, out + 4 * c);
  }
}
#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace gather_linear::cpu
#endif
