// qmm: y = x @ dequantize(w).T as an MLX primitive with its own CPU kernel
// (MLX's own quantized_matmul is scalar on x86). Evaluated through the CPU
// stream's command encoder; the output allocated by MLX; non-contiguous
// inputs copied first.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "kernels.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"
#include "pool.h"
#include "q8.h"
#include "qmm.h"

namespace mx = mlx::core;
using namespace nb::literals;

namespace mlxchat {
namespace {

QmmRows pick_rows(std::string* isa) {
#ifdef MLXCHAT_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma")) {
    if (isa) *isa = "avx512";
    return qmm_rows_avx512();
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    if (isa) *isa = "avx2";
    return qmm_rows_avx2();
  }
#endif
  if (isa) *isa = "generic";
  return qmm_rows_generic();
}

std::string forced_isa;  // "" = the best this CPU has

QmmRows rows_impl() {
  if (forced_isa == "generic") return qmm_rows_generic();
#ifdef MLXCHAT_X86
  if (forced_isa == "avx2") return qmm_rows_avx2();
#endif
  static QmmRows best = pick_rows(nullptr);
  return best;
}

// A row-major copy of `a`'s bytes when it is not row-contiguous (any view).
const uint8_t* contiguous_bytes(const mx::array& a, std::vector<uint8_t>& holder) {
  if (a.flags().row_contiguous) return static_cast<const uint8_t*>(a.data<void>());
  const size_t item = a.itemsize(), n = a.size();
  holder.resize(n * item);
  const auto& shape = a.shape();
  const auto& strides = a.strides();
  const int nd = static_cast<int>(a.ndim());
  const uint8_t* base = static_cast<const uint8_t*>(a.data<void>());
  std::vector<int> index(nd, 0);
  for (size_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < nd; ++d) off += index[d] * strides[d];
    std::memcpy(holder.data() + i * item, base + off * (int64_t)item, item);
    for (int d = nd - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return holder.data();
}

constexpr double PARALLEL_MACS = 1 << 19;  // below this, one thread
constexpr int BLOCK_ROWS = 16;

void run_qmm(const QmmArgs& base, const mx::array& x, const mx::array& w,
             const mx::array& s, const mx::array& b, float* out, bool int8) {
  std::vector<uint8_t> hx, hw, hs, hb;
  QmmArgs a = base;
  a.x = reinterpret_cast<const float*>(contiguous_bytes(x, hx));
  a.w = contiguous_bytes(w, hw);
  a.w_end = a.w + (size_t)a.N * a.K * a.bits / 8;
  a.scales = contiguous_bytes(s, hs);
  a.biases = contiguous_bytes(b, hb);
  a.y = out;
  if (int8) return run_q8(a);
  const int G = a.K / a.group_size;
  std::vector<float> xsum((size_t)a.M * G);
  for (int m = 0; m < a.M; ++m)
    for (int g = 0; g < G; ++g) {
      const float* p = a.x + (size_t)m * a.K + (size_t)g * a.group_size;
      float t = 0.f;
      for (int i = 0; i < a.group_size; ++i) t += p[i];
      xsum[(size_t)m * G + g] = t;
    }
  a.xsum = xsum.data();
  const QmmRows rows_fn = rows_impl();
  const double macs = (double)a.M * a.N * a.K;
  const int threads = macs < PARALLEL_MACS ? 1 : pool_threads();
  // Blocks of whole 16-row bands, about 8 a thread: a late worker costs little.
  int rows = threads == 1 ? std::max(a.N, 1) : BLOCK_ROWS;
  while (threads > 1 && (a.N + rows - 1) / rows > threads * 8) rows *= 2;
  const int blocks = (a.N + rows - 1) / rows;
  parallel_blocks(blocks, threads, [&](int b) {
    rows_fn(a, b * rows, std::min(a.N, (b + 1) * rows));
  });
}

class QuantizedMatmul : public mx::Primitive {
 public:
  QuantizedMatmul(mx::Stream stream, int group_size, int bits, bool int8)
      : mx::Primitive(stream), group_size_(group_size), bits_(bits), int8_(int8) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    const auto& x = inputs[0];
    const auto& w = inputs[1];
    const auto& s = inputs[2];
    const auto& b = inputs[3];
    auto& out = outputs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    QmmArgs a{};
    a.K = x.shape(-1);
    a.M = static_cast<int>(x.size() / std::max(a.K, 1));
    a.N = w.shape(-2);
    a.group_size = group_size_;
    a.bits = bits_;
    a.scale_type = s.dtype() == mx::float32   ? ScaleType::f32
                   : s.dtype() == mx::float16 ? ScaleType::f16
                                              : ScaleType::bf16;
    auto& encoder = mx::cpu::get_command_encoder(stream());
    encoder.set_input_array(x);
    encoder.set_input_array(w);
    encoder.set_input_array(s);
    encoder.set_input_array(b);
    encoder.set_output_array(out);
    float* y = out.data<float>();
    const bool int8 = int8_;
    encoder.dispatch([a, x, w, s, b, y, int8]() { run_qmm(a, x, w, s, b, y, int8); });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("mlxchat_qmm has no GPU kernel");
  }

  const char* name() const override {
    return int8_ ? "MlxchatQuantizedMatmulInt8" : "MlxchatQuantizedMatmul";
  }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const QuantizedMatmul&>(other);
    return group_size_ == o.group_size_ && bits_ == o.bits_ && int8_ == o.int8_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    auto shape = inputs[0].shape();
    shape.back() = inputs[1].shape(-2);
    return {shape};
  }

 private:
  int group_size_, bits_;
  bool int8_;
};

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("mlxchat qmm: " + what);
}

mx::array qmm(const mx::array& x, const mx::array& w, const mx::array& scales,
              const mx::array& biases, int group_size, int bits, bool int8) {
  check(x.dtype() == mx::float32, "x must be float32");
  check(w.dtype() == mx::uint32 && w.ndim() == 2, "w must be uint32 (out, in * bits / 32)");
  check(bits >= 2 && bits <= 8 && bits != 7, "bits must be 2, 3, 4, 5, 6 or 8");
  check(group_size == 32 || group_size == 64 || group_size == 128,
        "group_size must be 32, 64 or 128");
  check(x.ndim() >= 1, "x needs an input axis");
  const int K = x.shape(-1), N = w.shape(0);
  check(K % group_size == 0 && (int64_t)w.shape(1) * 32 / bits == K,
        "x's last axis must match w's input width");
  const auto sd = scales.dtype();
  check(sd == mx::float32 || sd == mx::float16 || sd == mx::bfloat16,
        "scales must be float32, float16 or bfloat16");
  check(biases.dtype() == sd, "biases must have the scales' dtype");
  check(scales.ndim() == 2 && scales.shape(0) == N && scales.shape(1) == K / group_size &&
            biases.shape() == scales.shape(),
        "scales and biases must be (out, in / group_size)");
  auto shape = x.shape();
  shape.back() = N;
  auto stream = mx::to_stream({}, mx::Device::cpu);
  return mx::array(shape, mx::float32,
                   std::make_shared<QuantizedMatmul>(stream, group_size, bits, int8),
                   {x, w, scales, biases});
}

}  // namespace
}  // namespace mlxchat

void bind_qmm(nb::module_& m) {
  m.def("qmm", &mlxchat::qmm, "x"_a, "w"_a, "scales"_a, "biases"_a, "group_size"_a, "bits"_a,
        "int8"_a = false,
        "x @ dequantize(w, scales, biases).T in float32 on the CPU (affine mode); int8: x "
        "quantized per block of 32 to int8 and dotted in integers (q8_isa).");
  m.def("qmm_isa", [] {
    std::string isa;
    mlxchat::pick_rows(&isa);
    return mlxchat::forced_isa.empty() ? isa : mlxchat::forced_isa;
  }, "The instruction set qmm runs in: avx512, avx2 or generic.");
  m.def("qmm_force_isa", [](const std::string& isa) { mlxchat::forced_isa = isa; },
        "isa"_a, "Run qmm in this instruction set ('' = the best; for tests).");
  m.def("threads", &mlxchat::pool_threads, "Threads the kernels split work across.");
}
