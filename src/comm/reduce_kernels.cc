// The reduction loops of reduce_kernels.h, compiled once per instruction-set level
// (src/comm/CMakeLists.txt, kernels/isa_target.h); reduce_dispatch.cc calls the level's copy.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "comm/reduce_kernels.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::comm::STRATA_ISA {

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
inline typename K::Acc combine(typename K::Acc a, typename K::Acc b) {
  if constexpr (Op == ReduceOp::sum || Op == ReduceOp::avg) return K::add(a, b);
  if constexpr (Op == ReduceOp::max) return a < b ? b : a;
  if constexpr (Op == ReduceOp::min) return b < a ? b : a;
}

// Per block of kBlock elements: the first two inputs are combined in one pass into an L1
// accumulator, middle inputs are added to it, and the last input is combined in the pass
// that also divides (avg) and stores to out and out2 — so two inputs take a single pass
// with both stores from registers, never a separate copy to out2. Outputs may alias inputs
// only exactly (same index), which element-wise loops allow: hence `ivdep`.
template <typename K, ReduceOp Op>
void reduce_typed(typename K::Elem* out, typename K::Elem* out2,
                  const typename K::Elem* const* in, int nin, size_t n, int divisor) {
  using Acc = typename K::Acc;
  using Elem = typename K::Elem;
  alignas(64) Acc acc[kBlock];
  const Acc d = Acc(divisor);
  auto finish = [d](Acc v) {
    if constexpr (Op == ReduceOp::avg) return Acc(v / d);
    else return v;
  };
  for (size_t b = 0; b < n; b += kBlock) {
    size_t m = std::min(kBlock, n - b);
    Elem* o = out + b;
    Elem* o2 = out2 ? out2 + b : nullptr;
    auto emit = [&](auto&& value_at) {  // final pass: one or two stores per element
#pragma GCC ivdep
      for (size_t j = 0; j < m; ++j) o[j] = K::store(finish(value_at(j)));
      if (o2) std::memcpy(o2, o, m * sizeof(Elem));
    };
    const Elem* x0 = in[0] + b;
    const Elem* xl = in[nin - 1] + b;
    if (nin == 1) {
      emit([&](size_t j) { return K::load(x0[j]); });
      continue;
    }
    if (nin == 2) {
      emit([&](size_t j) { return combine<K, Op>(K::load(x0[j]), K::load(xl[j])); });
      continue;
    }
    const Elem* x1 = in[1] + b;
    for (size_t j = 0; j < m; ++j) acc[j] = combine<K, Op>(K::load(x0[j]), K::load(x1[j]));
    for (int p = 2; p < nin - 1; ++p) {
      const Elem* x = in[p] + b;
      for (size_t j = 0; j < m; ++j) acc[j] = combine<K, Op>(acc[j], K::load(x[j]));
    }
    emit([&](size_t j) { return combine<K, Op>(acc[j], K::load(xl[j])); });
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
  switch (dtype) {
    case DType::f32: return reduce_op<Plain<float>>(out, out2, in, nin, n, op, divisor);
    case DType::bf16: return reduce_op<BF16>(out, out2, in, nin, n, op, divisor);
    case DType::f64: return reduce_op<Plain<double>>(out, out2, in, nin, n, op, divisor);
    case DType::i32: return reduce_op<Plain<int32_t>>(out, out2, in, nin, n, op, divisor);
    case DType::i64: return reduce_op<Plain<int64_t>>(out, out2, in, nin, n, op, divisor);
    case DType::u8: return reduce_op<Plain<uint8_t>>(out, out2, in, nin, n, op, divisor);
  }
}

}  // namespace strata::comm::STRATA_ISA
