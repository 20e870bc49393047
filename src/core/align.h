// Rounding sizes up to a multiple: the one spelling of it in strata, for byte offsets (cache
// lines, pages) and for model widths (the padded vocabulary, Llama's MLP width: cost/shapes.h).
#pragma once
#include <type_traits>

namespace strata {

// x rounded up to a multiple of a (a > 0), in x's type.
template <class T>
constexpr T round_up(T x, std::type_identity_t<T> a) {
  return (x + a - 1) / a * a;
}

// x rounded up to a multiple of 64: a cache line, the alignment of every tensor in strata's
// checkpoint shards and in-memory checkpoint segments, and the padded vocabulary's rows.
template <class T>
constexpr T align64(T x) {
  return round_up(x, 64);
}

}  // namespace strata
