// The quantized matmul in avx512 code (16 float lanes a vector).
#define QMM_NS isa_avx512
#define QMM_W 16
#include "qmm_impl.h"

namespace mlxchat {
QmmRows qmm_rows_avx512() { return &isa_avx512::rows; }
}  // namespace mlxchat
