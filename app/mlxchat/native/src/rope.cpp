// rope: MLX's fast.rope as one CPU op (MLX has no CPU kernel for it: ~20 ops
// a call, cos/sin recomputed in each). Same semantics: traditional (pairs
// 2i, 2i+1) or not (halves), base or freqs, scale, an offset per batch row
// (one or B), dims <= the last axis (the rest copied). Positions, angles,
// cos and sin in float32; products rounded to x's type as MLX's ops round.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>

#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>

#include "fused.h"
#include "kernels.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

using namespace nb::literals;

namespace mlxchat {
namespace {

struct RopeParams {
  int dims;
  bool traditional;
  float base, scale;
  bool has_freqs;
};

// cos and sin of (t + offset[b]) * scale * inv_freq[i]: [b][t][i], i < dims / 2.
void angles(const RopeParams& p, const mx::array& offset, const mx::array* freqs, int B, int T,
            std::vector<float>& cs, std::vector<float>& sn) {
  const int half = p.dims / 2;
  std::vector<float> inv(half);
  const float coef = std::log(p.base) / static_cast<float>(half);
  for (int i = 0; i < half; ++i)
    inv[i] = freqs ? 1.0f / freqs->data<float>()[i * freqs->strides()[0]]
                   : std::exp(static_cast<float>(-i) * coef);
  const int nb = offset.size() == 1 ? 1 : B;
  cs.resize((size_t)nb * T * half);
  sn.resize(cs.size());
  for (int b = 0; b < nb; ++b) {
    const int64_t stride = offset.ndim() ? offset.strides()[0] : 0;
    const float off = static_cast<float>(offset.data<int32_t>()[b * stride]);
    for (int t = 0; t < T; ++t) {
      const float pos = (static_cast<float>(t) + off) * p.scale;
      for (int i = 0; i < half; ++i) {
        const float theta = pos * inv[i];
        cs[((size_t)b * T + t) * half + i] = std::cos(theta);
        sn[((size_t)b * T + t) * half + i] = std::sin(theta);
      }
    }
  }
}

template <typename T>
void rope_rows(const RopeParams& p, const mx::array& x, const mx::array& offset,
               const mx::array* freqs, T* out) {
  const int D = x.shape(-1), T_ = x.shape(-2), B = x.shape(0), half = p.dims / 2;
  std::vector<float> cs, sn;
  angles(p, offset, freqs, B, T_, cs, sn);
  const auto rows = row_offsets(x);
  const int64_t per_b = rows.size() / B, xs = x.strides().back();
  const T* xp = x.data<T>();
  const bool one = offset.size() == 1;
  for (size_t r = 0; r < rows.size(); ++r) {
    const T* row = xp + rows[r];
    T* o = out + r * D;
    const int b = one ? 0 : static_cast<int>(r / per_b), t = static_cast<int>(r % T_);
    const float* c = cs.data() + ((size_t)b * T_ + t) * half;
    const float* s = sn.data() + ((size_t)b * T_ + t) * half;
    for (int i = 0; i < half; ++i) {
      const int i1 = p.traditional ? 2 * i : i, i2 = p.traditional ? 2 * i + 1 : i + half;
      const float x1 = to_f<T>(row[i1 * xs]), x2 = to_f<T>(row[i2 * xs]);
      const float ci = round_as<T>(c[i]), si = round_as<T>(s[i]);
      o[i1] = from_f<T>(round_as<T>(x1 * ci) - round_as<T>(x2 * si));
      o[i2] = from_f<T>(round_as<T>(x1 * si) + round_as<T>(x2 * ci));
    }
    for (int i = p.dims; i < D; ++i) o[i] = row[i * xs];
  }
}

class Rope : public mx::Primitive {
 public:
  Rope(mx::Stream stream, RopeParams p) : mx::Primitive(stream), p_(p) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& out = outputs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& encoder = mx::cpu::get_command_encoder(stream());
    for (const auto& a : inputs) encoder.set_input_array(a);
    encoder.set_output_array(out);
    void* y = out.data<void>();
    encoder.dispatch([p = p_, inputs, y]() {
      const mx::array* freqs = p.has_freqs ? &inputs[2] : nullptr;
      by_dtype(inputs[0].dtype(), [&](auto tag) {
        using T = decltype(tag);
        rope_rows<T>(p, inputs[0], inputs[1], freqs, static_cast<T*>(y));
      });
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("mlxchat rope has no GPU kernel");
  }
  const char* name() const override { return "MlxchatRoPE"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const Rope&>(other).p_;
    return p_.dims == o.dims && p_.traditional == o.traditional && p_.base == o.base &&
           p_.scale == o.scale && p_.has_freqs == o.has_freqs;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  RopeParams p_;
};

mx::array rope(const mx::array& x, int dims, bool traditional, std::optional<float> base,
               float scale, const mx::array& offset, std::optional<mx::array> freqs) {
  if (!float_dtype(x.dtype()) || x.ndim() < 3)
    throw std::invalid_argument("mlxchat rope: x must be a float array of 3 or more axes");
  if (dims <= 0 || dims % 2 || dims > x.shape(-1))
    throw std::invalid_argument("mlxchat rope: dims must be even and within x's last axis");
  if (base.has_value() == freqs.has_value())
    throw std::invalid_argument("mlxchat rope: give one of base or freqs");
  if (offset.ndim() > 1 || (offset.size() != 1 && offset.size() != x.shape(0)))
    throw std::invalid_argument("mlxchat rope: offset must be a scalar or one per batch row");
  auto stream = mx::to_stream({}, mx::Device::cpu);
  std::vector<mx::array> inputs{x, mx::astype(offset, mx::int32, stream)};
  if (freqs) {
    if (freqs->ndim() != 1 || freqs->shape(0) != dims / 2)
      throw std::invalid_argument("mlxchat rope: freqs must have dims / 2 values");
    inputs.push_back(mx::astype(*freqs, mx::float32, stream));
  }
  RopeParams p{dims, traditional, base.value_or(1.0f), scale, freqs.has_value()};
  return mx::array(x.shape(), x.dtype(), std::make_shared<Rope>(stream, p), std::move(inputs));
}

}  // namespace
}  // namespace mlxchat

void bind_rope(nb::module_& m) {
  m.def("rope", &mlxchat::rope, "x"_a, "dims"_a, "traditional"_a, "base"_a.none(), "scale"_a,
        "offset"_a, "freqs"_a.none() = nb::none(),
        "mx.fast.rope as one CPU op (offset: an int32 array of one value or one per batch row).");
}
