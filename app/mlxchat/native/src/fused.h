// Helpers shared by the fused kernels (rms_norm, rope, sdpa): element access
// through an array's strides, and float16/bfloat16 rounding as MLX does it.
#pragma once

#include <cstdint>
#include <vector>

#include "mlx/array.h"
#include "mlx/types/half_types.h"

namespace mlxchat {

namespace mx = mlx::core;

// Element offsets of every row (all axes but the last) of `a`, in row-major
// order of the logical shape.
inline std::vector<int64_t> row_offsets(const mx::array& a) {
  const int nd = static_cast<int>(a.ndim());
  const int64_t rows = a.size() / (nd ? a.shape(-1) : 1);
  std::vector<int64_t> out(rows);
  std::vector<int> index(nd > 1 ? nd - 1 : 0, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0;
    for (int d = 0; d + 1 < nd; ++d) off += index[d] * a.strides()[d];
    out[r] = off;
    for (int d = nd - 2; d >= 0; --d) {
      if (++index[d] < a.shape(d)) break;
      index[d] = 0;
    }
  }
  return out;
}

// Float storage types: float itself, or MLX's halves (rounded to nearest even).
template <typename T> inline float to_f(T v) { return static_cast<float>(v); }
template <typename T> inline T from_f(float v) { return static_cast<T>(v); }
// The value float `v` takes once stored as T and read back (MLX rounds each op).
template <typename T> inline float round_as(float v) { return to_f<T>(from_f<T>(v)); }

// Run f<T>() for T the storage type of `dtype` (float32, float16, bfloat16).
template <typename F> inline void by_dtype(mx::Dtype dtype, F&& f) {
  if (dtype == mx::float32) {
    f(float{});
  } else if (dtype == mx::float16) {
    f(mx::float16_t{});
  } else {
    f(mx::bfloat16_t{});
  }
}

inline bool float_dtype(mx::Dtype d) {
  return d == mx::float32 || d == mx::float16 || d == mx::bfloat16;
}

}  // namespace mlxchat
