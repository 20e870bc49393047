// Box arithmetic for tensor checkpoints: how the saved chunks and a rank's pieces
// (core/tensor_layout.h) map onto the global tensors.
//
// Terms.
//   box     a sub-block of a global tensor: offsets and extents per dimension.
//   flat    a range [begin, end) of a box's elements in the box's own row-major order. A
//           ZeRO write range cuts a piece anywhere, so a saved chunk is (box, flat range).
//   run     a maximal stretch of consecutive global row-major positions inside (box, flat):
//           a box of full-width rows is one run; a column box is one run per row.
//   chunk   (state, tensor, box, flat) stored contiguously in one shard file.
// Loading lays the runs of the wanted (piece, flat) over the sorted runs of the saved chunks
// of that tensor: the cost is one copy per overlap of two runs, O(R log R) for R runs, never
// per element.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/ranges.h"
#include "core/tensor.h"
#include "core/tensor_layout.h"

namespace strata::ckpt {

// One named global tensor. `offset` is its place in the tp=1 flat order (the tensors of the
// table one after another), which is also where a range-based (version 1) checkpoint kept it.
struct TensorInfo {
  std::string name;
  Shape shape;
  int64_t offset = 0;
};

// Row-major strides of `shape`.
std::vector<int64_t> strides_of(const Shape& shape);

// "[3, 17]": the coordinates of global position `pos` of a tensor of `shape`.
std::string coord_str(const Shape& shape, int64_t pos);
// "[0:384, 128:256]": a box.
std::string box_str(const std::vector<int64_t>& offsets, const Shape& extents);

// Calls fn(box_pos, global_pos, count) for every run of (box, flat), in box order.
template <typename Fn>
void for_each_run(const Shape& shape, const std::vector<int64_t>& offsets, const Shape& extents,
                  Range flat, Fn&& fn) {
  if (flat.empty()) return;
  const int d = int(shape.size());
  // Dimensions past k are whole, so a box row (dims k.. d-1) is contiguous globally.
  int k = d - 1;
  while (k > 0 && extents[size_t(k)] == shape[size_t(k)]) --k;
  int64_t inner = 1;
  for (int j = d - 1; j > k; --j) inner *= shape[size_t(j)];
  const int64_t row = d == 0 ? 1 : extents[size_t(k)] * inner;
  const std::vector<int64_t> stride = strides_of(shape);
  for (int64_t r = flat.begin / row; r * row < flat.end; ++r) {
    // Global start of box row r: its coordinates over dims 0..k-1, then offsets[k].
    int64_t g = d == 0 ? 0 : offsets[size_t(k)] * stride[size_t(k)];
    for (int64_t j = k - 1, rest = r; j >= 0; --j) {
      g += (offsets[size_t(j)] + rest % extents[size_t(j)]) * stride[size_t(j)];
      rest /= extents[size_t(j)];
    }
    const int64_t b = std::max(flat.begin, r * row), e = std::min(flat.end, (r + 1) * row);
    fn(b, g + (b - r * row), e - b);
  }
}

// One run of a saved chunk: `count` global positions from `global`, at `chunk_pos` elements
// into chunk `chunk`.
struct SavedRun {
  int64_t global = 0;
  int64_t count = 0;
  int chunk = 0;
  int64_t chunk_pos = 0;
};

// The saved runs of one (state, tensor), sorted by global position.
struct TensorRuns {
  std::vector<SavedRun> runs;
  void add(const Shape& shape, const std::vector<int64_t>& offsets, const Shape& extents,
           Range flat, int chunk);
  void sort();  // by global position, dropping empty runs; call before map_run
  // Describes the first overlap or gap of the runs against [0, numel), "" when they tile
  // it exactly. `chunk_name` names a chunk in the message.
  std::string tiling_problem(const Shape& shape,
                             const std::function<std::string(int)>& chunk_name) const;
};

// One copy of a load: `count` elements at `chunk_pos` of chunk `chunk` go to `dst_pos` of the
// wanted buffer.
struct CopyOp {
  int chunk = 0;
  int64_t chunk_pos = 0;
  int64_t dst_pos = 0;
  int64_t count = 0;
};

// Maps the global run [global, global + count), which goes to `dst_pos`, onto `saved`;
// appends the copies. Returns the first global position no run covers, or -1.
int64_t map_run(const TensorRuns& saved, int64_t global, int64_t count, int64_t dst_pos,
                std::vector<CopyOp>* ops);

// Why `box` is not a box of a tensor of `shape` (rank, negative or out-of-bounds), "" if it is.
std::string box_problem(const Shape& shape, const std::vector<int64_t>& offsets,
                        const Shape& extents);

// The tp=1 layout of a table: one primary piece per tensor, the whole tensor, at its offset.
// A view of exactly the elements of an earlier one (a tied weight) is left out.
TensorLayout contiguous_layout(const std::vector<TensorInfo>& table);
// The table without those aliasing views: what a checkpoint records.
std::vector<TensorInfo> unique_views(const std::vector<TensorInfo>& table);

// Checks that `layout` tiles [0, numel) in local_offset order with boxes of the tensors of
// `table` (same global shape). Returns the first problem, "" when none.
std::string layout_problem(const TensorLayout& layout, const std::vector<TensorInfo>& table,
                           int64_t numel);
int64_t layout_numel(const TensorLayout& layout);

}  // namespace strata::ckpt
