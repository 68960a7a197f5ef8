// What the quantized matmuls' bodies (qmm_impl.h, q8_impl.h) share: reading
// scales stored as float32, float16 or bfloat16, the tables that cut MLX's
// bit streams into lanes, and the dispatch on bits and scales' type. Included
// inside an instruction set's namespace by each body, so F16C is used where
// that body is compiled with it. The includer includes <cstring>,
// <type_traits>, <vector> and, compiled for x86 SIMD, <immintrin.h> first.

static inline float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do { ++e; man <<= 1; } while (!(man & 0x400));
    bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <ScaleType S> static inline float scale_at(const void* p, size_t i) {
  if constexpr (S == ScaleType::f32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (S == ScaleType::f16) {
#ifdef __F16C__
    return _cvtsh_ss(static_cast<const uint16_t*>(p)[i]);  // one instruction, not ~10
#else
    return half_to_float(static_cast<const uint16_t*>(p)[i]);
#endif
  } else {
    uint32_t bits = (uint32_t) static_cast<const uint16_t*>(p)[i] << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
}

// n scales from p + at as float32 into out (f16 8 at a time by F16C).
template <ScaleType S> static inline void to_floats(const void* p, size_t at, int n, float* out) {
  int i = 0;
#ifdef __F16C__
  if constexpr (S == ScaleType::f16) {
    const uint16_t* h = static_cast<const uint16_t*>(p) + at;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(h + i))));
  }
#endif
  for (; i < n; ++i) out[i] = scale_at<S>(p, at + i);
}


// The bit streams (2, 3, 5, 6 bits: MLX packs a little-endian stream, a value
// may straddle bytes) cut into L lanes of 32 bits: lane k takes the two bytes
// at BITS * k / 8 (a byte shuffle's control), shifted by BITS * k % 8.
template <int BITS, int L> struct StreamTables {
  alignas(64) uint8_t ctrl[L * 4];
  alignas(64) int32_t shift[L];
  constexpr StreamTables() : ctrl(), shift() {
    for (int k = 0; k < L; ++k) {
      const int o = BITS * k / 8;
      ctrl[4 * k] = (uint8_t)o;
      ctrl[4 * k + 1] = (uint8_t)(o + 1);
      ctrl[4 * k + 2] = ctrl[4 * k + 3] = 0x80;
      shift[k] = BITS * k % 8;
    }
  }
};
template <int BITS, int L> inline constexpr StreamTables<BITS, L> kStream{};

// f.template run<BITS, S>() for the run-time bits (2, 3, 4, 5, 6 or 8) and
// scales' type: each kernel's entry point, one instantiation a combination.
template <int BITS, typename F> static inline void with_scales(ScaleType st, const F& f) {
  switch (st) {
    case ScaleType::f32: return f.template run<BITS, ScaleType::f32>();
    case ScaleType::f16: return f.template run<BITS, ScaleType::f16>();
    default: return f.template run<BITS, ScaleType::bf16>();
  }
}

template <typename F> static inline void dispatch(int bits, ScaleType st, const F& f) {
  switch (bits) {
    case 2: return with_scales<2>(st, f);
    case 3: return with_scales<3>(st, f);
    case 4: return with_scales<4>(st, f);
    case 5: return with_scales<5>(st, f);
    case 6: return with_scales<6>(st, f);
    default: return with_scales<8>(st, f);
  }
}

// Rows [n0, n1) of a one-row matvec: each block of NB rows, then each row
// left, handed to f(std::integral_constant<int, rows>, n, sc, bi) with their
// scales and biases as float32 (read in place, or halves converted into a
// buffer), row after row.
template <ScaleType S, int NB, typename F>
static inline void row_blocks(const void* scales, const void* biases, int G, int n0, int n1,
                              const F& f) {
  thread_local std::vector<float> held;  // half scales as float32, NB rows at a time
  if constexpr (S != ScaleType::f32) held.resize((size_t)2 * NB * G);
  auto block = [&](auto rows, int n) {
    if constexpr (S == ScaleType::f32) {
      f(rows, n, static_cast<const float*>(scales) + (size_t)n * G,
        static_cast<const float*>(biases) + (size_t)n * G);
    } else {
      to_floats<S>(scales, (size_t)n * G, decltype(rows)::value * G, held.data());
      to_floats<S>(biases, (size_t)n * G, decltype(rows)::value * G,
                   held.data() + (size_t)NB * G);
      f(rows, n, held.data(), held.data() + (size_t)NB * G);
    }
  };
  int n = n0;
  for (; n + NB <= n1; n += NB) block(std::integral_constant<int, NB>{}, n);
  for (; n < n1; ++n) block(std::integral_constant<int, 1>{}, n);
}
