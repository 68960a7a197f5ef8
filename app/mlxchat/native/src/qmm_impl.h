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
#include <type_traits>
#include <vector>

#include "qmm.h"

namespace mlxchat {
namespace QMM_NS {

constexpr int W = QMM_W;
typedef float vf __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));

#include "shared_impl.h"

static inline vf loadf(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// One chunk: P vectors of W weights each (P = 2 for 4 bits: W bytes, vector p
// holding the weights at positions p, p + 2, p + 4... of the chunk, the nibble
// order of the bytes; x is read in the same order, see permute_x; else P = 1).
template <int BITS> constexpr int phases() { return BITS == 4 ? 2 : 1; }

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

// Other widths (2, 3, 5, 6 bits): one 16-byte load, a byte shuffle, a shift
// per lane, masked (shared_impl.h's tables).
template <int BITS> static inline vi stream_bits(const uint8_t* p) {
  const auto& t = kStream<BITS, W>;
  constexpr int mask = (1 << BITS) - 1;
#if QMM_W == 16 && defined(__AVX512BW__)
  const __m512i bytes =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i d = _mm512_shuffle_epi8(bytes, _mm512_load_si512(t.ctrl));
  return (vi)_mm512_srlv_epi32(d, _mm512_load_si512(t.shift)) & mask;
#elif QMM_W == 8 && defined(__AVX2__)
  const __m256i bytes =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i d =
      _mm256_shuffle_epi8(bytes, _mm256_load_si256(reinterpret_cast<const __m256i*>(t.ctrl)));
  return (vi)_mm256_srlv_epi32(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(t.shift)))
         & mask;
#else
  vi d;
  for (int k = 0; k < W; ++k) {
    const int o = t.ctrl[4 * k];
    d[k] = ((p[o] | (p[o + 1] << 8)) >> t.shift[k]) & mask;
  }
  return d;
#endif
}

// Bytes a chunk holds, and the bytes its load reads (16 for the bit streams).
template <int BITS> constexpr int chunk_bytes() { return BITS == 4 ? W : W * BITS / 8; }
template <int BITS> constexpr int chunk_reads() { return BITS == 4 || BITS == 8 ? W : 16; }

template <int BITS> static inline void unpack(const uint8_t* p, vf* q) {
  if constexpr (BITS != 4 && BITS != 8) {
    q[0] = __builtin_convertvector(stream_bits<BITS>(p), vf);
    return;
  }
  const vi d = widen(p);
  if constexpr (BITS == 8) {
    q[0] = __builtin_convertvector(d, vf);
  } else {
    q[0] = __builtin_convertvector(d & 15, vf);
    q[1] = __builtin_convertvector(d >> 4, vf);
  }
}

// The last chunks of the weights: read from a copy, never past their end.
template <int BITS> static inline void unpack_safe(const uint8_t* p, const uint8_t* end, vf* q) {
  if (__builtin_expect(p + chunk_reads<BITS>() <= end, 1)) return unpack<BITS>(p, q);
  uint8_t tail[64] = {};
  std::memcpy(tail, p, end - p < chunk_bytes<BITS>() ? end - p : chunk_bytes<BITS>());
  unpack<BITS>(tail, q);
}

// x's rows with each chunk of P * W values in the order unpack gives weights:
// for 4 bits, the W even positions then the W odd ones.
template <int BITS>
static const float* permute_x(const QmmArgs& a, std::vector<float>& out) {
  if constexpr (BITS != 4) {
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
      for (int c = 0; c < chunks; ++c, wp += chunk_bytes<BITS>()) {
        vf q[P];
        unpack_safe<BITS>(wp, a.w_end, q);
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
      for (int c = 0; c < vecs; c += P, wp += chunk_bytes<BITS>())
        unpack_safe<BITS>(wp, a.w_end, &q[c]);
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

// sum_g b[g] * xsum[g], W lanes at a time.
static inline float dot(const float* b, const float* xs, int G) {
  vf v = vf{};
  int g = 0;
  for (; g + W <= G; g += W) v += loadf(b + g) * loadf(xs + g);
  float t = hsum(v);
  for (; g < G; ++g) t += b[g] * xs[g];
  return t;
}

// One row of x (decode): NB output rows at once, so each x vector is loaded
// once for NB weight rows and NB accumulator chains run side by side (one
// row's chain, a dependent FMA a group, held the kernel at its latency).
// sc / bi: the NB rows' scales and biases as float32, row after row.
template <int BITS, int NB>
static inline void block_single(const QmmArgs& a, const float* x, int n, const float* sc,
                                const float* bi) {
  constexpr int P = phases<BITS>();
  const int G = a.K / a.group_size, chunks = a.group_size / (P * W);
  const size_t row_bytes = (size_t)a.K * BITS / 8;
  const uint8_t* wp[NB];
  vf acc[NB];
  for (int j = 0; j < NB; ++j) {
    wp[j] = a.w + (size_t)(n + j) * row_bytes;
    acc[j] = vf{};
  }
  for (int g = 0; g < G; ++g) {
    vf t[NB];
    for (int j = 0; j < NB; ++j) t[j] = vf{};
    const float* xg = x + (size_t)g * a.group_size;
    for (int c = 0; c < chunks; ++c) {
      vf xv[P];
      for (int p = 0; p < P; ++p) xv[p] = loadf(xg + (c * P + p) * W);
      for (int j = 0; j < NB; ++j) {
        vf q[P];
        if constexpr (chunk_reads<BITS>() == chunk_bytes<BITS>()) unpack<BITS>(wp[j], q);
        else unpack_safe<BITS>(wp[j], a.w_end, q);
        wp[j] += chunk_bytes<BITS>();
        for (int p = 0; p < P; ++p) t[j] += q[p] * xv[p];
      }
    }
    for (int j = 0; j < NB; ++j) acc[j] += sc[(size_t)j * G + g] * t[j];
  }
  for (int j = 0; j < NB; ++j)
    a.y[n + j] = hsum(acc[j]) + dot(bi + (size_t)j * G, a.xsum, G);
}

template <int BITS, ScaleType S>
static void rows_single(const QmmArgs& a, const float* x, int n0, int n1) {
  // 8 bits streams twice the bytes and is memory-bound already: one row at a
  // time keeps its reads one linear stream (four rows measured slower).
  constexpr int NB = BITS == 8 ? 1 : 4;
  row_blocks<S, NB>(a.scales, a.biases, a.K / a.group_size, n0, n1,
                    [&](auto rows, int n, const float* sc, const float* bi) {
                      block_single<BITS, decltype(rows)::value>(a, x, n, sc, bi);
                    });
}

template <int BITS, ScaleType S>
static void rows_for(const QmmArgs& a, int n0, int n1) {
  thread_local std::vector<float> permuted;
  const float* x = permute_x<BITS>(a, permuted);
  switch (a.M) {
    case 1: return rows_single<BITS, S>(a, x, n0, n1);
    case 2: return rows_fused<BITS, S, 2>(a, x, n0, n1);
    case 3: return rows_fused<BITS, S, 3>(a, x, n0, n1);
    case 4: return rows_fused<BITS, S, 4>(a, x, n0, n1);
    default: return rows_buffered<BITS, S>(a, x, n0, n1);
  }
}

struct RowsOf {
  const QmmArgs& a;
  int n0, n1;
  template <int BITS, ScaleType S> void run() const { rows_for<BITS, S>(a, n0, n1); }
};

static void rows(const QmmArgs& a, int n0, int n1) {
  dispatch(a.bits, a.scale_type, RowsOf{a, n0, n1});
}

}  // namespace QMM_NS
}  // namespace mlxchat
