#include "comm/reduce_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/error.h"

namespace strata::comm {

namespace {

constexpr size_t kBlock = 512;

// Plain element types; sums wrap for integers (computed unsigned), max/min compare natively.
template <typename T>
struct Plain {
  using Elem = T;
  using Acc = T;
  static Acc load(Elem x) { return x; }
  static Elem store(Acc x) { return x; }
  static Acc add(Acc a, Acc b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return T(U(a) + U(b));
    } else {
      return a + b;
    }
  }
};

struct BF16 {
  using Elem = uint16_t;
  using Acc = float;
  static Acc load(Elem x) { return bf16_to_f32(x); }
  static Elem store(Acc x) { return f32_to_bf16(x); }
  static Acc add(Acc a, Acc b) { return a + b; }
};

template <typename K, ReduceOp Op>
void reduce_typed(typename K::Elem* out, typename K::Elem* out2,
                  const typename K::Elem* const* in, int nin, size_t n, int divisor) {
  using Acc = typename K::Acc;
  alignas(64) Acc acc[kBlock];
  for (size_t b = 0; b < n; b += kBlock) {
    size_t m = std::min(kBlock, n - b);
    const typename K::Elem* x0 = in[0] + b;
    for (size_t j = 0; j < m; ++j) acc[j] = K::load(x0[j]);
    for (int p = 1; p < nin; ++p) {
      const typename K::Elem* x = in[p] + b;
      for (size_t j = 0; j < m; ++j) {
        Acc v = K::load(x[j]);
        if constexpr (Op == ReduceOp::sum || Op == ReduceOp::avg) acc[j] = K::add(acc[j], v);
        if constexpr (Op == ReduceOp::max) acc[j] = acc[j] < v ? v : acc[j];
        if constexpr (Op == ReduceOp::min) acc[j] = v < acc[j] ? v : acc[j];
      }
    }
    if constexpr (Op == ReduceOp::avg) {
      Acc d = Acc(divisor);
      for (size_t j = 0; j < m; ++j) acc[j] = acc[j] / d;
    }
    typename K::Elem* o = out + b;
    for (size_t j = 0; j < m; ++j) o[j] = K::store(acc[j]);
    if (out2) std::memcpy(out2 + b, o, m * sizeof(typename K::Elem));
  }
}

template <typename K>
void reduce_op(void* out, void* out2, const void* const* in, int nin, size_t n, ReduceOp op,
               int divisor) {
  using E = typename K::Elem;
  auto o = static_cast<E*>(out);
  auto o2 = static_cast<E*>(out2);
  auto i = reinterpret_cast<const E* const*>(in);
  switch (op) {
    case ReduceOp::sum: return reduce_typed<K, ReduceOp::sum>(o, o2, i, nin, n, divisor);
    case ReduceOp::avg: return reduce_typed<K, ReduceOp::avg>(o, o2, i, nin, n, divisor);
    case ReduceOp::max: return reduce_typed<K, ReduceOp::max>(o, o2, i, nin, n, divisor);
    case ReduceOp::min: return reduce_typed<K, ReduceOp::min>(o, o2, i, nin, n, divisor);
  }
}

}  // namespace

void reduce_inputs(void* out, void* out2, const void* const* in, int nin, size_t n, DType dtype,
                   ReduceOp op, int divisor) {
  STRATA_CHECK(nin >= 1, "reduce_inputs: no inputs");
  switch (dtype) {
    case DType::f32: return reduce_op<Plain<float>>(out, out2, in, nin, n, op, divisor);
    case DType::bf16: return reduce_op<BF16>(out, out2, in, nin, n, op, divisor);
    case DType::f64: return reduce_op<Plain<double>>(out, out2, in, nin, n, op, divisor);
    case DType::i32: return reduce_op<Plain<int32_t>>(out, out2, in, nin, n, op, divisor);
    case DType::i64: return reduce_op<Plain<int64_t>>(out, out2, in, nin, n, op, divisor);
    case DType::u8: return reduce_op<Plain<uint8_t>>(out, out2, in, nin, n, op, divisor);
  }
}

void divide_in_place(void* data, size_t n, DType dtype, int divisor) {
  const void* in[1] = {data};
  reduce_inputs(data, nullptr, in, 1, n, dtype, ReduceOp::avg, divisor);
}

}  // namespace strata::comm
