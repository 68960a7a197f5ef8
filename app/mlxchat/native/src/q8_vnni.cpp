// The integer-dot quantized matmul in AVX-512 VNNI code (vpdpbusd; VBMI's byte
// shuffles unpack the 2/3/5/6-bit streams).
#define Q8_NS isa_q8_vnni
#define Q8_LEVEL 3
#include "q8_impl.h"

namespace mlxchat {
Q8Impl q8_vnni() { return {"vnni", isa_q8_vnni::BN, &isa_q8_vnni::decode, &isa_q8_vnni::prefill,
          &isa_q8_vnni::quantize}; }
}  // namespace mlxchat
