#include "parallel/layout.h"

#include <algorithm>

#include "core/error.h"
#include "core/shard.h"

namespace strata::parallel {

Range intersect(Range a, Range b) {
  Range r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

ShardLayout::ShardLayout(int64_t psi, int world, int rank) : psi_(psi), world_(world), rank_(rank) {
  STRATA_CHECK(psi >= 0, "parameter count ", psi, " must be >= 0");
  STRATA_CHECK(world >= 1 && rank >= 0 && rank < world, "rank ", rank, " of ", world,
               " is not a valid data-parallel position");
  shard_ = strata::shard_elems(psi, world);
}

Range ShardLayout::shard(int r) const {
  const int64_t b = std::min<int64_t>(int64_t(r) * shard_, psi_);
  const int64_t e = std::min<int64_t>(int64_t(r + 1) * shard_, psi_);
  return {b, e};
}

std::vector<size_t> ShardLayout::split_counts(Range r) const {
  std::vector<size_t> counts(world_);
  for (int i = 0; i < world_; ++i) counts[i] = size_t(intersect(r, shard(i)).size());
  return counts;
}

int64_t ShardLayout::own_offset_in(Range r) const {
  int64_t off = 0;
  for (int i = 0; i < rank_; ++i) off += intersect(r, shard(i)).size();
  return off;
}

std::vector<Bucket> plan_buckets(const std::vector<Range>& units, int64_t cap_elems,
                                 const std::vector<int>& breaks) {
  STRATA_CHECK(cap_elems >= 1, "bucket capacity ", cap_elems, " elements must be >= 1");
  std::vector<Bucket> buckets;
  for (int u = int(units.size()) - 1; u >= 0; --u) {
    const bool split_here = std::find(breaks.begin(), breaks.end(), u + 1) != breaks.end();
    if (!buckets.empty() && u > 0 && !split_here) {
      Bucket& b = buckets.back();
      if (b.range.size() + units[u].size() <= cap_elems) {
        STRATA_CHECK(units[u].end == b.range.begin, "units ", u, " and ", u + 1,
                     " are not contiguous in the flat buffer");
        b.last_unit = u;
        b.range.begin = units[u].begin;
        continue;
      }
    }
    buckets.push_back({u, u, units[u]});
  }
  return buckets;
}

int64_t bucket_cap_elems(double mb, int elem_bytes) {
  return std::max<int64_t>(1, int64_t(mb * double(1 << 20)) / elem_bytes);
}

}  // namespace strata::parallel
