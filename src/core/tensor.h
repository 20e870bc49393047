// Tensor views: a pointer into a contiguous buffer plus a shape. Views never own memory;
// owners are Buffers (core/memory.h) such as the flat parameter and gradient buffers.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"

namespace strata {

using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

inline std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  out += ')';
  return out;
}

template <typename T>
struct TensorView {
  T* data = nullptr;
  Shape shape;

  TensorView() = default;
  TensorView(T* d, Shape s) : data(d), shape(std::move(s)) {}

  int64_t size() const { return numel(shape); }
  int64_t dim(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }
  int rank() const { return int(shape.size()); }
  T& operator[](int64_t i) const { return data[i]; }
  T* begin() const { return data; }
  T* end() const { return data + size(); }

  // Same memory, new shape with the same element count.
  TensorView reshape(Shape s) const {
    STRATA_CHECK(numel(s) == size(), "cannot reshape ", shape_str(shape), " to ", shape_str(s));
    return TensorView(data, std::move(s));
  }
  // Rows [begin, end) of the leading dimension.
  TensorView slice(int64_t begin, int64_t end) const {
    STRATA_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape[0], "slice [", begin,
                 ",", end, ") out of range for ", shape_str(shape));
    Shape s = shape;
    s[0] = end - begin;
    return TensorView(data + begin * (size() / std::max<int64_t>(shape[0], 1)), s);
  }
};

using Tensor = TensorView<float>;

}  // namespace strata
