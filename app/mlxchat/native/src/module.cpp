// _mlxchat_native: mlxchat's CPU kernels for MLX. One line per kernel.
#include "kernels.h"

NB_MODULE(_mlxchat_native, m) {
  m.doc() = "mlxchat's native CPU kernels (an MLX extension)";
  bind_qmm(m);
  bind_q8(m);
  bind_rms_norm(m);
  bind_rope(m);
  bind_sdpa(m);
}
