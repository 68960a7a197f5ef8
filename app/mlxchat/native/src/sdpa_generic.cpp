// Attention in portable code (4 float lanes: SSE on x86, NEON on ARM).
#define SDPA_NS sdpa_generic
#define SDPA_W 4
#include "sdpa_impl.h"

namespace mlxchat {
SdpaRows sdpa_rows_generic() { return &sdpa_generic::rows; }
}  // namespace mlxchat
