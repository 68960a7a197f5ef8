// The attention body, compiled once per instruction set: include with
// SDPA_NS and SDPA_W (float lanes) defined. GCC vector extensions.
// Each item: the query rows of one KV head's group at one position; scores
// for the keys the mask leaves (a causal mask skips the rest), a softmax with
// a vectorized exp, then the weighted sum of the values.
#include <cfloat>
#include <cmath>
#include <cstring>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "sdpa.h"

namespace mlxchat {
namespace SDPA_NS {

constexpr int W = SDPA_W;
typedef float vf __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));

static inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
static inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof(v)); }
static inline vf splat(float x) { return vf{} + x; }
static inline float hsum(vf v) {
  float t = 0.f;
  for (int i = 0; i < W; ++i) t += v[i];
  return t;
}

// exp(x) (Cephes' polynomial; 0 below -87.3, as float32's exp underflows).
static inline vf vexp(vf x) {
  const vf lo = splat(-87.3f);
  vi under = x < lo;
  x = x < lo ? lo : x;
  x = x > splat(88.37f) ? splat(88.37f) : x;
  vf fx = x * splat(1.44269504088896341f) + splat(0.5f);
  vi t = __builtin_convertvector(fx, vi);
  vf tf = __builtin_convertvector(t, vf);
  tf = tf > fx ? tf - splat(1.f) : tf;  // floor
  x = x - tf * splat(0.693359375f) - tf * splat(-2.12194440e-4f);
  vf y = splat(1.9875691500e-4f);
  y = y * x + splat(1.3981999507e-3f);
  y = y * x + splat(8.3334519073e-3f);
  y = y * x + splat(4.1665795894e-2f);
  y = y * x + splat(1.6666665459e-1f);
  y = y * x + splat(5.0000001201e-1f);
  y = y * x * x + x + splat(1.f);
  vi e = (__builtin_convertvector(tf, vi) + 127) << 23;
  vf pow2;
  std::memcpy(&pow2, &e, sizeof(pow2));
  y = y * pow2;
  vi bits;
  std::memcpy(&bits, &y, sizeof(bits));
  bits &= ~under;
  std::memcpy(&y, &bits, sizeof(y));
  return y;
}

static inline float dot(const float* a, const float* b, int n) {
  vf acc = vf{};
  int i = 0;
  for (; i + W <= n; i += W) acc += load(a + i) * load(b + i);
  float t = hsum(acc);
  for (; i < n; ++i) t += a[i] * b[i];
  return t;
}

static inline void axpy(float* y, float a, const float* x, int n) {
  const vf av = splat(a);
  int i = 0;
  for (; i + W <= n; i += W) store(y + i, load(y + i) + av * load(x + i));
  for (; i < n; ++i) y[i] += a * x[i];
}

// Scores of one query row against 8 keys (rows kr, kr + ks, ...): each key
// read once, its 8 sums reduced together (a key at a time would pay a whole
// horizontal sum for each).
static inline void dots8(const float* q, const float* kr, int64_t ks, int D, float* out) {
  if (D % W != 0) {
    for (int c = 0; c < 8; ++c) out[c] = dot(q, kr + c * ks, D);
    return;
  }
  vf acc[8] = {};
  for (int d = 0; d < D; d += W) {
    const vf qd = load(q + d);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) acc[c] += qd * load(kr + c * ks + d);
  }
#if defined(__AVX2__)
  if constexpr (W == 8) {
    __m256 a[8];
    std::memcpy(a, acc, sizeof(a));
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                        _mm256_permute2f128_ps(u0, u1, 0x31)));
    return;
  }
#endif
  for (int c = 0; c < 8; ++c) out[c] = hsum(acc[c]);
}

// acc[0, Dv) = sum over j < n of p[j] * v[j] (rows vr, vr + vs, ...): the sums
// held in registers a block of 8 vectors at a time, each value row read once.
static inline void weighted_sum(float* acc, const float* p, const float* vr, int64_t vs,
                                int n, int Dv) {
  constexpr int BLOCK = 8 * W;
  int d0 = 0;
  for (; d0 + BLOCK <= Dv; d0 += BLOCK) {
    vf s[8] = {};
    for (int j = 0; j < n; ++j) {
      const vf pj = splat(p[j]);
      const float* v = vr + j * vs + d0;
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) s[c] += pj * load(v + c * W);
    }
    for (int c = 0; c < 8; ++c) store(acc + d0 + c * W, s[c]);
  }
  if (d0 < Dv) {
    std::memset(acc + d0, 0, sizeof(float) * (Dv - d0));
    for (int j = 0; j < n; ++j) axpy(acc + d0, p[j], vr + j * vs + d0, Dv - d0);
  }
}

// Softmax of sc[0, n) in place; returns the sum of the exponentials.
static inline float softmax_exp(float* sc, int n) {
  float m = -FLT_MAX;
  for (int j = 0; j < n; ++j) m = sc[j] > m ? sc[j] : m;
  vf sum = vf{};
  int j = 0;
  for (; j + W <= n; j += W) {
    vf e = vexp(load(sc + j) - splat(m));
    store(sc + j, e);
    sum += e;
  }
  float s = hsum(sum);
  for (; j < n; ++j) {
    sc[j] = std::exp(sc[j] - m);
    s += sc[j];
  }
  return s;
}

static void mask_row(const SdpaArgs& a, int b, int h, int l, float* sc, int n) {
  const int64_t base = b * a.ms[0] + h * a.ms[1] + l * a.ms[2];
  if (a.mask_kind == MaskKind::boolean) {
    const uint8_t* m = static_cast<const uint8_t*>(a.mask) + base;
    for (int j = 0; j < n; ++j)
      if (!m[j * a.ms[3]]) sc[j] = -FLT_MAX;
  } else if (a.mask_kind == MaskKind::additive) {
    const float* m = static_cast<const float*>(a.mask) + base;
    for (int j = 0; j < n; ++j) sc[j] += m[j * a.ms[3]];
  }
}

static void item(const SdpaArgs& a, int b, int kh, int l, float* scratch) {
  const int G = a.Hq / a.Hkv, D = a.D, Dv = a.Dv;
  int n = a.S;
  if (a.mask_kind == MaskKind::causal) {
    n = a.S - a.L + l + 1;
    if (n <= 0) n = a.S;  // no key allowed: MLX's masked softmax is uniform
  }
  float* sc = scratch;                     // G x S
  float* qv = sc + (size_t)G * a.S;        // G x D
  float* acc = qv + (size_t)G * D;         // G x Dv
  const float* kb = a.k + b * a.ks[0] + kh * a.ks[1];
  const float* vb = a.v + b * a.vs[0] + kh * a.vs[1];
  for (int g = 0; g < G; ++g) {
    const float* qr = a.q + b * a.qs[0] + (kh * G + g) * a.qs[1] + l * a.qs[2];
    for (int d = 0; d < D; ++d) qv[g * D + d] = qr[d] * a.scale;
  }
  const bool uniform = a.mask_kind == MaskKind::causal && a.S - a.L + l + 1 <= 0;
  for (int g = 0; g < G; ++g) {
    float* row = sc + (size_t)g * a.S;
    int j = 0;
    if (uniform) {
      std::memset(row, 0, sizeof(float) * n);
      continue;
    }
    for (; j + 8 <= n; j += 8) dots8(qv + g * D, kb + j * a.ks[2], a.ks[2], D, row + j);
    for (; j < n; ++j) row[j] = dot(qv + g * D, kb + j * a.ks[2], D);
  }
  float sums[64];
  for (int g = 0; g < G; ++g) {
    float* row = sc + (size_t)g * a.S;
    mask_row(a, b, kh * G + g, l, row, n);
    sums[g] = softmax_exp(row, n);
  }
  for (int g = 0; g < G; ++g) weighted_sum(acc + g * Dv, sc + (size_t)g * a.S, vb, a.vs[2], n, Dv);
  for (int g = 0; g < G; ++g) {
    float* o = a.out + (((size_t)b * a.Hq + kh * G + g) * a.L + l) * Dv;
    const float inv = 1.0f / sums[g];
    for (int d = 0; d < Dv; ++d) o[d] = acc[g * Dv + d] * inv;
  }
}

static void rows(const SdpaArgs& a, int64_t i0, int64_t i1, float* scratch) {
  for (int64_t i = i0; i < i1; ++i) {
    const int l = static_cast<int>(i % a.L);
    const int kh = static_cast<int>((i / a.L) % a.Hkv);
    const int b = static_cast<int>(i / ((int64_t)a.L * a.Hkv));
    item(a, b, kh, l, scratch);
  }
}

}  // namespace SDPA_NS
}  // namespace mlxchat
