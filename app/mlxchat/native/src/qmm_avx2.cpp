// The quantized matmul in avx2 code (8 float lanes a vector).
#define QMM_NS isa_avx2
#define QMM_W 8
#include "qmm_impl.h"

namespace mlxchat {
QmmRows qmm_rows_avx2() { return &isa_avx2::rows; }
}  // namespace mlxchat
