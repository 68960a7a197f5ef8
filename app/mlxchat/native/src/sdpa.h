// Attention for a few query rows over a KV cache, float32, on the CPU.
#pragma once

#include <cstdint>

namespace mlxchat {

enum class MaskKind { none = 0, causal = 1, boolean = 2, additive = 3 };

struct SdpaArgs {
  const float *q, *k, *v;
  float* out;               // B x Hq x L x Dv, row-major
  int B, Hq, Hkv, L, S, D, Dv;
  int64_t qs[3], ks[3], vs[3];  // strides of batch, head, row (last axis contiguous)
  float scale;
  MaskKind mask_kind;
  const void* mask;         // bool (uint8) or float32, strides over (B, Hq, L, S)
  int64_t ms[4];            // 0 on broadcast axes
};

// Items [i0, i1) of B x Hkv x L (a query row of every head sharing one KV
// head); `scratch` holds (Hq / Hkv) x (S + D + Dv) floats.
using SdpaRows = void (*)(const SdpaArgs&, int64_t i0, int64_t i1, float* scratch);

SdpaRows sdpa_rows_generic();
#ifdef MLXCHAT_X86
SdpaRows sdpa_rows_avx2();
#endif

}  // namespace mlxchat
