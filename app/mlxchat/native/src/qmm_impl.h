// The quantized matmul's body, compiled once per instruction set: include with
// QMM_NS (a namespace of its own) and QMM_W (float lanes of a vector) defined.
// GCC vector extensions: the same code is AVX-512, AVX2 or SSE/NEON.
//
// y[m, n] = sum_g s[n,g] * (sum_i q[n,i] x[m,i]) + b[n,g] * xsum[m,g]
// (the affine identity): per-group dot products in float32, each group's
// weights unpacked once and reused across the rows of x.
#include <cstring>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <vector>

#include "qmm.h"

namespace mlxchat {
namespace QMM_NS {

constexpr int W = QMM_W;
typedef float vf __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));

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
    return half_to_float(static_cast<const uint16_t*>(p)[i]);
  } else {
    uint32_t bits = (uint32_t) static_cast<const uint16_t*>(p)[i] << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
}

static inline vf loadf(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// One chunk: W packed bytes, P = 8 / BITS vectors of W weights each. Vector
// p holds the weights at positions p, p + P, p + 2P... of the chunk (the
// nibble order of the bytes); x is read in the same order (see permute_x).
template <int BITS> constexpr int phases() { return 8 / BITS; }

// W bytes widened to W int32 lanes (GCC 12 scalarizes a vector conversion).
static inline vi widen(const uint8_t* p) {
#if QMM_W == 16 && defined(__AVX512F__)
  return (vi)_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#elif QMM_W == 8 && defined(__AVX2__)
  return (vi)_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
#else
  vi d;
  for (int i = 0; i < W; ++i) d[i] = p[i];
  return d;
#endif
}

template <int BITS> static inline void unpack(const uint8_t* p, vf* q) {
  const vi d = widen(p);
  if constexpr (BITS == 8) {
    q[0] = __builtin_convertvector(d, vf);
  } else {
    q[0] = __builtin_convertvector(d & 15, vf);
    q[1] = __builtin_convertvector(d >> 4, vf);
  }
}

// x's rows with each chunk of P * W values in the order unpack gives weights:
// for 4 bits, the W even positions then the W odd ones.
template <int BITS>
static const float* permute_x(const QmmArgs& a, std::vector<float>& out) {
  if constexpr (BITS == 8) {
    return a.x;
  } else {
    out.resize((size_t)a.M * a.K);
    for (size_t base = 0; base < out.size(); base += 2 * W)
      for (int j = 0; j < W; ++j) {
        out[base + j] = a.x[base + 2 * j];
        out[base + W + j] = a.x[base + 2 * j + 1];
      }
    return out.data();
  }
}

static inline float hsum(vf v) {
  float s = 0.f;
  for (int i = 0; i < W; ++i) s += v[i];
  return s;
}

// Few rows (R <= 4): the weights unpacked in registers, straight into R sums.
template <int BITS, ScaleType S, int R>
static void rows_fused(const QmmArgs& a, const float* x, int n0, int n1) {
  constexpr int P = phases<BITS>();
  const int G = a.K / a.group_size, chunks = a.group_size / (P * W);
  const size_t row_bytes = (size_t)a.K * BITS / 8;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* wp = a.w + (size_t)n * row_bytes;
    vf acc[R];
    float bias[R];
    for (int r = 0; r < R; ++r) { acc[r] = vf{}; bias[r] = 0.f; }
    for (int g = 0; g < G; ++g) {
      const float s = scale_at<S>(a.scales, (size_t)n * G + g);
      const float b = scale_at<S>(a.biases, (size_t)n * G + g);
      vf t[R];
      for (int r = 0; r < R; ++r) t[r] = vf{};
      const size_t col = (size_t)g * a.group_size;
      for (int c = 0; c < chunks; ++c, wp += W) {
        vf q[P];
        unpack<BITS>(wp, q);
        for (int r = 0; r < R; ++r)
          for (int p = 0; p < P; ++p)
            t[r] += q[p] * loadf(x + (size_t)r * a.K + col + (c * P + p) * W);
      }
      for (int r = 0; r < R; ++r) {
        acc[r] += s * t[r];
        bias[r] += b * a.xsum[(size_t)r * G + g];
      }
    }
    for (int r = 0; r < R; ++r) a.y[(size_t)r * a.N + n] = hsum(acc[r]) + bias[r];
  }
}

// Many rows: each group unpacked once into a buffer, then read by every row.
template <int BITS, ScaleType S>
static void rows_buffered(const QmmArgs& a, const float* x, int n0, int n1) {
  constexpr int P = phases<BITS>();
  const int G = a.K / a.group_size, vecs = a.group_size / W, M = a.M;
  const size_t row_bytes = (size_t)a.K * BITS / 8;
  std::vector<vf> q(vecs), acc(M);
  std::vector<float> bias(M);
  for (int n = n0; n < n1; ++n) {
    const uint8_t* wp = a.w + (size_t)n * row_bytes;
    for (int m = 0; m < M; ++m) { acc[m] = vf{}; bias[m] = 0.f; }
    for (int g = 0; g < G; ++g) {
      const float s = scale_at<S>(a.scales, (size_t)n * G + g);
      const float b = scale_at<S>(a.biases, (size_t)n * G + g);
      for (int c = 0; c < vecs; c += P, wp += W) unpack<BITS>(wp, &q[c]);
      const size_t col = (size_t)g * a.group_size;
      for (int m = 0; m < M; ++m) {
        const float* xr = x + (size_t)m * a.K + col;
        vf t = vf{};
        for (int c = 0; c < vecs; ++c) t += q[c] * loadf(xr + c * W);
        acc[m] += s * t;
        bias[m] += b * a.xsum[(size_t)m * G + g];
      }
    }
    for (int m = 0; m < M; ++m) a.y[(size_t)m * a.N + n] = hsum(acc[m]) + bias[m];
  }
}

template <int BITS, ScaleType S>
static void rows_for(const QmmArgs& a, int n0, int n1) {
  thread_local std::vector<float> permuted;
  const float* x = permute_x<BITS>(a, permuted);
  switch (a.M) {
    case 1: return rows_fused<BITS, S, 1>(a, x, n0, n1);
    case 2: return rows_fused<BITS, S, 2>(a, x, n0, n1);
    case 3: return rows_fused<BITS, S, 3>(a, x, n0, n1);
    case 4: return rows_fused<BITS, S, 4>(a, x, n0, n1);
    default: return rows_buffered<BITS, S>(a, x, n0, n1);
  }
}

template <int BITS>
static void rows_bits(const QmmArgs& a, int n0, int n1) {
  switch (a.scale_type) {
    case ScaleType::f32: return rows_for<BITS, ScaleType::f32>(a, n0, n1);
    case ScaleType::f16: return rows_for<BITS, ScaleType::f16>(a, n0, n1);
    default: return rows_for<BITS, ScaleType::bf16>(a, n0, n1);
  }
}

static void rows(const QmmArgs& a, int n0, int n1) {
  if (a.bits == 4) return rows_bits<4>(a, n0, n1);
  return rows_bits<8>(a, n0, n1);
}

}  // namespace QMM_NS
}  // namespace mlxchat
