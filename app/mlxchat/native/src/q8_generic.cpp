// The integer-dot quantized matmul in portable code: one weight block (32
// values) unpacked to bytes at a time, dotted in int32 with x's block. Slow
// beside the SIMD files, the reference every instruction set must agree with.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "q8.h"

namespace mlxchat {

void q8_block_values(const Q8Args& a, int n, int b, uint8_t* out) {
  const int bits = a.bits, mask = (1 << bits) - 1;
  const uint8_t* row = a.w + (size_t)n * a.K * bits / 8;
  if (bits == 4) {  // 16 bytes: the low nibbles (even positions), then the high ones
    const uint8_t* p = row + (size_t)b * 16;
    for (int i = 0; i < 16; ++i) {
      out[i] = p[i] & 15;
      out[16 + i] = p[i] >> 4;
    }
    return;
  }
  const size_t first = (size_t)b * Q8_BLOCK * bits;  // the block's first bit
  for (int i = 0; i < Q8_BLOCK; ++i) {  // a little-endian bit stream: two bytes
    const size_t bit = first + (size_t)i * bits, at = bit / 8;
    const unsigned lo = row[at], hi = row + at + 1 < a.w_end ? row[at + 1] : 0;
    out[i] = ((lo | (hi << 8)) >> (bit % 8)) & mask;
  }
}

namespace isa_q8_generic {
namespace {

void quantize(const float* x, int K, bool nibbles, int8_t* q, float* d, int32_t* sums) {
  for (int b = 0; b < K / Q8_BLOCK; ++b) {
    const float* v = x + b * Q8_BLOCK;
    float amax = 0.f;
    for (int i = 0; i < Q8_BLOCK; ++i) amax = std::max(amax, std::fabs(v[i]));
    d[b] = amax / 127.f;
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    int8_t* out = q + b * Q8_BLOCK;
    int32_t sum = 0;
    for (int i = 0; i < Q8_BLOCK; ++i) {
      const int8_t iv = (int8_t)std::min(127.f, std::max(-127.f, std::nearbyint(v[i] * inv)));
      out[nibbles ? (i % 2) * 16 + i / 2 : i] = iv;
      sum += iv;
    }
    sums[b] = sum;
  }
}

#include "shared_impl.h"

template <ScaleType S>
float dot_row(const Q8Args& a, int m, int n) {
  const int G = a.K / a.group_size, B = a.K / Q8_BLOCK, per = a.group_size / Q8_BLOCK;
  const int8_t* x = a.xq + (size_t)m * a.K;
  uint8_t q[Q8_BLOCK];
  float y = 0.f;
  for (int g = 0; g < G; ++g) {
    float t = 0.f;
    for (int b = g * per; b < (g + 1) * per; ++b) {
      q8_block_values(a, n, b, q);
      int32_t sum = 0;
      for (int i = 0; i < Q8_BLOCK; ++i) sum += (int32_t)q[i] * x[b * Q8_BLOCK + i];
      t += a.xd[(size_t)m * B + b] * (float)sum;
    }
    const size_t at = (size_t)n * G + g;
    y += scale_at<S>(a.scales, at) * t + scale_at<S>(a.biases, at) * a.xsum[(size_t)m * G + g];
  }
  return y;
}

template <ScaleType S>
void rows(const Q8Args& a, int m0, int m1, int n0, int n1) {
  for (int m = m0; m < m1; ++m)
    for (int n = n0; n < n1; ++n) a.y[(size_t)m * a.N + n] = dot_row<S>(a, m, n);
}

void by_scale(const Q8Args& a, int m1, int n0, int n1) {
  switch (a.scale_type) {
    case ScaleType::f32: return rows<ScaleType::f32>(a, 0, m1, n0, n1);
    case ScaleType::f16: return rows<ScaleType::f16>(a, 0, m1, n0, n1);
    default: return rows<ScaleType::bf16>(a, 0, m1, n0, n1);
  }
}

constexpr int BAND = 8;

void decode(const Q8Args& a, int n0, int n1) { by_scale(a, 1, n0, n1); }

void prefill(const Q8Args& a, int b0, int b1) {
  by_scale(a, a.M, b0 * BAND, std::min(a.N, b1 * BAND));
}

}  // namespace
}  // namespace isa_q8_generic

Q8Impl q8_generic() {
  return {"generic", isa_q8_generic::BAND, &isa_q8_generic::decode, &isa_q8_generic::prefill,
          &isa_q8_generic::quantize};
}

}  // namespace mlxchat
