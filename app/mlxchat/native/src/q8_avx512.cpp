// The integer-dot quantized matmul in AVX-512 BW code (vpmaddubsw, 64 bytes a vector).
#define Q8_NS isa_q8_avx512bw
#define Q8_LEVEL 2
#include "q8_impl.h"

namespace mlxchat {
Q8Impl q8_avx512bw() {
  return {"avx512bw", isa_q8_avx512bw::BN, &isa_q8_avx512bw::decode, &isa_q8_avx512bw::prefill,
          &isa_q8_avx512bw::quantize};
}
}  // namespace mlxchat
