// The quantized matmul in generic code (8 float lanes a vector).
#define QMM_NS isa_generic
#define QMM_W 8
#include "qmm_impl.h"

namespace mlxchat {
QmmRows qmm_rows_generic() { return &isa_generic::rows; }
}  // namespace mlxchat
