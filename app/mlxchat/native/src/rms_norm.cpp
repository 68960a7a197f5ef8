// rms_norm: MLX's fast.rms_norm as one CPU op (MLX has no CPU kernel for it:
// it expands into ~8 ops a call). Computed as MLX's composed ops do: in
// float32, the normalized value rounded to the input's type, then times the
// weight, rounded again.
#include <nanobind/nanobind.h>

#include <cmath>
#include <memory>
#include <stdexcept>

#include "fused.h"
#include "kernels.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

using namespace nb::literals;

namespace mlxchat {
namespace {

template <typename T>
void rms_rows(const mx::array& x, const mx::array& w, float eps, T* out) {
  const int D = x.shape(-1);
  const int64_t xs = x.strides().back(), ws = w.strides()[0];
  const T* xp = x.data<T>();
  const T* wp = w.data<T>();
  const auto rows = row_offsets(x);
  for (size_t r = 0; r < rows.size(); ++r) {
    const T* row = xp + rows[r];
    float sum = 0.f;
    for (int i = 0; i < D; ++i) {
      const float v = to_f<T>(row[i * xs]);
      sum += v * v;
    }
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(D) + eps);
    T* o = out + r * D;
    for (int i = 0; i < D; ++i) {
      const float n = round_as<T>(to_f<T>(row[i * xs]) * inv);
      o[i] = from_f<T>(n * to_f<T>(wp[i * ws]));
    }
  }
}

class RmsNorm : public mx::Primitive {
 public:
  RmsNorm(mx::Stream stream, float eps) : mx::Primitive(stream), eps_(eps) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    const auto& x = inputs[0];
    const auto& w = inputs[1];
    auto& out = outputs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& encoder = mx::cpu::get_command_encoder(stream());
    encoder.set_input_array(x);
    encoder.set_input_array(w);
    encoder.set_output_array(out);
    const float eps = eps_;
    void* y = out.data<void>();
    encoder.dispatch([x, w, eps, y]() {
      by_dtype(x.dtype(), [&](auto tag) {
        using T = decltype(tag);
        rms_rows<T>(x, w, eps, static_cast<T*>(y));
      });
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("mlxchat rms_norm has no GPU kernel");
  }
  const char* name() const override { return "MlxchatRMSNorm"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return eps_ == static_cast<const RmsNorm&>(other).eps_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  float eps_;
};

mx::array rms_norm(const mx::array& x, const mx::array& weight, float eps) {
  if (!float_dtype(x.dtype()) || weight.dtype() != x.dtype())
    throw std::invalid_argument("mlxchat rms_norm: x and weight must share a float dtype");
  if (x.ndim() < 1 || weight.ndim() != 1 || weight.shape(0) != x.shape(-1))
    throw std::invalid_argument("mlxchat rms_norm: weight must match x's last axis");
  auto stream = mx::to_stream({}, mx::Device::cpu);
  return mx::array(x.shape(), x.dtype(), std::make_shared<RmsNorm>(stream, eps), {x, weight});
}

}  // namespace
}  // namespace mlxchat

void bind_rms_norm(nb::module_& m) {
  m.def("rms_norm", &mlxchat::rms_norm, "x"_a, "weight"_a, "eps"_a,
        "mx.fast.rms_norm(x, weight, eps) as one CPU op (x and weight of one float dtype).");
}
