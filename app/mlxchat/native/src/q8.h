// Integer dot products for the quantized matmul: x's rows quantized per block
// of 32 values to int8 with a float32 scale each (as llama.cpp's Q8_0
// activations), dotted in integers against MLX's packed unsigned weights:
//
//   y[m, n] = sum_b s[n, g(b)] * d[m, b] * (sum_{i in b} q[n, i] * xq[m, i])
//           + sum_g bias[n, g] * xsum[m, g]
//
// with xsum the sum of the dequantized x (d * xq) over each weight group: y is
// exactly dequantize(w) @ dequantize(xq) up to float32 rounding.
#pragma once

#include <cstdint>

#include "qmm.h"

namespace mlxchat {

constexpr int Q8_BLOCK = 32;

struct Q8Args {
  const int8_t* xq;     // M x K int8, zero-padded by 64 bytes; for 4 bits each
                        // block's 16 even positions then its 16 odd ones (the
                        // nibble order of its 16 packed bytes)
  const float* xd;      // M x (K / 32): each block's scale, x ~= xd * xq
  const float* xsum;    // M x (K / group_size): the dequantized x's group sums
  const uint8_t* w;     // N x (K * bits / 8), as MLX packs it
  const uint8_t* w_end;
  const void* scales;   // N x (K / group_size)
  const void* biases;
  float* y;             // M x N
  int M, N, K, group_size, bits;
  ScaleType scale_type;
};

// One instruction set's kernels. decode: rows [n0, n1) of y for M = 1 (the
// weights read in place, a few rows at a time). prefill: bands [b0, b1) of
// `band` output rows each, for any M (each band's weights unpacked once into
// an int8 tile in cache, then dotted with every row of x).
// quantize: one row of K floats to int8 blocks of 32 (scale = the block's
// largest magnitude / 127, values rounded to nearest even), each block's scale
// in d and its values' sum in sums; `nibbles`: each block's even positions
// first, then its odd ones (the order 4-bit blocks unpack in).
struct Q8Impl {
  const char* name;
  int band;
  void (*decode)(const Q8Args&, int n0, int n1);
  void (*prefill)(const Q8Args&, int b0, int b1);
  void (*quantize)(const float* x, int K, bool nibbles, int8_t* q, float* d, int32_t* sums);
};

Q8Impl q8_generic();
#ifdef MLXCHAT_X86
Q8Impl q8_avx2();
Q8Impl q8_avx512bw();
Q8Impl q8_vnni();
#endif

// y = x @ dequantize(w).T through int8 activations (the driver, q8.cpp): the
// same arguments as the float kernel (x float32, contiguous), xsum unused.
void run_q8(const QmmArgs& a);

// The weights' values of row `n`, block `b` (32 values) in the order x's
// blocks are stored (see Q8Args::xq), as bytes: the portable unpacking.
void q8_block_values(const Q8Args& a, int n, int b, uint8_t* out);

}  // namespace mlxchat
