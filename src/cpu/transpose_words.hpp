// A 16 x 16 transposition of 32-bit words in AVX-512, for the CPU engines' packing: the float32
// engine's weight panels and gathered rows (one word a float), and the AMX kernel's weight panels
// (one word a pair of bfloat16). Compiled for AVX-512 whatever the translation unit's target;
// callers run it only where the processor has AVX-512.
#pragma once

#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#define GATHER_LINEAR_HAS_AVX512_TRANSPOSE 1

namespace gather_linear::cpu {

#pragma GCC push_options
#pragma GCC target("avx512f")
#pragma GCC diagnostic push
// GCC 12's unpack intrinsics start from _mm512_undefined
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
#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace gather_linear::cpu
#endif
