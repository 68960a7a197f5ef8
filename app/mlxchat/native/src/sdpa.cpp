// sdpa: MLX's fast.scaled_dot_product_attention as one CPU op for float32
// (MLX has no CPU kernel for it: ~15 ops a call, the scores and the mask
// materialized, a scalar softmax). Grouped-query heads, no mask, "causal"
// (the queries are the last L positions) or an array mask (bool: keep where
// true; float: added), broadcast to (B, Hq, L, S). `kv_len`: only the first
// kv_len keys and values (a KV cache's buffers, written by kv_write, read
// without slicing them out). Split across the pool's threads when large enough.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "fused.h"
#include "kernels.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"
#include "pool.h"
#include "sdpa.h"

using namespace nb::literals;

namespace mlxchat {
namespace {

std::string sdpa_forced;  // "" = the best this CPU has

SdpaRows sdpa_impl(std::string* isa) {
#ifdef MLXCHAT_X86
  __builtin_cpu_init();
  if (sdpa_forced != "generic" && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma")) {
    if (isa) *isa = "avx2";
    return sdpa_rows_avx2();
  }
#endif
  if (isa) *isa = "generic";
  return sdpa_rows_generic();
}

// A (B, H, N, D) float32 view with a contiguous last axis: its strides, or a
// row-major copy in `holder` when the last axis is strided.
const float* rows_of(const mx::array& a, std::vector<float>& holder, int64_t* s) {
  if (a.strides()[3] == 1 || a.shape(3) == 1) {
    for (int i = 0; i < 3; ++i) s[i] = a.strides()[i];
    return a.data<float>();
  }
  const auto offs = row_offsets(a);
  const int D = a.shape(3);
  holder.resize(offs.size() * D);
  for (size_t r = 0; r < offs.size(); ++r)
    for (int d = 0; d < D; ++d) holder[r * D + d] = a.data<float>()[offs[r] + d * a.strides()[3]];
  s[2] = D;
  s[1] = (int64_t)a.shape(2) * D;
  s[0] = (int64_t)a.shape(1) * s[1];
  return holder.data();
}

// Below this (~1 ms of work), one thread: waking the pool costs more on a
// busy machine than a decode step's attention (a few hundred keys) takes.
constexpr double PARALLEL_FLOPS = 1 << 24;

void run_sdpa(SdpaArgs a, const std::vector<mx::array>& in) {
  std::vector<float> hq, hk, hv;
  a.q = rows_of(in[0], hq, a.qs);
  a.k = rows_of(in[1], hk, a.ks);
  a.v = rows_of(in[2], hv, a.vs);
  if (a.mask_kind == MaskKind::boolean || a.mask_kind == MaskKind::additive) {
    const auto& m = in[3];
    const int pad = 4 - static_cast<int>(m.ndim());
    for (int i = 0; i < 4; ++i)
      a.ms[i] = i < pad || m.shape(i - pad) == 1 ? 0 : m.strides()[i - pad];
    a.mask = m.data<void>();
  }
  const SdpaRows rows = sdpa_impl(nullptr);
  const int64_t items = (int64_t)a.B * a.Hkv * a.L;
  const double flops = (double)a.B * a.Hq * a.L * a.S * (a.D + a.Dv) * 2;
  const int threads = flops < PARALLEL_FLOPS ? 1 : pool_threads();
  // About 8 blocks a thread, taken from the pool's shared counter.
  const int64_t per = std::max<int64_t>(1, items / (threads * 8));
  const int blocks = static_cast<int>((items + per - 1) / per);
  const size_t scratch = (size_t)(a.Hq / a.Hkv) * (a.S + a.D + a.Dv);
  parallel_blocks(blocks, threads, [&](int blk) {
    std::vector<float> buf(scratch);
    rows(a, blk * per, std::min(items, (blk + 1) * per), buf.data());
  });
}

class Sdpa : public mx::Primitive {
 public:
  Sdpa(mx::Stream stream, float scale, MaskKind kind, int kv_len)
      : mx::Primitive(stream), scale_(scale), kind_(kind), kv_len_(kv_len) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& out = outputs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& encoder = mx::cpu::get_command_encoder(stream());
    for (const auto& x : inputs) encoder.set_input_array(x);
    encoder.set_output_array(out);
    const auto& q = inputs[0];
    const auto& k = inputs[1];
    const auto& v = inputs[2];
    SdpaArgs a{};
    a.out = out.data<float>();
    a.B = q.shape(0), a.Hq = q.shape(1), a.L = q.shape(2), a.D = q.shape(3);
    a.Hkv = k.shape(1), a.S = kv_len_ >= 0 ? kv_len_ : k.shape(2), a.Dv = v.shape(3);
    a.scale = scale_;
    a.mask_kind = kind_;
    encoder.dispatch([a, inputs]() { run_sdpa(a, inputs); });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("mlxchat sdpa has no GPU kernel");
  }
  const char* name() const override { return "MlxchatSDPA"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const Sdpa&>(other);
    return scale_ == o.scale_ && kind_ == o.kind_ && kv_len_ == o.kv_len_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    auto shape = inputs[0].shape();
    shape.back() = inputs[2].shape(-1);
    return {shape};
  }

 private:
  float scale_;
  MaskKind kind_;
  int kv_len_;
};

void check(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("mlxchat sdpa: ") + what);
}

mx::array sdpa(const mx::array& q, const mx::array& k, const mx::array& v, float scale,
               const std::string& mode, std::optional<mx::array> mask, int kv_len) {
  check(q.dtype() == mx::float32 && k.dtype() == mx::float32 && v.dtype() == mx::float32,
        "q, k and v must be float32");
  check(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4, "q, k and v must be (B, H, N, D)");
  check(k.shape(0) == q.shape(0) && v.shape(0) == q.shape(0), "batch sizes must match");
  check(k.shape(3) == q.shape(3) && v.shape(1) == k.shape(1) && v.shape(2) == k.shape(2),
        "k must match q's head size and v k's heads and length");
  check(q.shape(1) % k.shape(1) == 0 && q.shape(1) / k.shape(1) <= 64,
        "query heads must be a multiple (at most 64) of the KV heads");
  check(mode.empty() || mode == "causal", "mode must be '' or 'causal'");
  check(kv_len <= k.shape(2), "kv_len must be at most the keys' length");
  const int S = kv_len >= 0 ? kv_len : k.shape(2);
  auto kind = mode == "causal" ? MaskKind::causal : MaskKind::none;
  auto stream = mx::to_stream({}, mx::Device::cpu);
  std::vector<mx::array> inputs{q, k, v};
  if (mask) {
    check(kind == MaskKind::none, "a mask array and 'causal' exclude each other");
    check(mask->dtype() == mx::bool_ || mask->dtype() == mx::float32,
          "the mask must be bool or float32");
    check(mask->ndim() <= 4, "the mask must have at most 4 axes");
    mx::Shape full{q.shape(0), q.shape(1), q.shape(2), S};
    inputs.push_back(mx::broadcast_to(*mask, full, stream));
    kind = mask->dtype() == mx::bool_ ? MaskKind::boolean : MaskKind::additive;
  }
  mx::Shape shape{q.shape(0), q.shape(1), q.shape(2), v.shape(3)};
  return mx::array(shape, mx::float32, std::make_shared<Sdpa>(stream, scale, kind, kv_len),
                   std::move(inputs));
}

}  // namespace
}  // namespace mlxchat

void bind_sdpa(nb::module_& m) {
  m.def("sdpa", &mlxchat::sdpa, "q"_a, "k"_a, "v"_a, "scale"_a, "mode"_a = "",
        "mask"_a.none() = nb::none(), "kv_len"_a = -1,
        "mx.fast.scaled_dot_product_attention for float32 as one CPU op (kv_len >= 0: over "
        "the first kv_len keys and values only).");
  m.def("sdpa_isa", [] {
    std::string isa;
    mlxchat::sdpa_impl(&isa);
    return isa;
  }, "The instruction set sdpa runs in: avx2 or generic.");
  m.def("sdpa_force_isa", [](const std::string& isa) { mlxchat::sdpa_forced = isa; }, "isa"_a,
        "Run sdpa in this instruction set ('' = the best; for tests).");
}
