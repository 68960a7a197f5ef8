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
#include <vector>

#include "q8.h"

namespace mlxchat {
namespace Q8_NS {

#include "scales_impl.h"

#if Q8_LEVEL >= 2
constexpr int VB = 64;  // weight bytes (after unpacking) in a vector
typedef __m512i VI;
typedef __m512 VF;
static inline VI izero() { return _mm512_setzero_si512(); }
static inline VF fzero() { return _mm512_setzero_ps(); }
static inline VF cvt(VI v) { return _mm512_cvtepi32_ps(v); }
static inline VF fma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
static inline VF fmul(VF a, VF b) { return _mm512_mul_ps(a, b); }
static inline VF fset(float x) { return _mm512_set1_ps(x); }
static inline VF fload(const float* p) { return _mm512_loadu_ps(p); }
static inline void fstore(float* p, VF v) { _mm512_storeu_ps(p, v); }
static inline float hsum(VF v) { return _mm512_reduce_add_ps(v); }
static inline VI iload(const void* p) { return _mm512_loadu_si512(p); }
static inline VI iset32(int32_t v) { return _mm512_set1_epi32(v); }
static inline VI band_(VI a, int v) { return _mm512_and_si512(a, _mm512_set1_epi8((char)v)); }
static inline VI shr4(VI v) { return _mm512_srli_epi16(v, 4); }
static inline VI add32(VI a, VI b) { return _mm512_add_epi32(a, b); }
static inline VI products(VI w, VI x, int16_t k) {  // per int32: k * four products
  return _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(k));
}
#else
constexpr int VB = 32;
typedef __m256i VI;
typedef __m256 VF;
static inline VI izero() { return _mm256_setzero_si256(); }
static inline VF fzero() { return _mm256_setzero_ps(); }
static inline VF cvt(VI v) { return _mm256_cvtepi32_ps(v); }
static inline VF fma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
static inline VF fmul(VF a, VF b) { return _mm256_mul_ps(a, b); }
static inline VF fset(float x) { return _mm256_set1_ps(x); }
static inline VF fload(const float* p) { return _mm256_loadu_ps(p); }
static inline void fstore(float* p, VF v) { _mm256_storeu_ps(p, v); }
static inline float hsum(VF v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline VI iload(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }
static inline VI iset32(int32_t v) { return _mm256_set1_epi32(v); }
static inline VI band_(VI a, int v) { return _mm256_and_si256(a, _mm256_set1_epi8((char)v)); }
static inline VI shr4(VI v) { return _mm256_srli_epi16(v, 4); }
static inline VI add32(VI a, VI b) { return _mm256_add_epi32(a, b); }
static inline VI products(VI w, VI x, int16_t k) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(k));
}
#endif
constexpr int BN = VB / 4;  // a prefill band: one int32 lane per output row

static inline VI bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return iset32(v);
}

// A vector of weight bytes made ready for dot (8 bits below VNNI: two halves).
template <int BITS> struct Wv {
  VI a, b;
};
template <int BITS> static inline Wv<BITS> ready(VI w) {
#if Q8_LEVEL < 3
  if constexpr (BITS == 8) return {band_(shr4(w), 15), band_(w, 15)};
#endif
  return {w, w};
}

// acc + per int32 lane the sum of four products of weight bytes and x bytes.
template <int BITS> static inline VI dot(VI acc, const Wv<BITS>& w, VI x) {
#if Q8_LEVEL == 3
  return _mm512_dpbusd_epi32(acc, w.a, x);
#else
  if constexpr (BITS == 8) return add32(add32(acc, products(w.a, x, 16)), products(w.b, x, 1));
  return add32(acc, products(w.a, x, 1));
#endif
}

// ---- unpacking: `values` (VB, or 32 at a row's end) weights at p as bytes ----

#if Q8_LEVEL == 3
template <int BITS> struct StreamIdx {  // qword j takes the BITS bytes of its 8 values
  alignas(64) uint8_t perm[64];
  alignas(64) uint8_t shift[64];
  constexpr StreamIdx() : perm(), shift() {
    for (int i = 0; i < 64; ++i) {
      const int at = BITS * (i / 8) + i % 8;
      perm[i] = (uint8_t)(at < 64 ? at : 63);
      shift[i] = (uint8_t)(BITS * (i % 8));
    }
  }
};
template <int BITS> inline constexpr StreamIdx<BITS> kIdx{};

template <int BITS> static inline VI stream(const uint8_t* p, int values) {
  const int bytes = values * BITS / 8;
  const __mmask64 m = bytes >= 64 ? ~0ull : (1ull << bytes) - 1;
  const VI src = _mm512_maskz_loadu_epi8(m, p);
  const VI v = _mm512_permutexvar_epi8(_mm512_load_si512(kIdx<BITS>.perm), src);
  return band_(_mm512_multishift_epi64_epi8(_mm512_load_si512(kIdx<BITS>.shift), v),
               (1 << BITS) - 1);
}
#else
// 8 values (lanes of 32 bits) from 16 bytes read at p: two bytes each, shifted.
template <int BITS, int L> struct StreamTab {
  alignas(64) uint8_t ctrl[L * 4];
  alignas(64) int32_t shift[L];
  constexpr StreamTab() : ctrl(), shift() {
    for (int k = 0; k < L; ++k) {
      const int o = BITS * k / 8;
      ctrl[4 * k] = (uint8_t)o;
      ctrl[4 * k + 1] = (uint8_t)(o + 1);
      ctrl[4 * k + 2] = ctrl[4 * k + 3] = 0x80;
      shift[k] = BITS * k % 8;
    }
  }
};
template <int BITS, int L> inline constexpr StreamTab<BITS, L> kTab{};

// 16 bytes from p, never read past end (a copy at the weights' end).
static inline __m128i load16(const uint8_t* p, const uint8_t* end) {
  if (__builtin_expect(p + 16 <= end, 1)) return _mm_loadu_si128((const __m128i*)p);
  alignas(16) uint8_t tail[16] = {};
  std::memcpy(tail, p, end > p ? end - p : 0);
  return _mm_load_si128((const __m128i*)tail);
}

template <int BITS> static inline VI stream(const uint8_t* p, int values, const uint8_t* end) {
  constexpr int mask = (1 << BITS) - 1;
#if Q8_LEVEL == 2
  const auto& t = kTab<BITS, 16>;
  alignas(64) uint8_t out[64] = {};
  for (int q = 0; q < values / 16; ++q) {  // 16 values (2 * BITS bytes) a step
    const __m512i b = _mm512_broadcast_i32x4(load16(p + q * 2 * BITS, end));
    const __m512i d = _mm512_srlv_epi32(_mm512_shuffle_epi8(b, _mm512_load_si512(t.ctrl)),
                                        _mm512_load_si512(t.shift));
    _mm_store_si128((__m128i*)(out + 16 * q),
                    _mm512_cvtepi32_epi8(_mm512_and_si512(d, _mm512_set1_epi32(mask))));
  }
  return _mm512_load_si512(out);
#else
  (void)values;  // always 32 here
  const auto& t = kTab<BITS, 8>;
  __m256i v[4];
  for (int q = 0; q < 4; ++q) {  // 8 values (BITS bytes) a step
    const __m256i b = _mm256_broadcastsi128_si256(load16(p + q * BITS, end));
    const __m256i d = _mm256_shuffle_epi8(b, _mm256_load_si256((const __m256i*)t.ctrl));
    v[q] = _mm256_and_si256(_mm256_srlv_epi32(d, _mm256_load_si256((const __m256i*)t.shift)),
                            _mm256_set1_epi32(mask));
  }
  const __m256i w = _mm256_packus_epi16(_mm256_packus_epi32(v[0], v[1]),
                                        _mm256_packus_epi32(v[2], v[3]));
  return _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
#endif
}
#endif

template <int BITS>
static inline VI unpack(const uint8_t* p, int values, const uint8_t* end) {
  (void)end;
  if constexpr (BITS == 8) {
#if Q8_LEVEL >= 2
    return values == VB ? iload(p)
                        : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i*)p));
#else
    return iload(p);
#endif
  } else if constexpr (BITS == 4) {  // each block: its low nibbles, then its high ones
#if Q8_LEVEL >= 2
    const __m256i h = values == VB ? _mm256_loadu_si256((const __m256i*)p)
                                   : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i*)p));
    const __m512i z = _mm512_castsi256_si512(h);
    const __m512i lanes = _mm512_shuffle_i64x2(z, z, 0x50);  // 16-byte lanes 0, 0, 1, 1
    const __m512i sh = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0,
                                        0x0004000400040004, 0x0004000400040004, 0, 0);
    return band_(_mm512_srlv_epi16(lanes, sh), 15);
#else
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)p));
    return _mm256_blend_epi32(band_(v, 15), band_(shr4(v), 15), 0xF0);
#endif
  } else {
#if Q8_LEVEL == 3
    return stream<BITS>(p, values);
#else
    return stream<BITS>(p, values, end);
#endif
  }
}

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
  const int G = a.K / a.group_size;
  thread_local std::vector<float> held;
  held.resize((size_t)2 * NB * G);
  auto floats = [&](int n, int rows, const float*& sc, const float*& bi) {
    if constexpr (S == ScaleType::f32) {
      sc = static_cast<const float*>(a.scales) + (size_t)n * G;
      bi = static_cast<const float*>(a.biases) + (size_t)n * G;
    } else {
      to_floats<S>(a.scales, (size_t)n * G, rows * G, held.data());
      to_floats<S>(a.biases, (size_t)n * G, rows * G, held.data() + (size_t)NB * G);
      sc = held.data();
      bi = held.data() + (size_t)NB * G;
    }
  };
  const float *sc, *bi;
  int n = n0;
  for (; n + NB <= n1; n += NB) {
    floats(n, NB, sc, bi);
    decode_rows<BITS, NB>(a, n, sc, bi);
  }
  for (; n < n1; ++n) {
    floats(n, 1, sc, bi);
    decode_rows<BITS, 1>(a, n, sc, bi);
  }
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

// ---- dispatch on bits and the scales' type ----

template <int BITS>
static void decode_bits(const Q8Args& a, int n0, int n1) {
  switch (a.scale_type) {
    case ScaleType::f32: return decode_for<BITS, ScaleType::f32>(a, n0, n1);
    case ScaleType::f16: return decode_for<BITS, ScaleType::f16>(a, n0, n1);
    default: return decode_for<BITS, ScaleType::bf16>(a, n0, n1);
  }
}

template <int BITS>
static void prefill_bits(const Q8Args& a, int b0, int b1) {
  switch (a.scale_type) {
    case ScaleType::f32: return prefill_for<BITS, ScaleType::f32>(a, b0, b1);
    case ScaleType::f16: return prefill_for<BITS, ScaleType::f16>(a, b0, b1);
    default: return prefill_for<BITS, ScaleType::bf16>(a, b0, b1);
  }
}

static void decode(const Q8Args& a, int n0, int n1) {
  switch (a.bits) {
    case 2: return decode_bits<2>(a, n0, n1);
    case 3: return decode_bits<3>(a, n0, n1);
    case 4: return decode_bits<4>(a, n0, n1);
    case 5: return decode_bits<5>(a, n0, n1);
    case 6: return decode_bits<6>(a, n0, n1);
    default: return decode_bits<8>(a, n0, n1);
  }
}

static void prefill(const Q8Args& a, int b0, int b1) {
  switch (a.bits) {
    case 2: return prefill_bits<2>(a, b0, b1);
    case 3: return prefill_bits<3>(a, b0, b1);
    case 4: return prefill_bits<4>(a, b0, b1);
    case 5: return prefill_bits<5>(a, b0, b1);
    case 6: return prefill_bits<6>(a, b0, b1);
    default: return prefill_bits<8>(a, b0, b1);
  }
}

}  // namespace Q8_NS
}  // namespace mlxchat
