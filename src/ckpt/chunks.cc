#include "ckpt/chunks.h"

#include <set>
#include <unordered_map>

#include "core/error.h"

namespace strata::ckpt {

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t j = shape.size(); j-- > 1;) s[j - 1] = s[j] * shape[j];
  return s;
}

std::string coord_str(const Shape& shape, int64_t pos) {
  std::vector<int64_t> c(shape.size());
  for (size_t j = shape.size(); j-- > 0;) {
    c[j] = shape[j] > 0 ? pos % shape[j] : 0;
    pos = shape[j] > 0 ? pos / shape[j] : 0;
  }
  std::string out = "[";
  for (size_t j = 0; j < c.size(); ++j) out += (j ? ", " : "") + std::to_string(c[j]);
  return out + "]";
}

std::string box_str(const std::vector<int64_t>& offsets, const Shape& extents) {
  std::string out = "[";
  for (size_t j = 0; j < offsets.size() && j < extents.size(); ++j)
    out += cat(j ? ", " : "", offsets[j], ":", offsets[j] + extents[j]);
  return out + "]";
}

void TensorRuns::add(const Shape& shape, const std::vector<int64_t>& offsets,
                     const Shape& extents, Range flat, int chunk) {
  for_each_run(shape, offsets, extents, flat, [&](int64_t box_pos, int64_t global, int64_t n) {
    runs.push_back({global, n, chunk, box_pos - flat.begin});
  });
}

void TensorRuns::sort() {
  // An empty run holds nothing and would hide its neighbour from map_run's search.
  runs.erase(std::remove_if(runs.begin(), runs.end(), [](const SavedRun& r) { return r.count <= 0; }),
             runs.end());
  std::sort(runs.begin(), runs.end(),
            [](const SavedRun& a, const SavedRun& b) { return a.global < b.global; });
}

std::string TensorRuns::tiling_problem(const Shape& shape,
                                       const std::function<std::string(int)>& chunk_name) const {
  const int64_t n = numel(shape);
  int64_t at = 0;
  const SavedRun* prev = nullptr;
  auto gap = [&](int64_t b, int64_t e) {
    return cat("no saved chunk holds elements ", coord_str(shape, b), "..", coord_str(shape, e - 1),
               " (", e - b, " elements)");
  };
  for (const SavedRun& r : runs) {
    if (r.global < at)
      return cat("elements from ", coord_str(shape, r.global), " are saved twice (",
                 chunk_name(prev->chunk), " and ", chunk_name(r.chunk), ")");
    if (r.global > at) return gap(at, r.global);
    at = r.global + r.count;
    prev = &r;
  }
  if (at > n) return cat("chunks reach element ", at, " of a ", n, "-element tensor");
  return at < n ? gap(at, n) : "";
}

int64_t map_run(const TensorRuns& saved, int64_t global, int64_t count, int64_t dst_pos,
                std::vector<CopyOp>* ops) {
  const std::vector<SavedRun>& rs = saved.runs;
  // The last saved run starting at or before `global`.
  auto it = std::upper_bound(rs.begin(), rs.end(), global,
                             [](int64_t g, const SavedRun& r) { return g < r.global; });
  if (it != rs.begin()) --it;
  const int64_t end = global + count;
  int64_t at = global;
  for (; it != rs.end() && at < end; ++it) {
    if (it->global + it->count <= at) continue;
    if (it->global > at) return at;
    const int64_t n = std::min(end, it->global + it->count) - at;
    ops->push_back({it->chunk, it->chunk_pos + (at - it->global), dst_pos + (at - global), n});
    at += n;
  }
  return at < end ? at : -1;
}

std::string box_problem(const Shape& shape, const std::vector<int64_t>& offsets,
                        const Shape& extents) {
  if (offsets.size() != shape.size() || extents.size() != shape.size())
    return cat("box ", box_str(offsets, extents), " has ", offsets.size(), "/", extents.size(),
               " dimensions, the tensor ", shape.size());
  for (size_t j = 0; j < shape.size(); ++j)
    if (offsets[j] < 0 || extents[j] < 0 || offsets[j] + extents[j] > shape[j])
      return cat("box ", box_str(offsets, extents), " lies outside ", shape_str(shape));
  return "";
}

std::vector<TensorInfo> unique_views(const std::vector<TensorInfo>& table) {
  std::vector<TensorInfo> out;
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const TensorInfo& t : table)
    if (seen.insert({t.offset, numel(t.shape)}).second) out.push_back(t);
  return out;
}

TensorLayout contiguous_layout(const std::vector<TensorInfo>& table) {
  TensorLayout out;
  for (const TensorInfo& t : unique_views(table))
    out.push_back({t.name, t.shape, std::vector<int64_t>(t.shape.size(), 0), t.shape, t.offset, true});
  std::sort(out.begin(), out.end(), [](const TensorPiece& a, const TensorPiece& b) {
    return a.local_offset < b.local_offset;
  });
  return out;
}

int64_t layout_numel(const TensorLayout& layout) {
  int64_t n = 0;
  for (const TensorPiece& p : layout) n = std::max(n, p.local_offset + p.numel());
  return n;
}

std::string layout_problem(const TensorLayout& layout, const std::vector<TensorInfo>& table,
                           int64_t numel_local) {
  std::unordered_map<std::string, const TensorInfo*> by_name;
  for (const TensorInfo& x : table) by_name.emplace(x.name, &x);
  int64_t at = 0;
  for (const TensorPiece& p : layout) {
    auto it = by_name.find(p.name);
    if (it == by_name.end()) return cat("piece of unknown tensor '", p.name, "'");
    const TensorInfo* t = it->second;
    if (t->shape != p.global_shape)
      return cat("tensor '", p.name, "' is ", shape_str(p.global_shape), " in the layout, ",
                 shape_str(t->shape), " in the table");
    const std::string box = box_problem(p.global_shape, p.offsets, p.extents);
    if (!box.empty()) return cat("tensor '", p.name, "': ", box);
    if (p.local_offset != at)
      return cat("piece '", p.name, "' ", box_str(p.offsets, p.extents), " starts at ",
                 p.local_offset, ", expected ", at, " (pieces must tile the flat space in order)");
    at += p.numel();
  }
  if (at != numel_local) return cat("pieces cover ", at, " elements of ", numel_local);
  return "";
}

}  // namespace strata::ckpt
