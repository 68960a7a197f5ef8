// The integer-dot quantized matmul's body (see q8.h), compiled once per
// instruction set: include with Q8_NS (its namespace) and Q8_LEVEL defined:
// 1 AVX2 (`vpmaddubsw` + `vpmaddwd`, 32 bytes a vector), 2 AVX-512 BW (the
// same, 64 bytes), 3 AVX-512 VNNI (`vpdpbusd`) with VBMI's byte shuffles.
//
// The weights become unsigned bytes (0 .. 2^bits - 1) in the order x's blocks
// are stored; an int32 lane sums four products. `vpmaddubsw` adds two
// products into int16 with saturation: fine below 8 bits (63 * 127 * 2 <
// 32767); 8-bit weights are dotted as two halves of 4 bits each there.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "q8.h"

namespace mlxchat {
namespace Q8_NS {

#include "shared_impl.h"

#include "q8_vec.h"

// ---- decode: one row of x, the weights read in place ----

// A row's factors (weight scale x x's block scale) over a vector's lanes,
// from block b's on (p: the row's, one a block).
static inline VF factors(const float* p) {
#if Q8_LEVEL >= 2
  const __m512 two = _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double*)p)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                               two);  // block b over lanes 0-7, block b + 1 over 8-15
#else
  return fset(*p);
#endif
}

// f[b] = sc[b / per] * xd[b] for the B blocks, and a zero after them.
static inline void fill_factors(const float* sc, const float* xd, int B, int per, float* f) {
  int b = 0;
  if (per == 1) {
    for (; b + VB / 4 <= B; b += VB / 4) fstore(f + b, fmul(fload(sc + b), fload(xd + b)));
  }
  for (; b < B; ++b) f[b] = sc[b / per] * xd[b];
  f[B] = 0.f;
}

// acc + a[0, n) * b[0, n), lane by lane (the tail masked, or in the first lane).
static inline VF dot_into(VF acc, const float* a, const float* b, int n) {
  constexpr int L = VB / 4;
  int i = 0;
  for (; i + L <= n; i += L) acc = fma(fload(a + i), fload(b + i), acc);
  if (i == n) return acc;
#if Q8_LEVEL >= 2
  const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
  return fma(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
#else
  float t = 0.f;
  for (; i < n; ++i) t += a[i] * b[i];
  return _mm256_add_ps(acc, _mm256_setr_ps(t, 0, 0, 0, 0, 0, 0, 0));
#endif
}

// NB output rows from row n at once (x's vector read once for all of them);
// sc / bi: their scales and biases as float32, row after row.
template <int BITS, int NB>
static inline void decode_rows(const Q8Args& a, int n, const float* sc, const float* bi) {
  const int G = a.K / a.group_size, per = a.group_size / Q8_BLOCK, B = a.K / Q8_BLOCK;
  const size_t row_bytes = (size_t)a.K * BITS / 8;
  thread_local std::vector<float> held;
  held.resize((size_t)NB * (B + 1));
  const uint8_t* wp[NB];
  const float* f[NB];
  VF acc[NB];
  for (int j = 0; j < NB; ++j) {
    wp[j] = a.w + (size_t)(n + j) * row_bytes;
    f[j] = held.data() + (size_t)j * (B + 1);
    fill_factors(sc + (size_t)j * G, a.xd, B, per, held.data() + (size_t)j * (B + 1));
    acc[j] = fzero();
  }
  for (int k = 0; k < a.K; k += VB) {
    const int values = std::min(VB, a.K - k), b = k / Q8_BLOCK;
    const VI x = iload(a.xq + k);  // zero-padded past K
    for (int j = 0; j < NB; ++j) {
      const Wv<BITS> w = ready<BITS>(unpack<BITS>(wp[j] + (size_t)k * BITS / 8, values, a.w_end));
      acc[j] = fma(cvt(dot<BITS>(izero(), w, x)), factors(f[j] + b), acc[j]);
    }
  }
  for (int j = 0; j < NB; ++j) a.y[n + j] = hsum(dot_into(acc[j], bi + (size_t)j * G, a.xsum, G));
}

template <int BITS, ScaleType S>
static void decode_for(const Q8Args& a, int n0, int n1) {
  // 8 bits: one row at a time keeps the reads one linear stream (the head
  // streams from memory: 0.079 against 0.167 ns a weight four rows at a time).
  constexpr int NB = BITS == 8 ? 1 : 4;
  row_blocks<S, NB>(a.scales, a.biases, a.K / a.group_size, n0, n1,
                    [&](auto rows, int n, const float* sc, const float* bi) {
                      decode_rows<BITS, decltype(rows)::value>(a, n, sc, bi);
                    });
}

// ---- prefill: a band of BN output rows unpacked once, dotted with every row ----

// The band's weights as int8 lanes: int32 lane j of vector t holds values
// 4t .. 4t + 3 of row n0 + j (zero rows past N); scales and biases per group x BN.
template <int BITS, ScaleType S>
static void fill_tile(const Q8Args& a, int n0, int rows, uint32_t* tile, float* sb, float* bb) {
  const int G = a.K / a.group_size, words = a.K / 4;
  const size_t row_bytes = (size_t)a.K * BITS / 8;
  thread_local std::vector<uint8_t> line;
  line.resize((size_t)a.K + VB);
  for (int j = 0; j < BN; ++j) {
    if (j >= rows) {
      for (int t = 0; t < words; ++t) tile[(size_t)t * BN + j] = 0;
      for (int g = 0; g < G; ++g) sb[(size_t)g * BN + j] = bb[(size_t)g * BN + j] = 0.f;
      continue;
    }
    const uint8_t* wp = a.w + (size_t)(n0 + j) * row_bytes;
    for (int k = 0; k < a.K; k += VB) {
      const VI v = unpack<BITS>(wp + (size_t)k * BITS / 8, std::min(VB, a.K - k), a.w_end);
      std::memcpy(line.data() + k, &v, sizeof(v));
    }
    const uint32_t* src = reinterpret_cast<const uint32_t*>(line.data());
    for (int t = 0; t < words; ++t) tile[(size_t)t * BN + j] = src[t];
    for (int g = 0; g < G; ++g) {
      sb[(size_t)g * BN + j] = scale_at<S>(a.scales, (size_t)(n0 + j) * G + g);
      bb[(size_t)g * BN + j] = scale_at<S>(a.biases, (size_t)(n0 + j) * G + g);
    }
  }
}

// MT rows of x from m0 against the band's tile: y[m0 .. m0 + MT, n0 .. n0 + rows].
template <int BITS, int MT>
static void tile_rows(const Q8Args& a, const uint32_t* tile, const float* sb, const float* bb,
                      int m0, int n0, int rows) {
  const int G = a.K / a.group_size, B = a.K / Q8_BLOCK, per = a.group_size / Q8_BLOCK;
  const int8_t* x[MT];
  VF acc[MT];
  for (int r = 0; r < MT; ++r) {
    x[r] = a.xq + (size_t)(m0 + r) * a.K;
    acc[r] = fzero();
  }
  for (int g = 0; g < G; ++g) {
    const VF s = fload(sb + (size_t)g * BN);
    for (int b = g * per; b < (g + 1) * per; ++b) {
      VI sum[MT];
      for (int r = 0; r < MT; ++r) sum[r] = izero();
      const uint32_t* t = tile + (size_t)b * 8 * BN;
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        const Wv<BITS> w = ready<BITS>(iload(t + q * BN));
        for (int r = 0; r < MT; ++r) sum[r] = dot<BITS>(sum[r], w, bcast4(x[r] + b * 32 + 4 * q));
      }
      for (int r = 0; r < MT; ++r)
        acc[r] = fma(cvt(sum[r]), fmul(s, fset(a.xd[(size_t)(m0 + r) * B + b])), acc[r]);
    }
    const VF bias = fload(bb + (size_t)g * BN);
    for (int r = 0; r < MT; ++r)
      acc[r] = fma(bias, fset(a.xsum[(size_t)(m0 + r) * G + g]), acc[r]);
  }
  for (int r = 0; r < MT; ++r) {
    float* y = a.y + (size_t)(m0 + r) * a.N + n0;
    if (rows == BN) {
      fstore(y, acc[r]);
    } else {
      alignas(64) float tmp[BN];
      fstore(tmp, acc[r]);
      std::memcpy(y, tmp, sizeof(float) * rows);
    }
  }
}

#if Q8_LEVEL >= 2
constexpr int MT = 8;  // rows of x a pass: 2 * 8 accumulators of the 32 registers
#else
constexpr int MT = 4;  // of AVX2's 16
#endif

template <int BITS, int R = MT>
static void tile_tail(const Q8Args& a, const uint32_t* t, const float* sb, const float* bb, int m0,
                      int n0, int rows, int left) {
  if constexpr (R > 1) {
    if (left < R) return tile_tail<BITS, R - 1>(a, t, sb, bb, m0, n0, rows, left);
  }
  tile_rows<BITS, R>(a, t, sb, bb, m0, n0, rows);
}

template <int BITS, ScaleType S>
static void prefill_for(const Q8Args& a, int band0, int band1) {
  const int G = a.K / a.group_size;
  thread_local std::vector<uint32_t> tile;
  thread_local std::vector<float> scales;
  tile.resize((size_t)a.K / 4 * BN);
  scales.resize((size_t)2 * G * BN);
  float *sb = scales.data(), *bb = sb + (size_t)G * BN;
  for (int band = band0; band < band1; ++band) {
    const int n0 = band * BN, rows = std::min(BN, a.N - n0);
    fill_tile<BITS, S>(a, n0, rows, tile.data(), sb, bb);
    int m = 0;
    for (; m + MT <= a.M; m += MT) tile_rows<BITS, MT>(a, tile.data(), sb, bb, m, n0, rows);
    if (m < a.M) tile_tail<BITS>(a, tile.data(), sb, bb, m, n0, rows, a.M - m);
  }
}

// ---- the activations: each block of 32 to int8 (see Q8Impl::quantize) ----

#if Q8_LEVEL >= 2
static void quantize(const float* x, int K, bool nibbles, int8_t* q, float* d, int32_t* sums) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int b = 0; b < K / Q8_BLOCK; ++b) {
    __m512 v0 = _mm512_loadu_ps(x + b * Q8_BLOCK), v1 = _mm512_loadu_ps(x + b * Q8_BLOCK + 16);
    if (nibbles) {
      const __m512 e = _mm512_permutex2var_ps(v0, even, v1);
      v1 = _mm512_permutex2var_ps(v0, odd, v1);
      v0 = e;
    }
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    d[b] = amax / 127.f;
    const __m512 inv = _mm512_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv));
    _mm_storeu_si128((__m128i*)(q + b * Q8_BLOCK), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128((__m128i*)(q + b * Q8_BLOCK + 16), _mm512_cvtsepi32_epi8(q1));
    sums[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}
#else
static inline __m256 pick(__m256 a, __m256 b, int odd) {  // a's and b's even (odd) lanes
  const __m256 s = odd ? _mm256_shuffle_ps(a, b, 0xDD) : _mm256_shuffle_ps(a, b, 0x88);
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), 0xD8));
}

static void quantize(const float* x, int K, bool nibbles, int8_t* q, float* d, int32_t* sums) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  for (int b = 0; b < K / Q8_BLOCK; ++b) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + b * Q8_BLOCK + 8 * i);
    if (nibbles) {
      const __m256 e0 = pick(v[0], v[1], 0), e1 = pick(v[2], v[3], 0);
      const __m256 o0 = pick(v[0], v[1], 1), o1 = pick(v[2], v[3], 1);
      v[0] = e0, v[1] = e1, v[2] = o0, v[3] = o1;
    }
    __m256 m = _mm256_andnot_ps(sign, v[0]);
    for (int i = 1; i < 4; ++i) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    const float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    d[b] = amax / 127.f;
    const __m256 inv = _mm256_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
    __m256i n[4];
    for (int i = 0; i < 4; ++i) n[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(n[0], n[1]),
                                              _mm256_packs_epi32(n[2], n[3]));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256((__m256i*)(q + b * Q8_BLOCK), _mm256_permutevar8x32_epi32(packed, order));
    const __m256i t = _mm256_add_epi32(_mm256_add_epi32(n[0], n[1]), _mm256_add_epi32(n[2], n[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    sums[b] = _mm_cvtsi128_si32(_mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1)));
  }
}
#endif

// ---- the entry points: dispatched on bits and the scales' type ----

struct DecodeOf {
  const Q8Args& a;
  int n0, n1;
  template <int BITS, ScaleType S> void run() const { decode_for<BITS, S>(a, n0, n1); }
};

struct PrefillOf {
  const Q8Args& a;
  int b0, b1;
  template <int BITS, ScaleType S> void run() const { prefill_for<BITS, S>(a, b0, b1); }
};

static void decode(const Q8Args& a, int n0, int n1) {
  dispatch(a.bits, a.scale_type, DecodeOf{a, n0, n1});
}

static void prefill(const Q8Args& a, int b0, int b1) {
  dispatch(a.bits, a.scale_type, PrefillOf{a, b0, b1});
}

}  // namespace Q8_NS
}  // namespace mlxchat
