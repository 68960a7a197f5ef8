// The integer-dot quantized matmul in AVX2 code (vpmaddubsw, 32 bytes a vector).
#define Q8_NS isa_q8_avx2
#define Q8_LEVEL 1
#include "q8_impl.h"

namespace mlxchat {
Q8Impl q8_avx2() { return {"avx2", isa_q8_avx2::BN, &isa_q8_avx2::decode, &isa_q8_avx2::prefill,
          &isa_q8_avx2::quantize}; }
}  // namespace mlxchat
