// The integer-dot quantized matmul's driver: x's rows quantized per block of
// 32 to int8 (scale = the block's largest magnitude / 127, values rounded to
// nearest), then the instruction set's kernels across the pool's threads:
// one row (decode) reads the weights in place; more rows (prefill, or a
// verifying pass) go band by band, each band's weights unpacked once into a
// tile that every row of x is dotted with. Chosen at run time: AVX-512 VNNI
// (with VBMI), AVX-512 BW, AVX2, or the portable code.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels.h"
#include "mlx/mlx.h"
#include "pool.h"
#include "q8.h"

namespace mx = mlx::core;
using namespace nb::literals;

namespace mlxchat {
namespace {

std::string q8_forced;  // "" = the best this CPU has

#ifdef MLXCHAT_X86
bool cpu_has(const std::string& isa) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool bw = avx2 && __builtin_cpu_supports("avx512f") &&
                  __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  if (isa == "vnni")
    return bw && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
  if (isa == "avx512bw") return bw;
  if (isa == "avx2") return avx2;
  return isa == "generic";
}
#else
bool cpu_has(const std::string& isa) { return isa == "generic"; }
#endif

Q8Impl impl_named(const std::string& isa) {
#ifdef MLXCHAT_X86
  if (isa == "vnni") return q8_vnni();
  if (isa == "avx512bw") return q8_avx512bw();
  if (isa == "avx2") return q8_avx2();
#endif
  return q8_generic();
}

const char* const ORDER[] = {"vnni", "avx512bw", "avx2", "generic"};

Q8Impl q8_impl() {
  if (!q8_forced.empty()) return impl_named(q8_forced);
  static const Q8Impl best = [] {
    for (const char* isa : ORDER)
      if (cpu_has(isa)) return impl_named(isa);
    return q8_generic();
  }();
  return best;
}

constexpr double PARALLEL_MACS = 1 << 19;  // below this, one thread

}  // namespace

void run_q8(const QmmArgs& q) {
  const int M = q.M, K = q.K, B = K / Q8_BLOCK, G = K / q.group_size;
  const int per = q.group_size / Q8_BLOCK;
  const Q8Impl impl = q8_impl();
  // Called on MLX's CPU stream (one thread): the buffers stay for the next call.
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xd, xsum;
  thread_local std::vector<int32_t> sums;
  xq.resize((size_t)M * K + 64);
  std::fill(xq.begin() + (size_t)M * K, xq.end(), 0);  // a vector reads past K
  xd.resize((size_t)M * B + 2);
  xd[(size_t)M * B] = xd[(size_t)M * B + 1] = 0.f;
  xsum.resize((size_t)M * G);
  sums.resize((size_t)M * B);
  for (int m = 0; m < M; ++m) {
    float* d = xd.data() + (size_t)m * B;
    const int32_t* s = sums.data() + (size_t)m * B;
    impl.quantize(q.x + (size_t)m * K, K, q.bits == 4, xq.data() + (size_t)m * K, d,
                  sums.data() + (size_t)m * B);
    for (int g = 0; g < G; ++g) {
      float t = 0.f;
      for (int b = g * per; b < (g + 1) * per; ++b) t += d[b] * (float)s[b];
      xsum[(size_t)m * G + g] = t;
    }
  }
  const Q8Args a{xq.data(), xd.data(), xsum.data(), q.w, q.w_end, q.scales, q.biases, q.y,
                 M, q.N, K, q.group_size, q.bits, q.scale_type};
  const double macs = (double)M * q.N * K;
  const int threads = macs < PARALLEL_MACS ? 1 : pool_threads();
  if (M == 1) {  // whole 16-row bands, about 8 a thread
    int rows = threads == 1 ? std::max(q.N, 1) : 16;
    while (threads > 1 && (q.N + rows - 1) / rows > threads * 8) rows *= 2;
    parallel_blocks((q.N + rows - 1) / rows, threads, [&](int b) {
      impl.decode(a, b * rows, std::min(q.N, (b + 1) * rows));
    });
    return;
  }
  const int bands = (q.N + impl.band - 1) / impl.band;
  int per_block = threads == 1 ? std::max(bands, 1) : 1;
  while (threads > 1 && (bands + per_block - 1) / per_block > threads * 8) per_block *= 2;
  parallel_blocks((bands + per_block - 1) / per_block, threads, [&](int b) {
    impl.prefill(a, b * per_block, std::min(bands, (b + 1) * per_block));
  });
}

}  // namespace mlxchat

void bind_q8(nb::module_& m) {
  m.def("q8_isa", [] { return std::string(mlxchat::q8_impl().name); },
        "The instruction set the int8 matmul runs in: vnni, avx512bw, avx2 or generic.");
  m.def("q8_force_isa", [](const std::string& isa) {
    if (!isa.empty() && !mlxchat::cpu_has(isa))
      throw std::invalid_argument("this CPU does not run " + isa);
    mlxchat::q8_forced = isa;
  }, "isa"_a, "Run the int8 matmul in this instruction set ('' = the best; for tests).");
  m.def("quantize_q8", [](const mx::array& x) {
    if (x.dtype() != mx::float32 || x.ndim() < 1 || x.shape(-1) % mlxchat::Q8_BLOCK != 0)
      throw std::invalid_argument("mlxchat quantize_q8: x must be float32, its last axis a "
                                  "multiple of 32");
    auto c = mx::contiguous(x);
    c.eval();
    const int K = x.shape(-1), M = static_cast<int>(x.size() / K), B = K / mlxchat::Q8_BLOCK;
    std::vector<int8_t> q((size_t)M * K);
    std::vector<float> d((size_t)M * B);
    std::vector<int32_t> sums(B);
    const auto impl = mlxchat::q8_impl();
    for (int r = 0; r < M; ++r)
      impl.quantize(c.data<float>() + (size_t)r * K, K, false, q.data() + (size_t)r * K,
                    d.data() + (size_t)r * B, sums.data());
    auto dshape = x.shape();
    dshape.back() = B;
    return std::make_tuple(mx::array(q.begin(), x.shape(), mx::int8),
                           mx::array(d.begin(), dshape, mx::float32));
  }, "x"_a, "x's rows as the int8 matmul quantizes them (in q8_isa's code): (values int8, "
     "block scales float32).");
}
