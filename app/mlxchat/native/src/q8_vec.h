// The integer-dot kernels' vectors (see q8_impl.h): types and operations,
// the dot of weight bytes with x bytes, and the weights unpacked to bytes.
// Included inside an instruction set's namespace by q8_impl.h (Q8_LEVEL set,
// <immintrin.h> and <cstring> included first).

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
  const auto& t = kStream<BITS, 16>;
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
  const auto& t = kStream<BITS, 8>;
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
