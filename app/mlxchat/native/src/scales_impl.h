// Reading scales and biases stored as float32, float16 or bfloat16: included
// inside an instruction set's namespace by each kernel body (qmm_impl.h,
// q8_impl.h), so F16C is used where that body is compiled with it. The
// includer includes <cstring> and, compiled for x86 SIMD, <immintrin.h> first.

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

