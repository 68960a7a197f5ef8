// y = x @ dequantize(w).T for MLX's affine-quantized weights, on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlxchat {

enum class ScaleType { f32 = 0, f16 = 1, bf16 = 2 };

struct QmmArgs {
  const float* x;       // M x K, row-major
  const uint8_t* w;     // N x (K * bits / 8): uint32 words, a little-endian bit stream
  const uint8_t* w_end; // w + N * K * bits / 8
  const void* scales;   // N x (K / group_size)
  const void* biases;   // N x (K / group_size)
  const float* xsum;    // M x (K / group_size): each row's sum over each group
  float* y;             // M x N
  int M, N, K, group_size, bits;
  ScaleType scale_type;
};

// Output rows [n0, n1) of y, in one instruction set's code.
using QmmRows = void (*)(const QmmArgs&, int n0, int n1);

QmmRows qmm_rows_generic();
#ifdef MLXCHAT_X86
QmmRows qmm_rows_avx2();
QmmRows qmm_rows_avx512();
#endif

}  // namespace mlxchat
