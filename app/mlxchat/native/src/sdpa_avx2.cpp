// Attention in avx2 code (8 float lanes a vector).
#define SDPA_NS sdpa_avx2
#define SDPA_W 8
#include "sdpa_impl.h"

namespace mlxchat {
SdpaRows sdpa_rows_avx2() { return &sdpa_avx2::rows; }
}  // namespace mlxchat
